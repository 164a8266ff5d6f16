"""MCP servers registered as agents: servers written here with the `mcp` SDK (MCPServer,
formerly FastMCP) on loopback, registered over GraphQL against the local stack; a Code
Shot agent and the planner call their tools with the right arguments, and hostile
servers end in clear errors with nothing stored."""

from __future__ import annotations

import asyncio
import random
import re

import httpx
import pytest
from mcp.server.mcpserver import MCPServer
from starlette.types import Receive, Scope, Send

from codeshot.local.http_server import HttpServer, mcp_http_server
from codeshot.routing.router import Router
from codeshot.usecases import registration
from tests.protocols.conftest import new_user, stack_with
from tests.raw_server import gzip_bomb

TOKEN = "Bearer warehouse-s3cret"
WAREHOUSE_FEW_SHOTS = [
    "Q: How many of SKU-1234 are in stock?\n"
    'Ask Func[stock_level]: {"sku": "SKU-1234"}\n'
    "Func[stock_level] says: 17\n"
    "A: There are 17 of SKU-1234 in stock."
]
CREATE = """mutation($data: AgentInput!) { createAgent(agentData: $data) {
  agent { agentId name description queries mcpUrl mcpTools kind } } }"""


@pytest.fixture(scope="module")
def stack():
    # Agent calls time out after 2 s here, so the slow servers below are quick to test.
    yield from stack_with(agent_call_timeout_seconds=2.0, reply_wait_seconds=20.0)


def serve(stack, server: MCPServer, authorization: str | None = None) -> str:
    """``server`` on loopback (stateless streamable HTTP); its /mcp URL."""
    http = mcp_http_server(server, authorization)
    stack.agents.append(http)  # stopped with the stack
    return http.start() + "/mcp"


def create_agent(stack, key: str, **data) -> dict:
    reply = httpx.post(f"{stack.api_url}/graphql", json={"query": CREATE, "variables": {
        "data": {"published": True, **data}}}, headers={"Authorization": f"Bearer {key}"},
        timeout=30)
    return reply.json()


def error_code(result: dict) -> str:
    return result["errors"][0]["extensions"]["code"]


def ask(stack, key: str, text: str, agent_id: str | None = None) -> dict:
    """A new session (with ``agent_id``, else the planner) and the reply to ``text``."""
    headers = {"Authorization": f"Bearer {key}"}
    created = httpx.post(f"{stack.api_url}/graphql", headers=headers, timeout=30, json={
        "query": "mutation($a: String) { createSession(sessionData: {frontendAgentId: $a}) "
                 "{ session { handle } } }", "variables": {"a": agent_id}}).json()
    handle = created["data"]["createSession"]["session"]["handle"]
    sent = httpx.post(f"{stack.api_url}/graphql", headers=headers, timeout=60, json={
        "query": "mutation($s: String!, $t: String!) { sendSessionMessage(messageData: "
                 "{session: $s, text: $t}) { reply { text type errorCode sentBy { handle } } } }",
        "variables": {"s": handle, "t": text}}).json()
    return {"session": handle, **sent["data"]["sendSessionMessage"]["reply"]}


@pytest.fixture(scope="module")
def warehouse(stack):
    """An inventory MCP server that needs its Authorization header; the calls it got."""
    calls: list[dict] = []
    levels: dict[str, int] = {}
    server = MCPServer("Warehouse", instructions="Stock levels of the warehouse.")

    @server.tool(description="How many units of a product (by SKU) are in stock")
    def stock_level(sku: str) -> str:
        calls.append({"sku": sku})
        levels.setdefault(sku, random.randint(100, 999))
        return str(levels[sku])

    url = serve(stack, server, TOKEN)
    result = create_agent(stack, stack.state["api_key"], handle="warehouse", mcpUrl=url,
                          mcpAuthorization=TOKEN, fewShots=WAREHOUSE_FEW_SHOTS)
    assert "errors" not in result, result
    return result["data"]["createAgent"]["agent"], calls, levels


