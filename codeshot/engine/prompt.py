"""Prompt text: what the LLM sees, and how the offline ``fewshot`` provider reads it back.

Layout: one system message (base prompt, directives, commands, the line protocol), the
component messages (few-shot examples under ``EXAMPLES_HEADER``, history, embeds), then
one user message holding the transcript of the current query under
``TRANSCRIPT_HEADER``. The headers make the examples and the transcript recoverable.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from codeshot.engine.components import Command
from codeshot.engine.fewshot import FewShot, Step, parse_few_shots, parse_transcript
from codeshot.llm.base import ChatMessage

EXAMPLES_HEADER = "Examples of questions and how they were answered:"
TRANSCRIPT_HEADER = "Continue this transcript with its next lines:"
HISTORY_HEADER = "Earlier in this conversation:"
EMBEDS_HEADER = "Embeds in this session (refer to them as #key):"
CORRECTION_HEADER = "Your previous reply to this transcript could not be used:"

# Where the model must stop, most important first (servers take four, the provider cuts
# at the rest). "] says:" ends a reply the moment the model starts a Func's or an agent's
# says line, which only the engine writes: the reply then ends with "Func[name]", and the
# engine knows which reply the model was about to invent.
STOP_SEQUENCES = ["] says:", "\nUser says:", "\nQ:", TRANSCRIPT_HEADER]
# Echoes of this prompt's own headers and chat-template tokens that small models print.
ECHO_STOPS = [EXAMPLES_HEADER, HISTORY_HEADER, EMBEDS_HEADER, CORRECTION_HEADER, "[INST]",
              "[/INST]", "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<end_of_turn>",
              "<start_of_turn>", "</s>"]
# Ask lines written out in the protocol, one per command up to this many.
_SHOWN_COMMANDS = 6


def protocol(commands: Sequence[Command]) -> str:
    """How to write the transcript, with the agent's real command names (a placeholder such
    as "Func[name]" is what small models copy)."""
    asks = [f"Ask {c.kind.capitalize()}[{c.name}]: <{_placeholder(c)}>"
            for c in commands[:_SHOWN_COMMANDS]]
    lines = [
        "Answer by writing the next lines of the transcript, one step per line:",
        "Thought: <your reasoning, when it helps>",
        *asks,
        "Ask User: <a question only the user can answer>",
        "A: <the final answer to the question>",
        "After an Ask line, stop: its reply comes back on the next line, written for you.",
        'Never write a "says:" line or a "Q:" line yourself. Use only the commands listed.',
    ]
    if commands:  # small models answer with an example's values instead of asking
        lines.append("Numbers, dates and times in an answer come from this transcript's "
                     "replies: ask for them, never reuse an example's.")
    return "\n".join(lines)


def _placeholder(command: Command) -> str:
    if command.kind == "agent":
        return "message"
    return "one JSON object of its parameters" if command.parameters.get("type") == "object" \
        else "input"


def correction_message(problem: str, commands: Sequence[Command]) -> ChatMessage:
    """What the model is told after a reply the engine could not use."""
    asks = [f"Ask {c.kind.capitalize()}[{c.name}]: ..." for c in commands[:_SHOWN_COMMANDS]]
    steps = " or ".join(f'"{a}"' for a in asks)
    way = f"with one step: {steps} (then stop), or \"A: ...\"" if asks else 'with "A: ..."'
    return ChatMessage(
        "user", f"{CORRECTION_HEADER} {problem}. Continue the transcript below {way}."
    )


def _section(title: str, items: Sequence[str]) -> str:
    return f"{title}:\n" + "\n".join(f"- {item}" for item in items) if items else ""


def _describe(command: Command) -> str:
    label = f"{command.kind.capitalize()}[{command.name}]"
    params = (
        ""
        if command.parameters == {"type": "string"}
        else (f" Parameters (JSON schema): {json.dumps(command.parameters, sort_keys=True)}")
    )
    return f"{label}: {command.description}{params}" if command.description or params else label


def system_prompt(
    base_prompts: Sequence[str],
    constraints: Sequence[str],
    resources: Sequence[str],
    best_practices: Sequence[str],
    commands: Sequence[Command],
) -> str:
    parts = [
        "\n\n".join(base_prompts),
        _section("Constraints", constraints),
        _section("Resources", resources),
        _section("Best practices", best_practices),
        _section("Commands", [_describe(c) for c in commands]),
        protocol(commands),
    ]
    return "\n\n".join(part for part in parts if part)


def examples_message(few_shots: Sequence[FewShot]) -> ChatMessage:
    blocks = "\n\n".join(shot.render() for shot in few_shots)
    return ChatMessage("user", f"{EXAMPLES_HEADER}\n\n{blocks}")


def transcript_message(transcript: Sequence[Step]) -> ChatMessage:
    lines = "\n".join(step.render() for step in transcript)
    return ChatMessage("user", f"{TRANSCRIPT_HEADER}\n\n{lines}\n")


def read_examples(messages: Sequence[ChatMessage]) -> list[FewShot]:
    """The few-shots of every examples message in a prompt built here."""
    return [
        shot
        for message in messages
        if message.content.startswith(EXAMPLES_HEADER)
        for shot in parse_few_shots(message.content.removeprefix(EXAMPLES_HEADER))
    ]


def read_transcript(messages: Sequence[ChatMessage]) -> list[Step]:
    """The current transcript of a prompt built here (empty if there is none)."""
    for message in reversed(messages):
        if message.content.startswith(TRANSCRIPT_HEADER):
            return parse_transcript(message.content.removeprefix(TRANSCRIPT_HEADER))
    return []
