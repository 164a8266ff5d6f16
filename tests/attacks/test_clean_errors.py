"""Clean errors (#13 item 13): each bad input gets INVALID_INPUT (or the failure's own
code), a clear message, and writes nothing."""

from __future__ import annotations

import base64
import hashlib
import json

import httpx
import pytest

from tests.conftest import code
from tests.runner.conftest import register, session

CREATE = """mutation ($h: String!, $d: String, $f: [String!]) { createAgent(agentData:
  {handle: $h, description: $d, fewShots: $f, basePrompt: "I roll dice.",
   funcUrl: "http://127.0.0.1:9/"}) { agent { agentId } } }"""
SHOT = "Q: Roll 1d20\nAsk Func[roll]: 1d20\nFunc[roll] says: 7\nA: You rolled 7."
POST = """mutation ($s: String!, $t: String!, $k: String, $e: [EmbedInput!]) {
  sendSessionMessage(messageData: {session: $s, text: $t, wait: false, idempotencyKey: $k,
  embeds: $e}) { message { id text } } }"""


def test_a_handle_with_a_trailing_newline_is_refused(platform):
    _, key = platform.user("bob")
    out = platform.gql(key, CREATE, {"h": "abc\n", "f": [SHOT]})
    assert code(out) == "INVALID_INPUT" and "handle" in out["errors"][0]["message"]
    assert platform.services.registry.scan_all() == []


def test_a_content_type_with_a_newline_is_refused_with_a_code(platform):
    user_id, key = platform.user()
    h = session(platform, key)
    embed = {"key": "page", "contentType": "text/html\n",
             "content": base64.b64encode(b"<b>hi</b>").decode()}
    out = platform.gql(key, POST, {"s": h, "t": "see", "e": [embed]})
    assert code(out) == "INVALID_INPUT" and "content type" in out["errors"][0]["message"]
    upload = platform.gql(key, """mutation { createEmbedUpload(contentType: "text/html\\n",
        size: 3, contentHash: "%s") { url } }""" % ("0" * 64))
    assert code(upload) == "INVALID_INPUT"
    assert platform.services.sessions.all_messages(h) == []
    assert platform.services.usage.used("query", user_id) == 0


def test_huge_agent_fields_are_invalid_input_not_internal(platform):
    _, key = platform.user()
    huge = platform.gql(key, CREATE, {"h": "big", "d": "x" * 3_000_000, "f": [SHOT]},
                        timeout=60)
    assert code(huge) == "INVALID_INPUT", huge
    many = platform.gql(key, CREATE, {"h": "many", "f": [SHOT] * 2000}, timeout=60)
    assert code(many) == "INVALID_INPUT" and "few-shots" in many["errors"][0]["message"]
    assert platform.services.registry.scan_all() == []


@pytest.mark.parametrize("query", ["", "   "])
def test_an_empty_sample_query_is_refused(platform, query):
    """It was stored, and listed as one of the agent's sample queries."""
    _, key = platform.user()
    out = platform.gql(key, """mutation ($q: [String!]) { createAgent(agentData: {handle:
        "quiet", fewShots: [], basePrompt: "I help.", sampleQueries: $q}) { agent { agentId } } }""",
                       {"q": ["Help me", query]})
    assert code(out) == "INVALID_INPUT", out
    assert out["errors"][0]["message"] == "a sample query must not be empty"
    assert platform.services.registry.scan_all() == []


def test_a_blank_sample_query_stored_before_it_was_refused_blocks_no_other_change(platform):
    """Stored before blanks were refused, it made every later update INVALID_INPUT."""
    _, key = platform.user()
    made = platform.gql(key, """mutation { createAgent(agentData: {handle: "quiet",
        fewShots: [], basePrompt: "I help.", sampleQueries: ["Help me"]}) { agent { agentId } } }""")
    assert "errors" not in made, made
    agent_id = made["data"]["createAgent"]["agent"]["agentId"]
    registry = platform.services.registry
    stored = registry.get(agent_id)
    registry.replace(stored.replace(sample_queries=["Help me", ""]))
    out = platform.gql(key, """mutation { updateAgent(agentData: {handle: "quiet",
        description: "A new description"}) { agent { description queries } } }""")
    assert "errors" not in out, out
    assert out["data"]["updateAgent"]["agent"] == {"description": "A new description",
                                                   "queries": ["Help me"]}, out


