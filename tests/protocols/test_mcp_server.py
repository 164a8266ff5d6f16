"""The platform as an MCP server, driven by the official `mcp` SDK's streamable-HTTP
client against the local stack."""

from __future__ import annotations

import asyncio
import re

import httpx
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.protocols.conftest import new_account, new_user


def connect(stack, key: str | None, **kwargs) -> Client:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    http = httpx2.AsyncClient(headers=headers, timeout=60)
    return Client(streamable_http_client(f"{stack.api_url}/mcp", http_client=http), **kwargs)


def run(coro):
    return asyncio.run(coro)


def test_lists_tools_finds_agents_and_asks_the_planner_with_the_funcs_real_number(stack):
    key = stack.state["api_key"]

    async def session():
        async with connect(stack, key) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            found = await client.call_tool("find_agents", {"text": "Roll a d20", "limit": 2})
            asked = await client.call_tool("ask", {"query": "Roll a d20"})
            return client.protocol_version, tools, found, asked

    version, tools, found, asked = run(session())
    assert version == "2026-07-28"
    assert {"ask", "find_agents", "local.dice", "local.clock", "local.notes"} <= set(tools)
    assert tools["ask"].input_schema["required"] == ["query"]
    assert "Roll a d20" in tools["local.dice"].description  # its sample queries
    assert not found.is_error
    best = found.structured_content["agents"][0]
    assert best["agentId"] == "local/dice" and best["score"] > 0
    assert "Roll a d20" in best["sampleQueries"]
    assert not asked.is_error, asked
    answer = asked.content[0].text
    rolled = re.fullmatch(r"You rolled (\d+)\.", answer)
    assert rolled and 1 <= int(rolled.group(1)) <= 20
    # The number is the Func's own: the session's trace has it as the Func's result.
    session_id = asked.structured_content["session"]
    trace = stack.services.sessions.all_messages(session_id)
    func_results = [m.text for m in trace if m.type.value == "result" and m.sent_by == "local/dice"]
    assert func_results == [f"Func[roll] says: {rolled.group(1)}"]


def test_an_agent_tool_asks_that_agent_directly(stack):
    async def session():
        async with connect(stack, stack.state["api_key"]) as client:
            return await client.call_tool("local.clock", {"query": "What time is it?"})

    result = run(session())
    assert not result.is_error, result
    assert result.structured_content["sentBy"] == "local/clock"
    assert re.search(r"\d\d:\d\d", result.content[0].text)


def test_refused_without_a_key_or_with_a_wrong_one(stack):
    for key in (None, "not-a-key"):
        async def session(key=key):
            async with connect(stack, key) as client:
                await client.list_tools()

        with pytest.raises(ExceptionGroup) as caught:  # the SDK wraps the refusal
            run(session())
        assert caught.group_contains(MCPError)
    refused = httpx.post(f"{stack.api_url}/mcp", json={"jsonrpc": "2.0", "id": 1,
                                                       "method": "tools/list"})
    assert refused.status_code == 401
    assert refused.headers["www-authenticate"].startswith("Bearer")


def test_an_agents_question_is_an_elicitation_the_client_answers(stack, booking):
    agent_id, made = booking
    asked: list[str] = []

    async def answer(context, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"answer": "3"})

    async def session():
        async with connect(stack, stack.state["api_key"], elicitation_callback=answer) as client:
            return await client.call_tool("ask", {"query": "Book a table at Mario's",
                                                  "agent": agent_id})

    result = run(session())
    assert asked == ["For how many people?"]
    assert not result.is_error, result
    assert made[-1] == "Mario's for 3"
    assert "Booked Mario's for 3" in result.content[0].text


def test_a_client_without_elicitation_is_told_what_to_answer(stack, booking):
    agent_id, made = booking
    key = new_user(stack, "mcpnoelicit")

    async def session():
        async with connect(stack, key) as client:
            first = await client.call_tool("ask", {"query": "Book a table at Roma",
                                                   "agent": agent_id})
            session_id = first.structured_content["session"]
            second = await client.call_tool("ask", {"query": "2", "session": session_id,
                                                    "agent": agent_id})
            return first, second

    first, second = run(session())
    assert first.structured_content["status"] == "input_required"
    assert "The agent asks: For how many people?" in first.content[0].text
    assert first.structured_content["session"] in first.content[0].text
    assert made[-1] == "Roma for 2"
    assert "Booked Roma for 2" in second.content[0].text


