"""``codeshot chat``: a console session with the platform, over its public GraphQL API."""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from codeshot.client import GraphQLClient, RemoteError

# The post returns at once (wait: false) and the client asks for the reply each second:
# no API function is paid to sit waiting for the runner (benchmarks/cost.py).
SEND = """mutation ($s: String!, $t: String!) { sendSessionMessage(messageData:
  {session: $s, text: $t, wait: false}) { message { id } } }"""
TRACE = """query ($h: String!, $a: String) { sessionByHandle(handle: $h) {
  messages(after: $a) { id text type errorCode sentBy { handle agentId } inReplyTo { id } }
  } }"""
TERMINAL = ("response", "error", "awaiting_input")
POLL_SECONDS = 1.0
REPLY_TIMEOUT_SECONDS = 180.0  # past the platform's longest query (its time budget)


class ChatClient(GraphQLClient):
    def new_session(self, agent_id: str | None) -> str:
        data = self.call("mutation ($f: String) { createSession(sessionData: "
                         "{frontendAgentId: $f}) { session { handle } } }", {"f": agent_id})
        return str(data["createSession"]["session"]["handle"])

    def send(self, session: str, text: str, timeout: float = REPLY_TIMEOUT_SECONDS
             ) -> tuple[str, dict[str, Any] | None]:
        """Post ``text``; returns its id and its reply (None if none came in ``timeout``)."""
        query_id: str = self.call(SEND, {"s": session, "t": text})[
            "sendSessionMessage"]["message"]["id"]
        deadline = time.monotonic() + timeout
        after = query_id  # each poll reads what is newer than the last it read
        while True:
            time.sleep(POLL_SECONDS)
            for message in self._page(session, after):
                after = message["id"]
                if message["type"] in TERMINAL and message["inReplyTo"] == {"id": query_id}:
                    return query_id, message
            if time.monotonic() >= deadline:
                return query_id, None

    def trace(self, session: str, after: str) -> list[dict[str, Any]]:
        """Every message newer than ``after``, a page at a time (a page ends at 4 MiB)."""
        messages: list[dict[str, Any]] = []
        while page := self._page(session, after):
            messages += page
            after = page[-1]["id"]
        return messages

    def _page(self, session: str, after: str) -> list[dict[str, Any]]:
        page: list[dict[str, Any]] = \
            self.call(TRACE, {"h": session, "a": after})["sessionByHandle"]["messages"]
        return page

    def llm_provider(self) -> str:
        provider: str = self.call("{ llmProvider }")["llmProvider"]
        return provider


REPLAY_NOTICE = ("Note: this platform runs the offline fewshot provider. It is not a language "
                 "model: it replays the agents' examples with your words and the real Func "
                 "results, and says when no example matches. Set CODESHOT_LLM to openai or "
                 "bedrock on the platform for a real model.")


def _read_line(stdin: TextIO, stdout: TextIO) -> str | None:
    """The user's next line (None at Ctrl-D); at a terminal with line editing and history
    (readline, through input())."""
    if stdin is sys.stdin and stdout is sys.stdout and stdin.isatty():
        import readline  # noqa: F401 - imported, it gives input() editing and history

        try:
            return input("> ")
        except EOFError:
            return None
    print("> ", end="", file=stdout, flush=True)
    return stdin.readline() or None


def run_chat(client: ChatClient, agent_id: str | None, show_trace: bool,
             stdin: TextIO = sys.stdin, stdout: TextIO = sys.stdout) -> int:
    session = client.new_session(agent_id)
    print(f"Session {session} with {agent_id or 'the planner'}. Ctrl-D to quit.", file=stdout)
    if client.llm_provider() == "fewshot":
        print(REPLAY_NOTICE, file=stdout)
    while True:
        line = _read_line(stdin, stdout)
        if line is None:
            print(file=stdout)
            return 0
        text = line.strip()
        if not text:
            continue
        try:
            query_id, reply = client.send(session, text)
        except RemoteError as exc:
            print(f"! {exc.code}: {exc.message}", file=stdout)
            continue
        if show_trace:
            for step in client.trace(session, query_id):
                if step["id"] != (reply or {}).get("id"):
                    who = step["sentBy"]["agentId"] or step["sentBy"]["handle"]
                    print(f"  [{step['type']}] {who}: {step['text']}", file=stdout)
        if reply is None:
            print("(no reply yet; it will appear in the session)", file=stdout)
        elif reply["type"] == "error":
            print(f"! {reply['errorCode']}: {reply['text']}", file=stdout)
        else:
            print(reply["text"], file=stdout)
