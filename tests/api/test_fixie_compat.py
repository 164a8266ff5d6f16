"""Every GraphQL operation of docs/fixie-wire-contract.md, with the exact query text listed there."""

import json
import os
import re
import subprocess
from datetime import datetime
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse

from codeshot import ids
from codeshot.local.http_server import HttpServer
from codeshot.models import MAX_INT, Agent, AgentKind, Message, MessageType
from codeshot.runner.budgets import AGENT_TOKENS, USER_TOKENS
from codeshot.usecases.tasks import open_session
from codeshot.usecases.users import principal_of
from tests.api.conftest import HANDSHAKE
from tests.conftest import code

ALL_AGENTS = "{ allAgents { agentId name description moreInfoUrl } }"
AGENT_BY_ID = """query ($agentId: String!) { agentById(agentId: $agentId) { agentId handle name description queries moreInfoUrl published owner { __typename ... on UserType { username } ... on OrganizationType { handle } } queryUrl funcUrl created modified } }"""
USER = "{ user { username firstName lastName email organization { handle name } dailyQueryLimit dailyUsedQueries avatar } }"
ALL_SESSIONS = "{ allSessions { handle } }"
SESSION_BY_HANDLE = """query ($handle: String!) { sessionByHandle(handle: $handle) { handle name description frontendAgentId messages { id text sentBy { handle } type inReplyTo { id } timestamp } embeds { key embed { id contentType created contentHash owner { username } url } } } }"""
CREATE_AGENT = """mutation ($handle: String!, $name: String, $description: String, $queryUrl: String, $funcUrl: String, $moreInfoUrl: String, $published: Boolean) { createAgent(agentData: {handle: $handle, name: $name, description: $description, queryUrl: $queryUrl, funcUrl: $funcUrl, moreInfoUrl: $moreInfoUrl, published: $published}) { agent { agentId } } }"""
UPDATE_AGENT = """mutation ($handle: String!, $newHandle: String, $name: String, $description: String, $queryUrl: String, $funcUrl: String, $moreInfoUrl: String, $published: Boolean) { updateAgent(agentData: {handle: $handle, newHandle: $newHandle, name: $name, description: $description, queryUrl: $queryUrl, funcUrl: $funcUrl, moreInfoUrl: $moreInfoUrl, published: $published}) { agent { agentId } } }"""
DELETE_AGENT = """mutation ($owner: String, $handle: String!) { deleteAgent(agentData: {owner: $owner, handle: $handle}) { agent { handle } } }"""
CREATE_SESSION = """mutation ($frontendAgentId: String) { createSession(sessionData: {frontendAgentId: $frontendAgentId}) { session { handle frontendAgentId } } }"""
DELETE_SESSION = """mutation ($handle: String!) { deleteSession(handle: $handle) { session { handle } } }"""
SEND_MESSAGE = """mutation ($session: String!, $text: String!) { sendSessionMessage(messageData: {session: $session, text: $text}) { message { text } } }"""


def register(platform, key, url, handle="genrand", published=True):
    return platform.gql(key, CREATE_AGENT, {
        "handle": handle, "name": "Random", "description": "Random numbers",
        "queryUrl": url, "funcUrl": url, "moreInfoUrl": "https://example.com/genrand",
        "published": published,
    })


