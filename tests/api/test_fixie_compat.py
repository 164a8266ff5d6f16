"""Every GraphQL operation of docs/fixie-wire-contract.md, with the exact query text listed there."""

from datetime import datetime

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
