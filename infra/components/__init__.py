"""One construct per logical unit; the stacks in ``infra/`` only wire these together."""