def test_a_declined_elicitation_cancels_the_question(stack, booking):
    agent_id, _ = booking

    async def decline(context, params):
        return types.ElicitResult(action="decline")

    async def session():
        async with connect(stack, stack.state["api_key"], elicitation_callback=decline) as c:
            return await c.call_tool("ask", {"query": "Book a table at Vesuvio",
                                             "agent": agent_id})

    result = run(session())
    assert result.structured_content["status"] == "canceled"
    session_id = result.structured_content["session"]
    last = stack.services.sessions.all_messages(session_id)[-1]
    assert (last.type.value, last.error_code) == ("error", "CANCELED")
    assert stack.services.sessions.get(session_id).status.value == "idle"


def test_bad_arguments_and_unknown_tools_are_clear_errors(stack):
    async def session():
        async with connect(stack, stack.state["api_key"]) as client:
            out = [await client.call_tool("find_agents", {"text": "dice", "limit": 99}),
                   await client.call_tool("ask", {"query": "x" * 20_000}),
                   await client.call_tool("ask", {"query": "hi", "session": "nope"})]
            for name, arguments in (("no_such_tool", {}), ("ask", {"text": "hi"}),
                                    ("find_agents", {"query": "dice"})):
                try:
                    await client.call_tool(name, arguments)
                except MCPError as exc:
                    out.append(exc)
            return out

    too_many, too_long, no_session, unknown, no_query, no_text = run(session())
    # A missing argument is a protocol error (as the README says), not a tool's result;
    # find_agents takes `text`, ask `query`.
    assert (no_query.error.code, no_query.error.message) == (
        types.INVALID_PARAMS, "query must be a non-empty string")
    assert (no_text.error.code, no_text.error.message) == (
        types.INVALID_PARAMS, "text must be a non-empty string")
    assert too_many.is_error and "INVALID_INPUT" in too_many.content[0].text
    assert too_long.is_error and "INVALID_INPUT" in too_long.content[0].text
    assert no_session.is_error and no_session.content[0].text.startswith("NOT_FOUND")
    assert "Unknown tool" in str(unknown)


def test_another_users_session_is_not_found(stack):
    async def session(key, **args):
        async with connect(stack, key) as client:
            return await client.call_tool("ask", args)

    mine = run(session(stack.state["api_key"], query="What time is it?"))
    theirs = run(session(new_user(stack, "mcpother"), query="What time is it?",
                         session=mine.structured_content["session"]))
    assert theirs.is_error and theirs.content[0].text.startswith("NOT_FOUND")


def test_malformed_json_rpc_and_oversized_bodies_are_protocol_errors(stack):
    headers = {"Authorization": f"Bearer {stack.state['api_key']}",
               "Accept": "application/json, text/event-stream",
               "Content-Type": "application/json", "MCP-Protocol-Version": "2025-06-18"}

    def post(body: str) -> httpx.Response:
        return httpx.post(f"{stack.api_url}/mcp", headers=headers, content=body, timeout=30)

    garbage = post("{garbage")
    assert garbage.status_code == 400 and garbage.json()["error"]["code"] == -32700
    unknown = post('{"jsonrpc": "2.0", "id": 1, "method": "no/such/method", "params": {}}')
    assert unknown.json()["error"]["code"] == -32601  # METHOD_NOT_FOUND
    huge = post('{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "ask", '
                '"arguments": {"query": "' + "x" * (5 * 1024 * 1024) + '"}}}')
    assert huge.status_code == 413


def test_get_is_405_not_a_stream_and_a_refusal_has_the_stable_error_shape(stack):
    auth = {"Authorization": f"Bearer {stack.state['api_key']}"}
    listen = httpx.get(f"{stack.api_url}/mcp", timeout=5, headers={
        **auth, "Accept": "text/event-stream", "MCP-Protocol-Version": "2025-06-18"})
    assert listen.status_code == 405 and listen.headers["allow"] == "POST"
    refused = httpx.post(f"{stack.api_url}/mcp", json={"jsonrpc": "2.0", "id": 1,
                                                       "method": "tools/list"})
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "UNAUTHENTICATED"
    assert refused.json()["error"]["message"]


def test_a_refused_ask_makes_no_session(stack):
    user, key = new_account(stack, "mcprefused")

    async def session():
        async with connect(stack, key) as client:
            return [await client.call_tool("ask", {"query": query})
                    for query in ("x" * 20_000, "a\u0000b")]

    results = run(session())
    assert all(r.is_error and r.content[0].text.startswith("INVALID_INPUT") for r in results)
    owner = user.user_id
    assert stack.services.sessions.count_by_owner(owner) == 0
    assert stack.services.usage.used("session", owner) == 0