def test_a_code_shot_agent_calls_the_servers_tool_with_the_right_arguments(stack, warehouse):
    agent, calls, levels = warehouse
    assert agent["agentId"] == "local/warehouse" and agent["kind"] == "code_shot"
    assert agent["mcpTools"] == ["stock_level"]
    assert "stock_level: How many units of a product" in agent["description"]

    reply = ask(stack, stack.state["api_key"], "How many of SKU-9876 are in stock?",
                "local/warehouse")
    assert calls[-1] == {"sku": "SKU-9876"}  # the Ask line's JSON, as the tool's arguments
    assert reply["type"] == "response", reply
    assert reply["text"] == f"There are {levels['SKU-9876']} of SKU-9876 in stock."


def test_a_server_with_tools_named_as_mcp_allows_registers(stack):
    """MCP tool names may hold '-' and '.': such a server registers, each tool as a Func
    a few-shot can ask (letters, digits and '_')."""
    key = new_user(stack, "toolnames")
    server = MCPServer("Depot", instructions="Stock of the depot.")

    @server.tool(name="stock_level", description="Units of a product in stock")
    def stock_level(sku: str) -> str:
        return "5"

    @server.tool(name="stock-history.v2", description="Past stock levels of a product")
    def history(sku: str) -> str:
        return "5, 6"

    result = create_agent(stack, key, handle="depot", mcpUrl=serve(stack, server),
                          fewShots=WAREHOUSE_FEW_SHOTS)
    assert "errors" not in result, result
    assert sorted(result["data"]["createAgent"]["agent"]["mcpTools"]) == [
        "stock_history_v2", "stock_level"]


def test_the_planner_routes_to_the_mcp_agent_and_its_tool_answers(stack, warehouse):
    _, calls, levels = warehouse
    reply = ask(stack, stack.state["api_key"], "How many of SKU-5555 are in stock?")
    assert calls[-1] == {"sku": "SKU-5555"}
    assert str(levels["SKU-5555"]) in reply["text"], reply
    trace = stack.services.sessions.all_messages(reply["session"])
    assert any(m.sent_by == "local/warehouse" and m.text ==
               f"Func[stock_level] says: {levels['SKU-5555']}" for m in trace)


def test_the_authorization_is_kept_as_a_secret_and_never_shown(stack, warehouse):
    stored = stack.services.registry.get("local/warehouse")
    assert stored.mcp_auth_secret and stored.mcp_auth_secret.startswith(
        "codeshot/agent-auth/local/warehouse/")
    assert stack.services.agent_secrets.client.get_secret_value(
        SecretId=stored.mcp_auth_secret)["SecretString"] == TOKEN
    everything = httpx.post(f"{stack.api_url}/graphql", timeout=30, headers={
        "Authorization": f"Bearer {stack.state['api_key']}"}, json={
        "query": "{ agentById(agentId: \"local/warehouse\") { agentId basePrompt description "
                 "fewShots queries mcpUrl mcpTools } }"}).text
    assert "warehouse-s3cret" not in everything and "agent-auth" not in everything


def test_a_server_with_no_few_shots_is_described_and_routed_by_its_tools(stack):
    server = MCPServer("Units")

    @server.tool(description="Convert a temperature from Celsius to Fahrenheit")
    def celsius_to_fahrenheit(celsius: float) -> str:
        return f"{celsius * 9 / 5 + 32:g}"

    key = new_user(stack, "unitfan")
    result = create_agent(stack, key, handle="units", mcpUrl=serve(stack, server))
    assert "errors" not in result, result
    agent = result["data"]["createAgent"]["agent"]
    assert agent["name"] == "Units"
    assert agent["queries"] == ["Convert a temperature from Celsius to Fahrenheit"]
    router = Router(stack.services.registry, stack.services.embedder)  # not the warm one's cache
    best = router.route("convert 30 celsius to fahrenheit", 1, "unitfan")[0]
    assert best.agent_id == "unitfan/units" and best.fits