LONG_Q = "Roll " + " ".join(["1d20"] * 150)  # 754 characters: a sample query's cap is 500
CUT_Q = LONG_Q[:499] + "…"


def test_a_few_shots_long_q_line_is_cut_as_a_sample_query_and_updates_still_work(platform):
    """Stored whole as a sample query, it made every later update INVALID_INPUT ("a sample
    query is 754 characters; the limit is 500"), though the few-shot itself is valid."""
    _, key = platform.user()
    shot = f"Q: {LONG_Q}\nAsk Func[roll]: 1d20\nFunc[roll] says: 7\nA: You rolled 7."
    made = platform.gql(key, """mutation ($f: [String!]) { createAgent(agentData: {handle:
        "dice", fewShots: $f, basePrompt: "I roll dice.", funcUrl: "http://127.0.0.1:9/"})
        { agent { queries fewShots } } }""", {"f": [shot]})
    assert "errors" not in made, made
    assert made["data"]["createAgent"]["agent"] == {"queries": [CUT_Q], "fewShots": [shot]}
    out = platform.gql(key, """mutation { updateAgent(agentData: {handle: "dice",
        description: "Rolls dice"}) { agent { description queries } } }""")
    assert "errors" not in out, out
    assert out["data"]["updateAgent"]["agent"] == {"description": "Rolls dice",
                                                   "queries": [CUT_Q]}


def test_a_few_shots_q_line_with_a_tab_is_made_one_line_and_updates_still_work(platform):
    """The grammar takes a tab in a Q line; stored as it was as a sample query, it made
    every later update INVALID_INPUT ("a sample query must be one line"). One already
    stored so no longer blocks an update; one the owner types is still refused."""
    _, key = platform.user()
    shot = "Q: Roll\ta d20\u2028now\nAsk Func[roll]: 1d20\nFunc[roll] says: 7\nA: You rolled 7."
    made = platform.gql(key, """mutation ($f: [String!]) { createAgent(agentData: {handle:
        "dice", fewShots: $f, basePrompt: "I roll dice.", funcUrl: "http://127.0.0.1:9/"})
        { agent { agentId queries fewShots } } }""", {"f": [shot]})
    assert "errors" not in made, made
    agent = made["data"]["createAgent"]["agent"]
    assert (agent["queries"], agent["fewShots"]) == (["Roll a d20 now"], [shot])
    update = """mutation { updateAgent(agentData: {handle: "dice",
        description: "Rolls dice"}) { agent { description queries } } }"""
    out = platform.gql(key, update)
    assert "errors" not in out, out
    assert out["data"]["updateAgent"]["agent"] == {"description": "Rolls dice",
                                                   "queries": ["Roll a d20 now"]}
    registry = platform.services.registry
    registry.replace(registry.get(agent["agentId"]).replace(sample_queries=["Roll\ta d20"]))
    out = platform.gql(key, update)
    assert out["data"]["updateAgent"]["agent"]["queries"] == ["Roll a d20"], out
    given = platform.gql(key, """mutation ($q: [String!]) { updateAgent(agentData: {handle:
        "dice", sampleQueries: $q}) { agent { queries } } }""", {"q": ["Roll\ta d20"]})
    assert code(given) == "INVALID_INPUT", given
    assert "a sample query must be one line" in given["errors"][0]["message"]