def test_agents_register_list_read_update_delete(platform, handshake_agent):
    _, key = platform.user("alice")
    created = register(platform, key, handshake_agent)
    assert created == {"data": {"createAgent": {"agent": {"agentId": "alice/genrand"}}}}

    listed = platform.gql(key, ALL_AGENTS)["data"]["allAgents"]
    assert listed == [{"agentId": "alice/genrand", "name": "Random",
                       "description": "Random numbers",
                       "moreInfoUrl": "https://example.com/genrand"}]

    agent = platform.gql(key, AGENT_BY_ID, {"agentId": "alice/genrand"})["data"]["agentById"]
    assert agent["handle"] == "genrand" and agent["published"] is True
    assert agent["owner"] == {"__typename": "UserType", "username": "alice"}
    assert agent["queries"] == ["Generate a random number between 0 and 100."]
    assert agent["queryUrl"] == handshake_agent and agent["funcUrl"] == handshake_agent
    assert datetime.fromisoformat(agent["created"]) <= datetime.fromisoformat(agent["modified"])

    updated = platform.gql(key, UPDATE_AGENT, {"handle": "genrand", "newHandle": "dice",
                                               "description": "Dice"})
    assert updated["data"]["updateAgent"]["agent"]["agentId"] == "alice/dice"
    assert platform.gql(key, AGENT_BY_ID, {"agentId": "alice/genrand"})["data"]["agentById"] \
        is None
    deleted = platform.gql(key, DELETE_AGENT, {"owner": "alice", "handle": "dice"})
    assert deleted["data"]["deleteAgent"]["agent"]["handle"] == "dice"
    assert platform.gql(key, ALL_AGENTS)["data"]["allAgents"] == []


def test_yaml_handshake_is_understood(platform, handshake_agent):
    _, key = platform.user("dave")
    register(platform, key, handshake_agent + "/yaml", handle="yamly")
    agent = platform.services.registry.get("dave/yamly")
    assert agent.base_prompt == HANDSHAKE["base_prompt"]
    assert agent.few_shots == HANDSHAKE["few_shots"]


def test_user_has_the_listed_fields(platform):
    _, key = platform.user("bob", first_name="Bob", email="bob@example.com")
    user = platform.gql(key, USER)["data"]["user"]
    assert user == {"username": "bob", "firstName": "Bob", "lastName": None,
                    "email": "bob@example.com", "organization": None, "dailyQueryLimit": 1000,
                    "dailyUsedQueries": 0, "avatar": None}


@pytest.fixture(scope="module")
def tokens_agent():
    """An agent whose handshake asks for ``maximum_tokens`` as its path says."""
    app = FastAPI()

    @app.get("/{tokens}/")
    def handshake(tokens: int) -> JSONResponse:
        return JSONResponse(HANDSHAKE | {"response_model": {"maximum_tokens": tokens}})

    server = HttpServer(app, "127.0.0.1", 0)
    yield server.start()
    server.stop()


LLM_SETTINGS = "{ allAgents { agentId llmSettings { maximumTokens } } }"


def test_a_handshake_asking_more_tokens_than_a_listing_can_show_is_refused(platform,
                                                                           tokens_agent):
    """GraphQL's Int is 32-bit: an agent asking 5,000,000,000 tokens made every user's
    allAgents { llmSettings { maximumTokens } } fail (INTERNAL)."""
    _, mallory = platform.user("mallory")
    _, victim = platform.user("victim")
    refused = register(platform, mallory, f"{tokens_agent}/5000000000", handle="greedy")
    assert code(refused) == "AGENT_ERROR" and refused["errors"][0]["message"].endswith(
        "not a valid handshake: expected a JSON or YAML object with type, base_prompt and "
        "few_shots (or sample_queries); response_model.maximum_tokens: Input should be less "
        "than or equal to 2147483647")
    assert platform.services.registry.scan_all() == []
    assert "errors" not in register(platform, mallory, f"{tokens_agent}/{MAX_INT}", handle="big")
    assert platform.gql(victim, LLM_SETTINGS) == {"data": {"allAgents": [
        {"agentId": "mallory/big", "llmSettings": {"maximumTokens": MAX_INT}}]}}


def test_an_agent_stored_asking_more_tokens_still_lists(platform):
    """One registered before handshakes were held to GraphQL's Int reads as asking MAX_INT
    (the same effect: it only lowers the engine's limit)."""
    _, key = platform.user("viewer")
    agent = Agent(agent_id="old/greedy", owner="old", handle="greedy", published=True,
                  kind=AgentKind.CODE_SHOT, func_url="https://example.com/")
    agent.llm_settings = {"model": None, "temperature": None, "maximum_tokens": 5_000_000_000}
    platform.services.registry.create(agent)  # written as an older platform did
    assert platform.gql(key, LLM_SETTINGS) == {"data": {"allAgents": [
        {"agentId": "old/greedy", "llmSettings": {"maximumTokens": MAX_INT}}]}}