def test_the_secret_is_deleted_with_the_agent(stack):
    server = MCPServer("Echo")

    @server.tool(description="Echo a text back")
    def echo(text: str) -> str:
        return text

    key = new_user(stack, "echoer")
    created = create_agent(stack, key, handle="echo", mcpUrl=serve(stack, server, "Bearer e"),
                           mcpAuthorization="Bearer e")
    assert "errors" not in created, created
    secret = stack.services.registry.get("echoer/echo").mcp_auth_secret
    deleted = httpx.post(f"{stack.api_url}/graphql", headers={"Authorization": f"Bearer {key}"},
                         json={"query": 'mutation { deleteAgent(agentData: {handle: "echo"}) '
                                        "{ agent { agentId } } }"}, timeout=30).json()
    assert "errors" not in deleted, deleted
    client = stack.services.agent_secrets.client
    with pytest.raises(client.exceptions.ResourceNotFoundException):
        client.get_secret_value(SecretId=secret)


def secrets_of(stack, owner: str) -> list[str]:
    client = stack.services.agent_secrets.client
    return [s["Name"] for s in client.list_secrets()["SecretList"]
            if s["Name"].startswith(f"codeshot/agent-auth/{owner}/")]


class Slow:
    """An endpoint that takes ``seconds`` to answer anything."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await asyncio.sleep(self.seconds)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})


async def gzip_bombing(scope: Scope, receive: Receive, send: Send) -> None:
    """An endpoint answering 50 MB of JSON as 50 KB of gzip, whatever it was asked."""
    await send({"type": "http.response.start", "status": 200, "headers": [
        (b"content-type", b"application/json"), (b"content-encoding", b"gzip")]})
    await send({"type": "http.response.body", "body": gzip_bomb()})


def test_hostile_servers_are_refused_with_clear_errors_and_nothing_stored(stack,
                                                                          monkeypatch):
    key = new_user(stack, "mallory")
    crowded = MCPServer("Crowded")
    for i in range(100):  # more tools than an agent holds
        crowded.add_tool(lambda: "x", name=f"tool_{i}", description="x" * 50)
    flooding = MCPServer("Flood")

    @flooding.tool(description="Send back a lot")
    def flood() -> str:
        return "x" * 3_000_000  # over the runner's 2 MB reply cap

    slow = HttpServer(Slow(10), "127.0.0.1", 0)
    bombing = HttpServer(gzip_bombing, "127.0.0.1", 0)
    stack.agents.extend([slow, bombing])
    slow_url = slow.start() + "/mcp"
    cases = {
        "crowded": (serve(stack, crowded), "INVALID_INPUT", "more than 64 tools"),
        "private": ("http://10.1.2.3/mcp", "INVALID_INPUT", "not a public address"),
        "slow": (slow_url, "TIMEOUT", "did not answer within 2s"),
        "wrongkey": (serve(stack, flooding, "Bearer right"), "AGENT_ERROR", "MCP server at"),
        "gzipbomb": (bombing.start() + "/mcp", "AGENT_ERROR",
                     "Content-Encoding 'gzip' though asked for none"),
    }
    for handle, (url, code, says) in cases.items():
        result = create_agent(stack, key, handle=handle, mcpUrl=url,
                              mcpAuthorization="Bearer wrong")
        assert error_code(result) == code, (handle, result)
        assert says in result["errors"][0]["message"], (handle, result)
    assert [a for a in stack.services.registry.scan_all() if a.owner == "mallory"] == []
    assert secrets_of(stack, "mallory") == []  # no secret left behind by a refusal

    # Described while the request waits: within API Gateway's 29 s whatever the agents'
    # call timeout (30 s by default: a slow server was a bare 500 from the gateway).
    monkeypatch.setattr(registration, "API_CALL_SECONDS", 1.0)
    result = create_agent(stack, key, handle="slower", mcpUrl=slow_url)
    assert "did not answer within 1s" in result["errors"][0]["message"], result

    # A server that floods its tool's reply is registered, and its query ends in an error.
    created = create_agent(stack, key, handle="flood", mcpUrl=serve(stack, flooding),
                           fewShots=["Q: Flood me\nAsk Func[flood]: {}\nFunc[flood] says: x\n"
                                     "A: x"])
    assert "errors" not in created, created
    reply = ask(stack, key, "Flood me", "mallory/flood")
    assert re.search(r"over 2097152 bytes", reply["text"]), reply