def test_a_long_sample_query_stored_before_they_were_cut_blocks_no_other_change(platform):
    _, key = platform.user()
    made = platform.gql(key, """mutation { createAgent(agentData: {handle: "quiet",
        fewShots: [], basePrompt: "I help.", sampleQueries: ["Help me"]}) { agent { agentId } } }""")
    registry = platform.services.registry
    stored = registry.get(made["data"]["createAgent"]["agent"]["agentId"])
    registry.replace(stored.replace(sample_queries=["Help me", LONG_Q]))
    out = platform.gql(key, """mutation { updateAgent(agentData: {handle: "quiet",
        description: "A new description"}) { agent { description queries } } }""")
    assert "errors" not in out, out
    assert out["data"]["updateAgent"]["agent"] == {"description": "A new description",
                                                   "queries": ["Help me", CUT_Q]}, out
    given = platform.gql(key, """mutation ($q: [String!]) { updateAgent(agentData: {handle:
        "quiet", sampleQueries: $q}) { agent { queries } } }""", {"q": [LONG_Q]})
    assert code(given) == "INVALID_INPUT", given  # one the owner writes is still refused
    assert "a sample query is 754 characters; the limit is 500" in given["errors"][0]["message"]


def test_json_nested_100000_deep_is_invalid_input(platform):
    _, key = platform.user()
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    deep = b'{"query": "{ user { username } }", "variables": {"x": ' + b"[" * 100_000 \
        + b"]" * 100_000 + b"}}"
    r = httpx.post(f"{platform.url}/graphql", content=deep, headers=headers, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["code"] == "INVALID_INPUT", r.text[:300]
    user_id = platform.services.users.get_by_username(
        platform.gql(key, "{ user { username } }")["data"]["user"]["username"]).user_id
    token = platform.services.auth.agent_token("x/y", user_id, None)
    r = httpx.post(f"{platform.url}/api/userstorage/x/y/k", timeout=30,
                   content=b'{"data": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
                   headers={"Authorization": f"Bearer {token}",
                            "Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "INVALID_INPUT", r.text[:300]


@pytest.mark.parametrize(("operations", "files_map"), [
    ({"query": "{ user { username } }", "variables": {"f": None}}, []),
    ({"query": "{ user { username } }", "variables": {"f": None}}, {"0": ["variables.f.g"]}),
    ({"query": "{ user { username } }", "variables": {"f": []}}, {"0": ["variables.f.x"]}),
    ({"query": "{ user { username } }"}, {"0": "variables.f"}),
    ({"query": "{ user { username } }"}, {"1": ["variables.f"]}),
    ({"query": "{ user { username } }"}, {"operations": ["variables.f"]}),
    ("{ user { username } }", {}),
    ([{"query": "{ user { username } }"}], {}),
])
def test_a_malformed_multipart_request_is_invalid_input(platform, operations, files_map):
    """A map that is a list, or a path through a null variable, was a 500 (AttributeError,
    TypeError inside Strawberry)."""
    _, key = platform.user()
    r = httpx.post(f"{platform.url}/graphql", files={"0": ("a.txt", b"x")},
                   data={"operations": json.dumps(operations), "map": json.dumps(files_map)},
                   headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "INVALID_INPUT", r.text[:300]


@pytest.mark.parametrize(("method", "body", "content_type", "status"), [
    ("POST", b"not json", "application/json", 400),
    ("POST", b'{"query": 5}', "application/json", 400),
    ("POST", b'{"query": "{ user { username } }", "variables": [1]}', "application/json", 400),
    ("POST", b"{}", "application/json", 400),
    ("POST", b'{"query": "{ user { username } }"}', "text/plain", 400),
    ("GET", b"", "", 400),  # a mutation over GET (in the query string)
    ("PUT", b"{}", "application/json", 405),
])
def test_requests_that_are_not_graphql_get_the_platforms_error(platform, method, body,
                                                               content_type, status):
    """Strawberry answered these in plain text, without a code."""
    _, key = platform.user()
    params = {"query": "mutation { createApiKey { id } }"} if method == "GET" else None
    r = httpx.request(method, f"{platform.url}/graphql", content=body or None, params=params,
                      headers={"Authorization": f"Bearer {key}", "Content-Type": content_type})
    assert r.status_code == status and r.json()["error"]["code"] == "INVALID_INPUT", r.text
    assert r.json()["error"]["message"]


def test_a_lone_surrogate_in_a_variable_is_invalid_input(platform):
    user_id, key = platform.user()
    h = session(platform, key)
    raw = json.dumps({"query": POST, "variables": {"s": h, "t": "bad \ud800 surrogate"}})
    r = httpx.post(f"{platform.url}/graphql", content=raw.encode(),
                   headers={"Authorization": f"Bearer {key}",
                            "Content-Type": "application/json"})
    out = r.json()
    assert code(out) == "INVALID_INPUT" and "surrogate" in out["errors"][0]["message"], out
    assert platform.services.sessions.all_messages(h) == []
    assert platform.services.usage.used("query", user_id) == 0


def test_the_agent_endpoint_checks_text_and_quota_before_making_a_session(platform, agents):
    _, key = platform.user("quoted", daily_query_limit=0)
    agent = register(platform, key, "dice", agents.url + "/dice")
    headers = {"Authorization": f"Bearer {key}"}
    for body, expected in (({"message": {"text": ""}}, 400),
                           ({"message": {"text": "x" * 20_000}}, 400),
                           ({"message": {"text": "Roll 1d20"}}, 429)):
        r = httpx.post(f"{platform.url}/api/agents/{agent}", json=body, headers=headers)
        assert r.status_code == expected, r.text
    assert platform.gql(key, "{ allSessions { handle } }")["data"]["allSessions"] == []


def test_an_idempotency_key_reused_for_other_text_is_a_conflict(platform):
    _, key = platform.user()
    h = session(platform, key)
    first = platform.gql(key, POST, {"s": h, "t": "pay 10", "k": "k-1"})
    assert "errors" not in first
    other = platform.gql(key, POST, {"s": h, "t": "pay 1000", "k": "k-1"})
    assert code(other) == "INVALID_INPUT" and "idempotencyKey" in other["errors"][0]["message"]
    assert [m.text for m in platform.services.sessions.all_messages(h)] == ["pay 10"]


def test_an_idempotency_key_reused_for_other_embed_bytes_is_a_conflict(platform):
    _, key = platform.user()
    h = session(platform, key)

    def post(data: bytes, content_type: str = "text/plain") -> dict:
        embed = {"key": "e", "contentType": content_type,
                 "content": base64.b64encode(data).decode()}
        return platform.gql(key, POST, {"s": h, "t": "see #e", "k": "k-1", "e": [embed]})

    first = post(b"first")
    assert "errors" not in first
    for other in (post(b"second, different"), post(b"first", "application/octet-stream")):
        assert code(other) == "INVALID_INPUT" and "idempotencyKey" in other["errors"][0][
            "message"], other
    assert post(b"first") == first  # the same request again is a retry
    [message] = platform.services.sessions.all_messages(h)
    assert message.embeds["e"].content_hash == hashlib.sha256(b"first").hexdigest()


@pytest.mark.settings(agent_call_timeout_seconds=1.0)
def test_a_func_that_times_out_or_sends_garbage_is_an_error_with_its_code(live, agents):
    _, key = live.user("ted")
    for handle, path, expected in (("slowpoke", "/slow", "TIMEOUT"),
                                   ("junk", "/garbage", "AGENT_ERROR")):
        register(live, key, handle, agents.url + "/dice", published=False)
        agent = live.services.registry.get(f"ted/{handle}")
        live.services.registry.replace(agent.replace(func_url=agents.url + path))
        h = session(live, key, frontend=f"ted/{handle}")
        reply = live.gql(key, """mutation ($s: String!) { sendSessionMessage(messageData:
            {session: $s, text: "Roll 1d20"}) { reply { type errorCode text } } }""",
                         {"s": h}, timeout=90)["data"]["sendSessionMessage"]["reply"]
        assert reply["type"] == "error" and reply["errorCode"] == expected, reply


def test_a_reply_too_large_to_store_is_refused_once_with_its_code(live, agents):
    """#13 item 12: a 1.9 MB Func reply (under the 2 MB cap, over DynamoDB's 400 KB item)
    ends the query as AGENT_ERROR, with the Func called once (not retried, no duplicates)."""
    _, key = live.user("hugo")
    register(live, key, "huge", agents.url + "/dice", published=False)
    agent = live.services.registry.get("hugo/huge")
    live.services.registry.replace(agent.replace(func_url=agents.url + "/huge"))
    before = len([c for c in agents.calls if c[0].startswith("huge/")])
    h = session(live, key, frontend="hugo/huge")
    reply = live.gql(key, """mutation ($s: String!) { sendSessionMessage(messageData:
        {session: $s, text: "Roll 1d20"}) { reply { type errorCode text } } }""",
                     {"s": h}, timeout=90)["data"]["sendSessionMessage"]["reply"]
    assert reply["type"] == "error" and reply["errorCode"] == "AGENT_ERROR", reply
    assert "100000 bytes" in reply["text"] or "failed" in reply["text"], reply
    assert len([c for c in agents.calls if c[0].startswith("huge/")]) - before == 1
    asks = [m for m in live.services.sessions.all_messages(h) if m.type.value == "agent_call"]
    assert len(asks) <= 1


def test_a_sessions_name_and_description_are_checked_before_anything_is_written(platform):
    """A 500,000-character name was a DynamoDB item-size error (INTERNAL) after the
    day's session count was charged; shorter ones, line breaks and NULs were stored."""
    user_id, key = platform.user()
    make = """mutation ($n: String, $d: String) { createSession(sessionData:
      {name: $n, description: $d}) { session { handle } } }"""
    for name, description in (("x" * 500_000, None), ("x" * 201, None), ("a\nb", None),
                              ("a\x00b", None), ("ok", "d" * 2001), ("ok", "a\x00b")):
        out = platform.gql(key, make, {"n": name, "d": description}, timeout=60)
        assert code(out) == "INVALID_INPUT", (len(name), out)
    assert platform.services.sessions.list_by_owner(user_id, 10).items == []
    assert platform.services.usage.used("session", user_id) == 0
    made = platform.gql(key, make, {"n": "Trip planning", "d": "Lisbon\nin May"})
    assert made["data"]["createSession"]["session"]["handle"]


@pytest.mark.parametrize("zone", ["America", "a" * 5000, "../../etc/passwd"])
def test_a_time_zone_that_is_no_zone_name_is_refused_with_a_code(platform, zone):
    # "America" is a directory of the zone database and 5,000 characters a name the
    # file system refuses: both were INTERNAL.
    _, key = platform.user()
    out = platform.gql(key, "mutation($t: String) { setTimeZone(timeZone: $t) { timeZone } }",
                       {"t": zone})
    assert code(out) == "INVALID_INPUT" and "time zone name" in out["errors"][0]["message"]
    assert platform.gql(key, "{ user { timeZone } }")["data"]["user"]["timeZone"] == "UTC"
    ok = platform.gql(key, 'mutation { setTimeZone(timeZone: "America/Lima") { timeZone } }')
    assert ok["data"]["setTimeZone"]["timeZone"] == "America/Lima"


def test_a_document_of_several_operations_runs_only_the_one_named(platform):
    """The GraphQL spec's rule: without operationName such a document is refused; it ran
    its first operation, which could be a mutation the client did not mean to send."""
    user_id, key = platform.user()
    document = "mutation Make { createApiKey { id } } query Me { user { username } }"
    refused = platform.gql(key, document)
    assert code(refused) == "INVALID_INPUT" and refused["data"] is None
    assert "operationName" in refused["errors"][0]["message"]
    assert len(platform.services.users.get(user_id).api_key_ids) == 1  # no key made
    named = httpx.post(f"{platform.url}/graphql", headers={"Authorization": f"Bearer {key}"},
                       json={"query": document, "operationName": "Me"}).json()
    assert named == {"data": {"user": {"username": platform.services.users.get(
        user_id).username}}}


@pytest.mark.parametrize("variables", [{}, {"h": 5}], ids=["missing", "wrong type"])
def test_a_bad_variable_is_invalid_input_not_internal(platform, variables):
    _, key = platform.user()
    out = platform.gql(key, "query ($h: String!) { sessionByHandle(handle: $h) { handle } }",
                       variables)
    assert code(out) == "INVALID_INPUT", out
    assert "$h" in out["errors"][0]["message"]
