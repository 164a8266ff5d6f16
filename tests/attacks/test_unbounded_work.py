"""Unbounded work (#13 items 9-10): what one request, or one user, may make the platform
do is bounded and charged."""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import httpx
import jwt
import pytest
from nacl.signing import SigningKey

from codeshot import aws, ids
from codeshot.api.graphql import budget
from codeshot.auth import keys, tokens
from codeshot.auth.keys import KeyRing
from codeshot.auth.service import Auth
from codeshot.models import Message, utcnow
from tests.conftest import code
from tests.runner.conftest import register

USER = "{ user { username } }"


def test_unknown_kids_do_not_hammer_secrets_manager(platform, monkeypatch):
    _, key = platform.user("kid")
    claims = jwt.decode(key, options={"verify_signature": False})
    reads: list[str] = []
    stop = aws.on_call(lambda service, op: reads.append(op) if op == "GetSecretValue" else None)
    forged = [tokens.sign(claims, f"k_forged{i}", SigningKey.generate())
              for i in range(200)]
    began = time.monotonic()
    try:
        with ThreadPoolExecutor(max_workers=8) as pool:
            results = list(pool.map(lambda t: platform.gql(t, USER), forged))
    finally:
        stop()
    took = time.monotonic() - began
    assert {code(r) for r in results} == {"UNAUTHENTICATED"}
    # One read per reload interval at most, however many forged kids arrive (was one each).
    allowed = 1 + int(took // keys.UNKNOWN_KID_RELOAD_SECONDS)
    assert len(reads) <= allowed, f"{len(reads)} reads for 200 forged kids in {took:.1f}s"
    assert platform.gql(key, USER)["data"]["user"]["username"] == "kid"

    # A key rotated in by another container is still picked up, once the interval passed.
    monkeypatch.setattr(keys, "UNKNOWN_KID_RELOAD_SECONDS", 0.5)
    elsewhere = KeyRing(platform.services.settings, clock=platform.clock)
    new_key = elsewhere.rotate()
    platform.clock.now = utcnow() + timedelta(seconds=keys.SIGNING_DELAY_SECONDS)  # it signs
    user = platform.services.users.create("fresh")
    fresh = Auth(platform.services.settings, elsewhere, platform.services.users).issue_api_key(
        user)
    assert jwt.get_unverified_header(fresh)["kid"] == new_key.kid
    time.sleep(0.6)
    assert platform.gql(fresh, USER)["data"]["user"]["username"] == "fresh"


SESSION = "mutation { createSession { session { handle } } }"
UPLOAD = """mutation ($n: Int!, $h: String!) { createEmbedUpload(contentType: "text/plain",
  size: $n, contentHash: $h) { url } }"""


@pytest.mark.settings(daily_session_limit=3, daily_upload_bytes=1000)
def test_sessions_uploads_and_routes_are_counted_per_day(platform, agents):
    user_id, key = platform.user("hoarder", daily_query_limit=2)
    made = [platform.gql(key, SESSION) for _ in range(4)]
    assert [code(m) if "errors" in m else "ok" for m in made] == ["ok"] * 3 + ["RATE_LIMITED"]
    # The streaming agent endpoint makes sessions too: it is refused, and makes none.
    agent = register(platform, key, "dice", agents.url + "/dice")
    r = httpx.post(f"{platform.url}/api/agents/{agent}", json={"message": {"text": "Roll"}},
                   headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 429
    assert len(platform.gql(key, "{ allSessions { handle } }")["data"]["allSessions"]) == 3

    assert "errors" not in platform.gql(key, UPLOAD, {"n": 600, "h": hashlib.sha256(
        b"x").hexdigest()})
    assert code(platform.gql(key, UPLOAD, {"n": 600, "h": hashlib.sha256(
        b"y").hexdigest()})) == "RATE_LIMITED"
    h = made[0]["data"]["createSession"]["session"]["handle"]
    big = {"key": "b", "contentType": "text/plain",
           "content": base64.b64encode(b"y" * 500).decode()}
    out = platform.gql(key, """mutation ($s: String!, $e: [EmbedInput!]) { sendSessionMessage(
        messageData: {session: $s, text: "see", embeds: $e, wait: false}) { message { id } } }""",
                       {"s": h, "e": [big]})
    assert code(out) == "RATE_LIMITED" and "upload" in out["errors"][0]["message"]
    assert platform.services.sessions.all_messages(h) == []
    assert platform.services.usage.used("upload_bytes", user_id) == 600

    routes = [platform.gql(key, '{ route(text: "Roll a d20") { agentId } }') for _ in range(3)]
    assert [code(r) if "errors" in r else "ok" for r in routes] == ["ok", "ok", "RATE_LIMITED"]


FAN_OUT = "{ " + " ".join(f"a{i}: allSessions {{ handle messages {{ text }} embeds {{ key }} }}"
                          for i in range(20)) + " }"


@pytest.mark.settings(daily_agent_changes=2)
def test_agent_registrations_and_updates_are_counted_per_day(platform, agents):
    """Each registration or update reads a handshake and makes every runner reload the
    registry: a user makes CODESHOT_DAILY_AGENT_CHANGES of them a day."""
    _, key = platform.user("churn")
    register(platform, key, "one", agents.url + "/dice")
    bad = platform.gql(key, """mutation { createAgent(agentData: {handle: "Not Valid!",
        queryUrl: "http://127.0.0.1:9/"}) { agent { agentId } } }""")
    taken = platform.gql(key, """mutation ($u: String!) { createAgent(agentData: {handle:
        "one", queryUrl: $u}) { agent { agentId } } }""", {"u": agents.url + "/dice"})
    assert code(bad) == code(taken) == "INVALID_INPUT"  # refused input is not counted
    renamed = platform.gql(key, """mutation { updateAgent(agentData: {handle: "one",
        description: "rolls dice"}) { agent { agentId } } }""")
    assert renamed["data"]["updateAgent"]["agent"]["agentId"] == "churn/one"
    third = platform.gql(key, """mutation ($u: String!) { createAgent(agentData: {handle:
        "two", queryUrl: $u}) { agent { agentId } } }""", {"u": agents.url + "/dice"})
    assert code(third) == "RATE_LIMITED"
    assert [a.agent_id for a in platform.services.registry.scan_all()
            if a.owner == "churn"] == ["churn/one"]
    _, other = platform.user("calm")  # per user
    register(platform, other, "two", agents.url + "/dice")


def test_one_request_cannot_fan_out_into_thousands_of_reads(platform):
    _, key = platform.user("fanout")
    handles = [platform.gql(key, SESSION)["data"]["createSession"]["session"]["handle"]
               for _ in range(12)]
    calls: list[str] = []
    stop = aws.on_call(lambda service, op: calls.append(op))
    try:
        out = platform.gql(key, FAN_OUT)
    finally:
        stop()
    assert code(out) == "INVALID_INPUT" and "5020 storage reads" in out["errors"][0]["message"]
    assert out.get("data") is None
    assert len(calls) <= 1, calls  # the API key's user, nothing more
    # Pages: small ones are fine, and walking them lists each session exactly once.
    seen, after = [], None
    while True:
        page = platform.gql(key, """query ($a: String) { allSessions(after: $a, limit: 5) {
            handle messages(limit: 2) { text } } }""", {"a": after})["data"]["allSessions"]
        seen += [s["handle"] for s in page]
        if len(page) < 5:
            break
        after = page[-1]["handle"]
    assert seen == list(reversed(handles))
    variable = platform.gql(key, "query ($n: Int) { " + " ".join(
        f"a{i}: allSessions(limit: $n) {{ messages {{ text }} }}" for i in range(3)) + " }",
        {"n": 3})
    assert code(variable) == "INVALID_INPUT"  # a variable page counts as the largest


def test_fragments_that_spread_out_exponentially_are_refused_before_validation(platform):
    """25 fragments, each spreading the next twice (1.3 KB, 268 tokens), ask for 2^25
    fields: the validation rules (depth, aliases, cost) spread each use out again, which
    took minutes of one worker's CPU. Refused on the expanded count, at once; a real
    document with fragments (GraphiQL's introspection query) still runs."""
    from graphql import get_introspection_query

    _, key = platform.user()
    chain = " ".join(f"fragment F{i} on UserType {{ ...F{i + 1} ...F{i + 1} }}"
                     for i in range(25))
    bomb = f"query {{ user {{ ...F0 }} }} {chain} fragment F25 on UserType {{ username }}"
    started = time.monotonic()
    out = platform.gql(key, bomb)
    assert time.monotonic() - started < 10  # not minutes
    assert code(out) == "INVALID_INPUT" and "fields once its fragments are spread out" in \
        out["errors"][0]["message"]
    schema = platform.gql(key, get_introspection_query(descriptions=True))
    assert "errors" not in schema and schema["data"]["__schema"]["queryType"]


def test_a_long_poll_costs_every_read_it_makes(platform):
    """``messages(waitSeconds)`` reads until a message comes: 200 sessions polled for 25 s
    each were about 11,000 reads for one request costed at 201."""
    _, key = platform.user("poller")
    for _ in range(3):
        platform.gql(key, SESSION)
    calls: list[str] = []
    stop = aws.on_call(lambda service, op: calls.append(op))
    try:
        many = platform.gql(key, "{ allSessions(limit: 200) { messages(waitSeconds: 25) "
                            "{ text } } }")
        variable = platform.gql(key, """query ($w: Float!) { allSessions(limit: 200) {
            messages(waitSeconds: $w) { text } } }""", {"w": 0})
    finally:
        stop()
    for refused in (many, variable):  # a variable wait counts as the longest
        assert code(refused) == "INVALID_INPUT" and "storage reads" in str(refused["errors"])
    assert len(calls) <= 2, calls  # the API key's user, nothing more
    # One session followed, the way clients do, and a list read without waiting, are fine.
    handle = platform.gql(key, SESSION)["data"]["createSession"]["session"]["handle"]
    one = platform.gql(key, """query ($h: String!) { sessionByHandle(handle: $h) {
        messages(waitSeconds: 0.2) { text } } }""", {"h": handle})
    assert one["data"]["sessionByHandle"]["messages"] == []
    listed = platform.gql(key, "{ allSessions(limit: 20) { messages(waitSeconds: 0) "
                          "{ text } } }")
    assert len(listed["data"]["allSessions"]) == 4


def test_listings_and_the_public_card_scan_the_registry_only_after_a_change(platform, agents):
    """allAgents and the anonymous planner card scanned every agent (vectors included)
    on every request: now a request reads the registry's version, and scans only when a
    write moved it, seeing that write."""
    _, key = platform.user("scanner")
    register(platform, key, "first", agents.url + "/dice")
    calls: list[str] = []
    stop = aws.on_call(lambda service, op: calls.append(op))
    try:
        listed = [platform.gql(key, "{ allAgents(limit: 200) { agentId } }")
                  for _ in range(3)]
        cards = [httpx.get(f"{platform.url}/.well-known/agent-card.json") for _ in range(3)]
        scans_before = calls.count("Scan")
        register(platform, key, "second", agents.url + "/dice")
        after = platform.gql(key, "{ allAgents(limit: 200) { agentId } }")
    finally:
        stop()
    assert all(c.status_code == 200 for c in cards)
    assert "scanner/first" in {a["agentId"] for a in listed[-1]["data"]["allAgents"]}
    assert scans_before <= 1, calls  # six requests: one scan at most (none if cached)
    assert "scanner/second" in {a["agentId"] for a in after["data"]["allAgents"]}


def test_agent_lists_are_paged_and_agent_fields_capped(platform, agents):
    _, key = platform.user("lister")
    huge = platform.gql(key, """mutation ($u: String!, $d: String!) { createAgent(agentData:
        {handle: "huge", queryUrl: $u, description: $d}) { agent { agentId } } }""",
                        {"u": agents.url + "/dice", "d": "d" * 340_000}, timeout=60)
    assert code(huge) == "INVALID_INPUT"
    ids = sorted(register(platform, key, f"a{i}", agents.url + "/dice") for i in range(5))
    seen, after = [], None
    while True:
        page = platform.gql(key, """query ($a: String) { allAgents(after: $a, limit: 2) {
            agentId } }""", {"a": after})["data"]["allAgents"]
        seen += [a["agentId"] for a in page]
        if len(page) < 2:
            break
        after = page[-1]["agentId"]
    assert seen == ids
    r = httpx.post(f"{platform.url}/graphql", json={"query": "{ allAgents(limit: 1000) { "
                   "description fewShots basePrompt } }"},
                   headers={"Authorization": f"Bearer {key}"})
    assert len(r.json()["data"]["allAgents"]) == 5 and len(r.content) < 6 * 1024 * 1024


def yaml_bomb(levels: int) -> str:
    """A handshake of a few hundred bytes whose ``corpora`` is 10**levels values once its
    aliases are walked."""
    lines = ["type: code_shot", "few_shots: []", "a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]"
              for i in range(1, levels + 1)]
    return "\n".join([*lines, f"corpora: [{{bomb: *a{levels}}}]"]) + "\n"


def register_handshake(platform, body: str | bytes, media_type: str) -> dict:
    """createAgent for an agent whose handshake (``GET /``) is ``body``."""
    from fastapi import FastAPI, Response

    from codeshot.local.http_server import HttpServer

    app = FastAPI()
    app.get("/")(lambda: Response(body, media_type=media_type))
    server = HttpServer(app, "127.0.0.1", 0)
    url = server.start()
    try:
        _, key = platform.user()
        return platform.gql(key, """mutation ($u: String!) { createAgent(agentData:
            {handle: "hs", queryUrl: $u}) { agent { agentId } } }""", {"u": url})
    finally:
        server.stop()


def test_a_yaml_handshake_cannot_expand_into_millions_of_values(platform):
    """Aliases are refused: 7 levels would be ten million values for the API to walk."""
    out = register_handshake(platform, yaml_bomb(7), "application/yaml")
    assert code(out) == "AGENT_ERROR" and "aliases" in out["errors"][0]["message"], out
    assert platform.services.registry.scan_all() == []


@pytest.mark.parametrize(("body", "media_type", "says"), [
    # The API answered INVALID_INPUT "the request is nested too deeply": the user's fault.
    (b'{"few_shots": ' + b"[" * 100_000, "application/json", "nested more than 16 levels"),
    (b'{"few_shots": ' + b"[" * 20 + b"]" * 20 + b"}", "application/json",
     "nested more than 16 levels"),
    (b"few_shots: " + b"[" * 20 + b"]" * 20, "application/yaml", "nested more than 16"),
    # 2 MB of YAML kept an API worker parsing for 29.6 s.
    (b"few_shots:\n" + b"- x\n" * 70_000, "application/yaml", "over 262144 bytes: send it"),
])
def test_a_handshake_nested_deep_or_a_large_yaml_one_is_the_agents_error(
        platform, body, media_type, says):
    out = register_handshake(platform, body, media_type)
    assert code(out) == "AGENT_ERROR" and says in out["errors"][0]["message"], out
    assert platform.services.registry.scan_all() == []


def test_a_handshake_is_read_as_yaml_without_libyaml_too(monkeypatch):
    import yaml

    from codeshot.errors import AgentFailed
    from codeshot.runner.handshake import parse_document

    monkeypatch.delattr(yaml, "CSafeLoader", raising=False)
    assert parse_document(b"few_shots: [a, b]", "application/yaml") == {"few_shots": ["a", "b"]}
    for body, says in ((b"few_shots: " + b"[" * 100_000, "nested"),
                       (yaml_bomb(3).encode(), "aliases")):
        with pytest.raises(AgentFailed, match=says):
            parse_document(body, "application/yaml")


FEW_SHOT = "Q: Roll a die\nAsk Func[roll]: 6\nFunc[roll] says: 4\nA: You rolled 4."


@pytest.mark.parametrize(("field", "value", "says"), [
    ("corpora", [{"urls": [f"https://docs.example/{i}/*"]} for i in range(11)],
     "11 corpora; an agent has at most 10"),
    ("corpora", [{"urls": ["https://docs.example/*"],
                  "exclude_patterns": [f"*/{i}/*" for i in range(101)]}],
     "corpus 1's exclude_patterns must be a list of at most 100"),
    ("corpora", [{"urls": [f"https://docs.example/{i}" for i in range(51)]}],
     "corpus 1's urls must be a list of at most 50"),
    ("corpora", [{"urls": ["https://docs.example/" + "a" * 3000]}],
     "corpus 1's urls is 3021 characters; the limit is 2048"),
    ("corpora", [{"urls": [7]}], "corpus 1's urls must be text"),
    ("corpora", [{"urls": ["https://docs.example/*"], "notes": "n" * 100_000}],
     "the corpora are over 100000 characters"),
    ("funcs", [{"name": f"f{i}"} for i in range(101)], "101 funcs; an agent has at most 100"),
    ("funcs", [{"name": "roll-dice"}], "func name 'roll-dice' must be 1-128 letters"),
])
def test_a_handshakes_corpora_and_funcs_are_checked(platform, field, value, says):
    handshake = {"type": "code_shot", "few_shots": [FEW_SHOT], field: value}
    out = register_handshake(platform, json.dumps(handshake), "application/json")
    assert code(out) == "INVALID_INPUT" and says in out["errors"][0]["message"], out
    assert platform.services.registry.scan_all() == []


# 50 few-shots of 3,990 characters, within every cap, but 3 UTF-8 bytes a character:
# about 600 KB, over the 400 KB DynamoDB stores in one item.
WIDE_SHOTS = [f"Q: {'問' * 1990}{i}\nA: {'答' * 1990}" for i in range(50)]


def test_an_agent_over_one_items_bytes_is_refused_before_its_charge(platform):
    user_id, key = platform.user("wide")
    create = """mutation ($h: String!, $s: [String!]) { createAgent(agentData: {handle: $h,
        basePrompt: "I answer.", fewShots: $s}) { agent { agentId } } }"""
    out = platform.gql(key, create, {"h": "big", "s": WIDE_SHOTS}, timeout=60)
    assert code(out) == "INVALID_INPUT" and "bytes stored" in out["errors"][0]["message"], out
    assert platform.services.registry.scan_all() == []
    assert platform.services.usage.used("agent-change", user_id) == 0
    # Nor can an agent that fits grow past it.
    assert "errors" not in platform.gql(key, create, {"h": "small", "s": [FEW_SHOT]})
    out = platform.gql(key, """mutation ($s: [String!]) { updateAgent(agentData: {handle:
        "small", fewShots: $s}) { agent { agentId } } }""", {"s": WIDE_SHOTS}, timeout=60)
    assert code(out) == "INVALID_INPUT" and "bytes stored" in out["errors"][0]["message"], out
    assert platform.services.registry.get("wide/small").few_shots == [FEW_SHOT]
    assert platform.services.usage.used("agent-change", user_id) == 1


def test_a_handshake_over_one_items_bytes_is_refused_and_stores_nothing(platform):
    handshake = {"type": "code_shot", "base_prompt": "I answer.", "few_shots": WIDE_SHOTS}
    out = register_handshake(platform, json.dumps(handshake), "application/json")
    assert code(out) == "INVALID_INPUT" and "bytes stored" in out["errors"][0]["message"], out
    assert platform.services.registry.scan_all() == []


def test_an_agent_stored_before_the_caps_can_still_be_updated(platform):
    """Updates checked the stored funcs and corpora: an agent registered with 150 funcs
    before their cap could never be renamed or described again."""
    _, key = platform.user("veteran")
    made = platform.gql(key, """mutation ($s: [String!]) { createAgent(agentData:
        {handle: "old", basePrompt: "I roll dice.", fewShots: $s}) { agent { agentId } } }""",
        {"s": [FEW_SHOT]})
    assert "errors" not in made, made
    agent_id = made["data"]["createAgent"]["agent"]["agentId"]
    registry = platform.services.registry
    registry.replace(registry.get(agent_id).replace(funcs=[f"f{i}" for i in range(150)]))
    out = platform.gql(key, """mutation { updateAgent(agentData: {handle: "old",
        description: "Rolls dice"}) { agent { description } } }""")
    assert out == {"data": {"updateAgent": {"agent": {"description": "Rolls dice"}}}}, out
    assert len(registry.get(agent_id).funcs or []) == 150


def test_a_request_waits_for_one_reply_at_most(platform):
    """Mutations run one after another, each sendSessionMessage waiting up to the reply
    wait: 21 aliases were accepted (costed at 21) and held a worker for about 525 s."""
    _, key = platform.user("waiter")
    handle = platform.gql(key, SESSION)["data"]["createSession"]["session"]["handle"]
    send = 'm{n}: sendSessionMessage(messageData: {{session: "{h}", text: "hi {n}"{w}}}) ' \
           '{{ message {{ id }} }}'

    def mutation(*waits: str) -> str:
        return "mutation { " + " ".join(send.format(n=n, h=handle, w=w)
                                        for n, w in enumerate(waits)) + " }"

    for refused in (mutation("", ""), mutation("", ", wait: true"),
                    mutation(*[""] * 21)):
        out = platform.gql(key, refused)
        assert code(out) == "INVALID_INPUT" and "waits for one" in str(out["errors"]), out
    assert platform.services.sessions.all_messages(handle) == []  # nothing was posted
    # One waiting and any number not waiting are fine (the wait here ends unanswered).
    out = platform.gql(key, mutation(", wait: false", ", wait: false", ", wait: false"))
    assert len(out["data"]) == 3


@pytest.mark.settings(reply_wait_seconds=2.0)
def test_long_polls_in_mutation_results_wait_once_at_most(platform):
    """A long poll in a mutation's result waits as a reply does: nine aliases of
    ``createSession { session { messages(waitSeconds: 25) } }`` waited 225 s in a row."""
    _, key = platform.user("payloads")
    poll = "session {{ handle messages(waitSeconds: {w}) {{ id }} }}"
    aliases = " ".join(f"a{i}: createSession {{ {poll.format(w=30)} }}" for i in range(5))
    spread = ("mutation { a: createSession { ...S } b: createSession { ...S } } "
              f"fragment S on SessionPayload {{ {poll.format(w='$w')} }}")
    mixed = (f'mutation {{ a: createSession {{ {poll.format(w=30)} }} b: sendSessionMessage('
             f'messageData: {{session: "nope", text: "hi"}}) {{ message {{ id }} }} }}')
    start = time.monotonic()
    for refused in (f"mutation {{ {aliases} }}", spread.replace("mutation", "mutation ($w: "
                                                                "Float!)"), mixed):
        out = platform.gql(key, refused, {"w": 1})
        assert code(out) == "INVALID_INPUT" and "waits for one" in str(out["errors"]), out
    assert time.monotonic() - start < 2.0  # refused before anything ran
    assert platform.gql(key, "{ allSessions { handle } }")["data"]["allSessions"] == []
    # One wait, and polls that do not wait, are fine.
    one = platform.gql(key, "mutation { a: createSession { " + poll.format(w=0.2) + " } "
                       "b: createSession { " + poll.format(w=0) + " } }")
    assert one["data"]["a"]["session"]["messages"] == [], one


def test_a_page_of_messages_costs_the_reads_it_may_make(platform):
    """A page of messages is up to 4 reads of 1 MB, costed as one: 200 sessions' pages
    (up to 800 MB) were accepted at 201."""
    _, key = platform.user("pages")
    out = platform.gql(key, "{ allSessions(limit: 200) { messages { text } } }")
    assert code(out) == "INVALID_INPUT" and "801 storage reads" in str(out["errors"]), out
    fine = platform.gql(key, "{ allSessions(limit: 100) { messages { text } } }")
    assert fine == {"data": {"allSessions": []}}, fine


def test_one_request_holds_a_bounded_amount_of_messages(platform):
    """A page of messages is up to 4 MB: twenty aliases of one were costed 40 and made a
    response of 230 MB (the API process grew from 158 to 961 MB); twenty aliases of a
    page's text, 80 MB."""
    _, key = platform.user("hoarder")
    handle = platform.gql(key, SESSION)["data"]["createSession"]["session"]["handle"]
    stored = [Message(session_id=handle, message_id=ids.ulid(), text="\U0001D11E" * 16_000)
              for _ in range(63)]
    platform.services.sessions.put_messages(stored)  # 4 MB, as one page reads it
    query = "query ($h: String!) {{ {} }}".format
    pages = query(" ".join(f"a{i}: sessionByHandle(handle: $h) {{ messages(limit: 1000) "
                           "{ text } }" for i in range(20)))
    texts = query("sessionByHandle(handle: $h) { messages { "
                  + " ".join(f"t{i}: text" for i in range(20)) + " } }")
    calls: list[str] = []
    stop = aws.on_call(lambda service, op: calls.append(op))
    try:
        many = platform.gql(key, pages, {"h": handle}, timeout=60)
    finally:
        stop()
    assert code(many) == "INVALID_INPUT" and "5,242,880 bytes" in str(many["errors"]), many
    # The pages read side by side (of 4 reads each): the first page taken frees its place
    # for one more before the second passes the budget; none starts once it is spent.
    assert calls.count("Query") <= (budget.READS_AT_ONCE + 1) * 4, calls
    merged = pages.replace("{ text }", "{ id } messages(limit: 1000) { text }")
    assert "5,242,880 bytes" in str(platform.gql(key, merged, {"h": handle})["errors"])
    repeated = platform.gql(key, texts, {"h": handle}, timeout=60)
    assert code(repeated) == "INVALID_INPUT" and "the response would take" in str(
        repeated["errors"]), str(repeated)[:300]
    one = platform.gql(key, query("sessionByHandle(handle: $h) { messages { text } }"),
                       {"h": handle})
    assert "errors" not in one and len(one["data"]["sessionByHandle"]["messages"]) > 50
    ids_only = platform.gql(key, pages.replace("{ text }", "{ id }"), {"h": handle})
    assert "errors" not in ids_only, str(ids_only)[:300]  # counted as answered, not as read


def test_many_sessions_messages_are_read_side_by_side(platform):
    """``allSessions { messages }`` read each session's page after the one before: 100
    sessions were 100 storage round trips in a row. Reads now overlap, a bounded number
    at a time (each read here is held 0.1 s, as a slow store would)."""
    _, key = platform.user("reader")
    for _ in range(12):
        platform.gql(key, SESSION)
    lock, in_flight, most = threading.Lock(), [0], [0]

    def slow_query(service: str, operation: str) -> None:
        if operation != "Query":
            return
        with lock:
            in_flight[0] += 1
            most[0] = max(most[0], in_flight[0])
        time.sleep(0.1)
        with lock:
            in_flight[0] -= 1

    stop = aws.on_call(slow_query)
    try:
        out = platform.gql(key, "{ allSessions(limit: 12) { handle messages { text } } }")
    finally:
        stop()
    assert "errors" not in out and len(out["data"]["allSessions"]) == 12, out
    assert 2 <= most[0] <= budget.READS_AT_ONCE, most


def test_agent_fields_that_read_storage_are_costed(platform, agents):
    """corpusStatus and dailyUsedTokens each read per agent but cost nothing: twenty
    aliases of 100 agents' were 4,000 reads accepted against a limit of 500."""
    _, key = platform.user("counter")
    register(platform, key, "costed", agents.url + "/dice")
    alias = "a{n}: allAgents(limit: 100) {{ corpusStatus {{ state }} dailyUsedTokens }}"
    many = platform.gql(key, "{ " + " ".join(alias.format(n=n) for n in range(20)) + " }")
    assert code(many) == "INVALID_INPUT" and "storage reads" in str(many["errors"])
    one = platform.gql(key, "{ allAgents(limit: 100) { agentId dailyUsedTokens } }")
    assert "errors" not in one, one


def test_the_consoles_updates_read_the_turns_that_ended_once(platform):
    """Each turn that ended after the page's ``after`` read up to 1,000 messages of its
    own to count its steps: 200 queued turns made one request read 180,700 items. Read
    once, the steps are counted where they are: among the new messages, or before."""
    from codeshot.models import MessageType

    _, key = platform.user("consoleupdates")
    handle = platform.gql(key, SESSION)["data"]["createSession"]["session"]["handle"]
    queries = [Message(session_id=handle, message_id=ids.ulid(), text=f"q{n}")
               for n in range(40)]
    platform.services.sessions.put_messages(queries)
    answers = [Message(session_id=handle, message_id=ids.ulid(), text=text, type=kind,
                       in_reply_to=query.message_id, sent_by="platform/planner")
               for query in queries for text, kind in [("step", MessageType.THOUGHT)] * 30
               + [(f"answer to {query.text}", MessageType.RESPONSE)]]
    platform.services.sessions.put_messages(answers)
    after = answers[1].message_id  # the page shows the first turn's first two steps
    calls: list[str] = []
    stop = aws.on_call(lambda service, op: calls.append(op))
    try:
        page = httpx.get(f"{platform.url}/console/sessions/{handle}/updates", timeout=60,
                         params={"after": after},
                         headers={"Authorization": f"Bearer {key}"})
    finally:
        stop()
    # The 1,000 messages after ``after`` end 32 turns (of 31 messages each): every one's
    # steps counted, the first one's on both sides of ``after``.
    assert page.status_code == 200 and "answer to q31" in page.text, page.text[:300]
    assert page.text.count("Trace: 30 steps") == 32, page.text[:300]
    assert calls.count("Query") <= 3, calls  # the new messages, the traces they end