def test_tokens_used_past_the_highest_limit_are_shown_at_it(platform, tokens_agent):
    """At a limit of MAX_INT, the last calls each check let through may pass it: the
    user's profile (fixieai's get_current_user) and the agent's count failed, INTERNAL."""
    user_id, key = platform.user("spender", daily_token_limit=MAX_INT)
    assert "errors" not in register(platform, key, f"{tokens_agent}/40", handle="chatty")
    platform.services.usage.add([(USER_TOKENS, user_id), (AGENT_TOKENS, "spender/chatty")],
                                MAX_INT, 1000)
    profile = platform.gql(key, "{ user { dailyTokenLimit dailyUsedTokens } }")
    assert profile == {"data": {"user": {"dailyTokenLimit": MAX_INT, "dailyUsedTokens": MAX_INT}}}
    agent = platform.gql(key, '{ agentById(agentId: "spender/chatty") { dailyUsedTokens } }')
    assert agent == {"data": {"agentById": {"dailyUsedTokens": MAX_INT}}}


def test_sessions_and_messages_round_trip(platform, echo_runner):
    _, key = platform.user()
    handle = platform.gql(key, CREATE_SESSION, {"frontendAgentId": None})[
        "data"]["createSession"]["session"]["handle"]
    assert platform.gql(key, ALL_SESSIONS)["data"]["allSessions"] == [{"handle": handle}]

    sent = platform.gql(key, SEND_MESSAGE, {"session": handle, "text": "hello there"})
    assert sent == {"data": {"sendSessionMessage": {"message": {"text": "hello there"}}}}

    # Old clients take the LAST message as the answer, right after sendSessionMessage.
    session = platform.gql(key, SESSION_BY_HANDLE, {"handle": handle})["data"]["sessionByHandle"]
    assert session["handle"] == handle and session["frontendAgentId"] is None
    query, reply = session["messages"]
    assert (query["text"], query["type"], query["inReplyTo"]) == ("hello there", "query", None)
    assert (reply["text"], reply["type"]) == ("echo: hello there", "response")
    assert reply["inReplyTo"] == {"id": query["id"]} and reply["sentBy"] == {"handle": "echo"}
    assert datetime.fromisoformat(query["timestamp"]) <= datetime.fromisoformat(reply["timestamp"])
    assert session["embeds"] == []
    user = platform.gql(key, "{ user { dailyUsedQueries } }")["data"]["user"]
    assert user["dailyUsedQueries"] == 1

    gone = platform.gql(key, DELETE_SESSION, {"handle": handle})
    assert gone["data"]["deleteSession"]["session"]["handle"] == handle
    assert code(platform.gql(key, SESSION_BY_HANDLE, {"handle": handle})) == "NOT_FOUND"
    assert platform.gql(key, ALL_SESSIONS)["data"]["allSessions"] == []


def test_a_session_embeds_owner_is_its_owners_username(platform):
    """fixieai reads an embed's ``owner { username }``: it was the internal user id."""
    _, key = platform.user("carol")
    handle = platform.gql(key, CREATE_SESSION, {"frontendAgentId": None})[
        "data"]["createSession"]["session"]["handle"]
    sent = platform.gql(key, """mutation ($s: String!) { sendSessionMessage(messageData:
        {session: $s, text: "see", wait: false, embeds: [{key: "a", contentType: "text/plain",
        content: "eA=="}]}) { message { id } } }""", {"s": handle})
    assert "errors" not in sent, sent

    def owners() -> list[dict]:
        session = platform.gql(key, SESSION_BY_HANDLE, {"handle": handle})["data"]["sessionByHandle"]
        return [e["embed"]["owner"] for e in session["embeds"]]

    assert owners() == [{"username": "carol"}]
    # A session stored before sessions kept their owner's name.
    store = platform.services.sessions
    store.db.update_item(TableName=store.table_name, UpdateExpression="REMOVE owner_name",
                         Key={"session_id": {"S": handle}, "item": {"S": "SESSION"}})
    assert owners() == [{"username": "carol"}]


