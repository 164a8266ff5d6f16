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

# The LLM stops right after an Ask line: the engine, not the model, writes the reply.
# Four at most: OpenAI-compatible servers accept no more.
STOP_SEQUENCES = ["\nFunc[", "\nAgent[", "\nUser says:", "\nQ:"]

EXAMPLES_HEADER = "Examples of questions and how they were answered:"
TRANSCRIPT_HEADER = "Continue this transcript with its next lines:"

PROTOCOL = """\
Answer by writing the next lines of the transcript, one step per line:
Thought: <reasoning, optional>
Ask Func[name]: <input> - call a Func; stop after this line, its reply comes back as \
"Func[name] says: ..."
Ask Agent[id]: <message> - ask another agent; its reply comes back as "Agent[id] says: ..."
Ask User: <question> - when only the user can supply something; stop after this line
A: <the final answer to the question>
Use only the commands listed. Never write a "says:" line yourself."""


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
        PROTOCOL,
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
