"""A standalone (fully custom) agent: no few-shots, it answers each message itself."""

from datetime import UTC, datetime

from codeshot.sdk import AgentResponse, Message, StandaloneAgent


def handle_message(query: Message) -> AgentResponse:
    now = datetime.now(UTC)
    return AgentResponse(Message(f"It is {now:%H:%M} UTC on {now:%A, %d %B %Y}."))


agent = StandaloneAgent(
    handle_message, sample_queries=["What time is it?", "What's the date today?"]
)