def test_session_with_frontend_agent(platform, handshake_agent):
    carol_id, key = platform.user("carol")
    register(platform, key, handshake_agent, handle="front", published=False)
    made = platform.gql(key, CREATE_SESSION, {"frontendAgentId": "carol/front"})
    assert made["data"]["createSession"]["session"]["frontendAgentId"] == "carol/front"
    _, other = platform.user()
    assert code(platform.gql(other, CREATE_SESSION, {"frontendAgentId": "carol/front"})) \
        == "NOT_FOUND"  # a private agent of someone else is invisible
    # A bare handle is the caller's own agent (fixie's `--agent front`), stored in full;
    # for anyone else it names their own, here none.
    own = platform.gql(key, CREATE_SESSION, {"frontendAgentId": "front"})
    assert own["data"]["createSession"]["session"]["frontendAgentId"] == "carol/front"
    assert platform.gql(key, AGENT_BY_ID, {"agentId": "front"})["data"]["agentById"][
        "handle"] == "front"
    assert code(platform.gql(other, CREATE_SESSION, {"frontendAgentId": "front"})) \
        == "NOT_FOUND"
    # A protocol task (MCP, A2A) named by the bare handle goes on in its session.
    carol = principal_of(platform.services.users.get(carol_id))
    task = open_session(platform.services, carol, "front", None)
    assert task.frontend_agent_id == "carol/front"
    assert open_session(platform.services, carol, "front", task.session_id) == task
    assert open_session(platform.services, carol, "carol/front", task.session_id) == task


