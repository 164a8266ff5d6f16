"""The agent the SDK tests serve: storage, typed arguments, asking the user, a crash."""

from __future__ import annotations

import asyncio

from codeshot.sdk import (
    AgentResponse,
    CodeShotAgent,
    Embed,
    Message,
    UserStorage,
    ask_user,
)

AGENT_ID = "acme/sdkdemo"

FEW_SHOTS = """
Q: Remember my colour is blue
Ask Func[remember]: blue
Func[remember] says: remembered blue
A: I will remember blue.

Q: Add 2 and 3
Ask Func[add]: 2, 3
Func[add] says: 5
A: 2 + 3 = 5.
"""


def demo_agent() -> CodeShotAgent:
    agent = CodeShotAgent("I am a demo agent for SDK tests.", FEW_SHOTS)

    @agent.register_func
    def remember(query: Message, user_storage: UserStorage) -> str:
        user_storage["colour"] = {"name": query.text, "raw": query.text.encode()}
        stored = user_storage["colour"]
        return f"remembered {stored['name']} ({len(stored['raw'])} bytes, keys {sorted(user_storage)})"

    @agent.register_func
    def add(a: int, b: int) -> int:
        """Adds two integers."""
        return a + b

    @agent.register_func(func_name="book")
    def book_table(query: str) -> AgentResponse:
        if "at" not in query.split():
            return ask_user("For what time?")
        return AgentResponse(Message(f"booked {query}", embeds={
            "ticket": Embed("text/plain", "data:text/plain;base64,dGlja2V0")}))

    @agent.register_func
    async def shout(query: str) -> str:  # async def, as FastAPI users write routes
        await asyncio.sleep(0)
        return query.upper()

    @agent.register_func
    def explode(query):
        raise RuntimeError("secret internals")

    @agent.register_func
    def forget(query: str) -> None:  # a Func that forgot to return its answer
        pass

    return agent
