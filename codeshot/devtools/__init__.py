"""Tools for developing agents against a real platform on loopback: ``codeshot new``,
``codeshot agent test`` and the pytest fixtures of an agent's tests (:mod:`.testing`).

Unlike :mod:`codeshot.sdk` these need the platform (``codeshot-kit[local]``).
"""