def fixieai(fixie_python: Path, platform, key: str, script: str) -> str:
    """What ``script`` prints, run by the real fixieai 1.0.4 client pointed at ``platform``."""
    env = {"PATH": os.environ["PATH"], "FIXIE_API_URL": platform.url, "FIXIE_API_KEY": key}
    out = subprocess.run([str(fixie_python), "-c", script], env=env, capture_output=True,
                         text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def test_the_last_message_is_the_newest_however_long_the_log(platform, fixie_python):
    """DynamoDB ends a query at 1 MB: 80 messages of 15 kB are more, so one read of the
    log stops part-way. fixieai's ``get_messages`` (``messages`` with no arguments) still
    ends with the newest message, and a page asked for ``after`` an id is full."""
    _, key = platform.user()
    handle = platform.gql(key, CREATE_SESSION, {"frontendAgentId": None})[
        "data"]["createSession"]["session"]["handle"]
    logged = [Message(session_id=handle, message_id=ids.ulid(), type=MessageType.RESPONSE,
                      text=f"{n} " + "y" * 15_000, sent_by="platform") for n in range(80)]
    newest = Message(session_id=handle, message_id=ids.ulid(), type=MessageType.RESPONSE,
                     text="THE NEWEST ANSWER", sent_by="platform")
    platform.services.sessions.put_messages([*logged, newest])

    answer = fixieai(fixie_python, platform, key, "from fixieai.client.client import FixieClient"
                     f"\nprint(FixieClient().get_session({handle!r}).get_messages()[-1]['text'])")
    assert answer == "THE NEWEST ANSWER\n"
    every = platform.gql(key, SESSION_BY_HANDLE, {"handle": handle})[
        "data"]["sessionByHandle"]["messages"]
    assert [m["id"] for m in every] == [m.message_id for m in [*logged, newest]]

    page = """query ($h: String!, $a: String, $n: Int) { sessionByHandle(handle: $h) {
        messages(after: $a, limit: $n) { id } } }"""
    after = platform.gql(key, page, {"h": handle, "a": logged[0].message_id, "n": 79})
    assert [m["id"] for m in after["data"]["sessionByHandle"]["messages"]] == [
        m.message_id for m in logged[1:]]
    last = platform.gql(key, page, {"h": handle, "n": 2})  # the newest page, in time order
    assert [m["id"] for m in last["data"]["sessionByHandle"]["messages"]] == [
        logged[-1].message_id, newest.message_id]


@pytest.mark.settings(reply_wait_seconds=1.0)
def test_a_query_that_outlasts_the_reply_wait_says_so(platform, fixie_python):
    """No runner answers: the stream ends with TIMEOUT naming the session (not an empty
    200, which fixieai reads as the answer "" and would send again, charged again)."""
    _, key = platform.user()
    handle = platform.gql(key, CREATE_SESSION, {"frontendAgentId": None})[
        "data"]["createSession"]["session"]["handle"]
    answer = fixieai(fixie_python, platform, key, "from fixieai.client.client import FixieClient"
                     f"\nprint(FixieClient().get_session({handle!r}).query('Roll 2d6'))")
    assert answer.startswith("no reply within 1 s; the query is still running: read session "
                             f"{handle} ")
    headers = {"Authorization": f"Bearer {key}"}
    body = {"session": handle, "message": {"text": "Roll 2d6"}}
    streamed = httpx.post(f"{platform.url}/api/agents/None", json=body, headers=headers,
                          timeout=30)
    assert streamed.status_code == 200
    [line] = [json.loads(x) for x in streamed.text.splitlines()]
    assert (line["type"], line["errorCode"], line["session"]) == ("error", "TIMEOUT", handle)
    plain = httpx.post(f"{platform.url}/api/agents/None", json={**body, "stream": False},
                       headers=headers, timeout=30)
    assert plain.status_code == 504 and plain.json()["error"]["code"] == "TIMEOUT"
    assert f"read session {handle} " in plain.json()["error"]["message"]
    used = platform.gql(key, "{ user { dailyUsedQueries } }")["data"]["user"]
    assert used["dailyUsedQueries"] == 3  # one per query: nothing was sent twice


def test_the_agent_page_url_fixie_serve_prints_leads_to_the_console(platform):
    """`fixie serve` prints <API>/agents/<owner>/<handle>: it answered 404."""
    page = httpx.get(f"{platform.url}/agents/local/secret", follow_redirects=False)
    assert page.status_code == 307
    assert page.headers["location"] == "/console/agents/local/secret"


def test_the_session_url_fixie_console_prints_leads_to_the_console(platform):
    """`fixie console` prints "Connected to: <API>/sessions/<handle>": it answered 404."""
    _, key = platform.user()
    handle = platform.gql(key, CREATE_SESSION, {"frontendAgentId": None})[
        "data"]["createSession"]["session"]["handle"]
    page = httpx.get(f"{platform.url}/sessions/{handle}", follow_redirects=False)
    assert page.status_code == 307
    assert page.headers["location"] == f"/console/sessions/{handle}"
    shown = httpx.get(f"{platform.url}/sessions/{handle}", follow_redirects=True,
                      headers={"HX-Request": "true", "Authorization": f"Bearer {key}"})
    assert shown.status_code == 200 and handle in shown.text


def test_the_console_header_keeps_an_operators_name_apart_from_the_users_link(platform):
    """It read "Signed in as local Users"."""
    user_id, key = platform.user("boss")
    platform.services.users.set_flag(user_id, "operator", True)
    header = httpx.get(f"{platform.url}/console/signed-in",
                       headers={"HX-Request": "true", "Authorization": f"Bearer {key}"})
    assert " ".join(re.sub(r"<[^>]+>", "", header.text).split()) == \
        "Signed in as boss · Users"


def test_head_is_answered_where_get_is_for_uptime_probes(platform):
    """Uptime probes ask with HEAD: `/` answered 405."""
    for path, status in (("/", 307), ("/console", 307), ("/agents/local/dice", 307),
                         ("/console/", 200), ("/console/agents", 200), ("/healthz", 200)):
        got = httpx.head(f"{platform.url}{path}", follow_redirects=False)
        assert (path, got.status_code, got.content) == (path, status, b"")
        assert got.headers.get("location") == httpx.get(
            f"{platform.url}{path}", follow_redirects=False).headers.get("location")


def test_a_session_id_never_reads_as_a_command_line_option():
    """`fixie session open <id>` took an id starting with '-' (1 in 64 of them) for an
    option: "No such option '-G'"."""
    assert not [h for h in (ids.handle() for _ in range(2_000)) if h.startswith("-")]