def test_a_replayed_answer_is_posted_once(stack, booking):
    agent_id, made = booking
    answer = {"answer": types.ElicitResult(action="accept", content={"answer": "2"})}

    async def session():
        async with connect(stack, stack.state["api_key"],
                           elicitation_callback=lambda *_: None) as client:
            args = {"query": "Book a table at Dante's", "agent": agent_id}
            asked = await client.session.call_tool("ask", args, allow_input_required=True)
            assert isinstance(asked, types.InputRequiredResult), asked
            # The answer sent twice, as a client retrying (or a replay of the state) would.
            return [await client.call_tool("ask", args,
                                           input_responses=answer,
                                           request_state=asked.request_state)
                    for _ in range(2)]

    first, replayed = run(session())
    assert not first.is_error, first
    assert replayed.content[0].text == first.content[0].text
    assert [m for m in made if m.startswith("Dante's")] == ["Dante's for 2"]
    session_id = first.structured_content["session"]
    queries = [m.text for m in stack.services.sessions.all_messages(session_id)
               if m.type.value == "query"]
    assert queries == ["Book a table at Dante's", "2"]


@pytest.mark.settings(mcp_agent_tools=60)
def test_every_agent_tool_the_setting_allows_is_listed_and_called(platform):
    """``CODESHOT_MCP_AGENT_TOOLS`` allows 200, but the list stopped at a page of 50: the
    51st agent's tool was an unknown tool."""
    from codeshot.models import Agent

    _, key = platform.user("manyagents")
    for n in range(55):
        platform.services.registry.create(Agent(
            agent_id=Agent.make_id("manyagents", f"a{n:02d}"), owner="manyagents",
            handle=f"a{n:02d}", name=f"agent {n}", description="test agent",
            query_url="http://127.0.0.1:9/agent", published=True))
    tools = platform.rpc(key, "/mcp", "tools/list", {}).json()["result"]["tools"]
    assert len(tools) == 2 + 55, [t["name"] for t in tools]
    last = platform.rpc(key, "/mcp", "tools/call", {"name": tools[-1]["name"], "arguments": {
        "query": "hello", "session": "nosuchsession"}}).json()
    assert last["result"]["content"][0]["text"].startswith("NOT_FOUND"), last


def test_an_answer_to_a_question_since_replaced_changes_nothing(stack, booking):
    """A sealed state stays valid for an hour: declined, it canceled whatever question
    was pending by then; accepted, its answer answered that later question."""
    agent_id, made = booking
    user, key = new_account(stack, "mcpstale")
    owner = user.user_id
    accept = {"answer": types.ElicitResult(action="accept", content={"answer": "9"})}
    decline = {"answer": types.ElicitResult(action="decline")}

    async def session():
        async with connect(stack, key, elicitation_callback=lambda *_: None) as client:
            args = {"query": "Book a table at Nero's", "agent": agent_id}
            stale = await client.session.call_tool("ask", args, allow_input_required=True)
            [session] = stack.services.sessions.list_by_owner(owner).items
            session_id = session.session_id
            # Answered without the state; then the session asks a new question.
            await client.call_tool("ask", {"query": "2", "session": session_id})
            await client.session.call_tool("ask", {"query": "Book a table at Otto's",
                                                   "session": session_id},
                                           allow_input_required=True)
            return session_id, [await client.call_tool(
                "ask", args, input_responses=answer, request_state=stale.request_state)
                for answer in (accept, decline)]

    session_id, replies = run(session())
    for reply in replies:
        assert reply.is_error and reply.content[0].text.startswith("INVALID_INPUT") \
            and "no longer waits on that question" in reply.content[0].text, reply
    last = stack.services.sessions.all_messages(session_id)[-1]
    assert (last.type.value, last.text) == ("awaiting_input", "For how many people?")
    assert [m for m in made if m.startswith(("Nero's", "Otto's"))] == ["Nero's for 2"]


@pytest.mark.settings(reply_wait_seconds=0.5)
def test_ask_in_a_new_session_reads_its_agent_once(platform, monkeypatch):
    """The agent is checked before a waiting slot is taken (bad input makes nothing); the
    session is then made with the agent that check read, not read again."""
    from codeshot.models import Agent

    _, key = platform.user("oneread")
    agent_id = Agent.make_id("oneread", "echo")
    registry = platform.services.registry
    registry.create(Agent(agent_id=agent_id, owner="oneread", handle="echo", name="echo",
                          description="test agent", query_url="http://127.0.0.1:9/agent"))
    reads: list[str] = []
    real = registry.get

    def counted(read: str, *args, **kwargs):
        reads.append(read)
        return real(read, *args, **kwargs)

    monkeypatch.setattr(registry, "get", counted)
    asked = platform.rpc(key, "/mcp", "tools/call", {"name": "ask", "arguments": {
        "query": "hello", "agent": agent_id}}).json()
    assert "structuredContent" in asked["result"], asked
    session_id = asked["result"]["structuredContent"]["session"]  # made; no runner answers
    assert platform.services.sessions.get(session_id).frontend_agent_id == agent_id
    assert reads.count(agent_id) == 1, reads
