"""Queries answered end to end: API -> SQS -> runner -> planner/router -> agent -> Func."""

import io
import re

import httpx
import pytest

from codeshot.chat import ChatClient, run_chat
from tests.conftest import code
from tests.runner.conftest import (
    closed_port_url,
    messages,
    misbehaving,
    register,
    send,
    session,
    status,
)


def test_roll_2d6_through_the_planner(live, agents):
    _, key = live.user("alice")
    register(live, key, "dice", agents.url + "/dice")
    register(live, key, "booking", agents.url + "/booking")
    h = session(live, key)
    sent = send(live, key, h, "Roll 2d6")
    trace = messages(live, key, h)
    reply = trace[-1]
    assert reply["type"] == "response" and sent["reply"]["id"] == reply["id"]
    rolled = agents.rolls[-1]  # the Func's real result, e.g. "3 + 5 = 8"
    assert re.fullmatch(r"\d \+ \d = \d+", rolled)
    assert rolled in reply["text"]
    kinds = [(m["type"], m["sentBy"]["agentId"]) for m in trace]
    assert kinds == [
        ("query", None),
        ("thought", "platform/planner"),       # the router's proposal
        ("agent_call", "platform/planner"),    # Ask Agent[alice/dice]: Roll 2d6
        ("func_call", "alice/dice"),           # Ask Func[roll]: 2d6
        ("result", "alice/dice"),              # Func[roll] says: ...
        ("result", "platform/planner"),        # Agent[alice/dice] says: ...
        ("response", "platform/planner"),
    ]
    assert trace[1]["text"].startswith("Router proposes: alice/dice")
    assert trace[2]["text"] == "Ask Agent[alice/dice]: Roll 2d6"
    assert trace[3]["text"] == "Ask Func[roll]: 2d6"
    assert all(m["inReplyTo"] == {"id": trace[0]["id"]} for m in trace[1:])
    # The Func got a real agent JWT for this user, session and agent.
    path, text, bearer = agents.calls[-1]
    claims = live.services.auth.principal_for_agent_token(bearer.split()[1])
    assert (path, text, claims.agent_id, claims.session_id) == ("dice/roll", "2d6", "alice/dice", h)
    assert status(live, key, h) == "idle"


def test_session_with_a_frontend_agent_talks_to_it_directly(live, agents):
    _, key = live.user("bob")
    dice = register(live, key, "dice", agents.url + "/dice", published=False)
    h = session(live, key, frontend=dice)
    send(live, key, h, "Roll 1d20")
    trace = messages(live, key, h)
    assert [m["type"] for m in trace] == ["query", "func_call", "result", "response"]
    assert trace[-1]["text"] == f"You rolled {agents.rolls[-1]}."


def test_standalone_agent_answers_with_its_last_response(live, agents):
    _, key = live.user("carl")
    echo = register(live, key, "echo", agents.url + "/standalone")
    assert live.services.registry.get(echo).kind.value == "standalone"
    direct = session(live, key, frontend=echo)
    assert send(live, key, direct, "hello")["reply"]["text"] == "You said: hello"
    routed = session(live, key)  # through the planner: routed by its sample query
    reply = send(live, key, routed, "Repeat after me: good morning")["reply"]
    assert reply == {**reply, "type": "response",
                     "text": "You said: Repeat after me: good morning"}


@pytest.mark.settings(agent_token_ttl_seconds=1, reply_wait_seconds=20)
def test_a_standalone_agent_streaming_past_its_token_ttl_still_reaches_storage(live, agents):
    """A standalone agent may stream for the query's whole time: its call token lives as
    long as the call may, not the shorter lifetime of a Func call's token."""
    _, key = live.user("lena")
    late = register(live, key, "late", agents.url + "/late")
    h = session(live, key, frontend=late)
    assert send(live, key, h, "take your time")["reply"]["text"] == "storage answered 200"


def test_ask_user_pauses_and_resumes(live, agents):
    _, key = live.user("dora")
    booking = register(live, key, "booking", agents.url + "/booking")
    h = session(live, key, frontend=booking)
    first = send(live, key, h, "Book a table at Mario's")
    assert first["reply"]["type"] == "awaiting_input"
    assert first["reply"]["text"] == "For how many people?"
    assert status(live, key, h) == "awaiting_input"
    second = send(live, key, h, "2")
    assert second["reply"]["type"] == "response"
    assert "Booked Mario's" in second["reply"]["text"]
    assert status(live, key, h) == "idle"
    trace = messages(live, key, h)
    assert [m["type"] for m in trace] == ["query", "awaiting_input", "query", "func_call",
                                          "result", "response"]


@pytest.mark.settings(agent_call_timeout_seconds=1.0, reply_wait_seconds=20.0)
@pytest.mark.slow
def test_agents_down_broken_slow_or_garbled_end_in_one_error(live, agents):
    _, key = live.user("eve")
    cases = {"down": closed_port_url() + "/x", "broken": agents.url + "/broken",
             "garbage": agents.url + "/garbage", "empty": agents.url + "/empty",
             "slow": agents.url + "/slow",
             "unresolved": "http://dice.invalid/x",  # RFC 6761: never resolves
             "busy": agents.url + "/busy"}
    for handle, url in cases.items():
        # Register with the dice handshake, then point the Funcs at the faulty agent.
        register(live, key, handle, agents.url + "/dice", published=False)
        agent = live.services.registry.get(f"eve/{handle}")
        live.services.registry.replace(agent.replace(func_url=url))
    expected = {"down": "AGENT_UNAVAILABLE", "broken": "AGENT_ERROR",
                "garbage": "AGENT_ERROR", "empty": "AGENT_ERROR", "slow": "TIMEOUT",
                "unresolved": "AGENT_UNAVAILABLE", "busy": "AGENT_UNAVAILABLE"}
    for handle, error_code in expected.items():
        h = session(live, key, frontend=f"eve/{handle}")
        before = len(agents.calls)
        reply = send(live, key, h, "Roll 1d20")["reply"]
        # An agent that answered (an error, garbage) or may still be running the call is
        # never called again: its side effects would repeat.
        assert len(agents.calls) - before == (handle not in ("down", "unresolved")), handle
        trace = messages(live, key, h)
        terminal = [m for m in trace if m["type"] in ("response", "error")]
        assert len(terminal) == 1, (handle, trace)
        assert terminal[0]["id"] == reply["id"] == trace[-1]["id"]
        assert "could not finish" in reply["text"], (handle, reply)
        failed = [m for m in trace if m["errorCode"]]
        assert failed and {m["errorCode"] for m in failed} == {error_code}, (handle, failed)
        # The session keeps working: the next message is answered too.
        live.services.registry.replace(live.services.registry.get(f"eve/{handle}")
                                       .replace(func_url=agents.url + "/dice"))
        again = send(live, key, h, "Roll 1d20")["reply"]
        assert again["type"] == "response" and again["text"] == f"You rolled {agents.rolls[-1]}."


def test_a_throttled_func_is_called_again_and_runs_once(live, agents):
    """503 with Retry-After says the call was not run (the agent answers it before
    rolling): the platform tries again, and the user gets the one roll."""
    _, key = live.user("tom")
    register(live, key, "throttled", agents.url + "/throttled")
    h = session(live, key, frontend="tom/throttled")
    reply = send(live, key, h, "Roll 1d20")["reply"]
    assert [call for call, *_ in agents.calls].count("throttled/roll") == 2
    assert reply["type"] == "response" and reply["text"].startswith("You rolled ")
    assert reply["text"].removeprefix("You rolled ").removesuffix(".") in agents.rolls


def test_route_query_in_graphql(platform, agents):
    _, key = platform.user("ria")
    register(platform, key, "dice", agents.url + "/dice")
    fields = "agentId score matchedSample fits matched"
    out = platform.gql(key, f'{{ route(text: "Roll 4d6", k: 2) {{ {fields} }} }}')
    [route] = out["data"]["route"]
    assert route["agentId"] == "ria/dice" and 0 < route["score"] <= 1 and route["fits"]
    assert route["matchedSample"] == route["matched"] in ("Roll 1d20", "Roll 3d8 for me")
    out = platform.gql(key, f'{{ route(text: "hello there", k: 1) {{ {fields} }} }}')
    [closest] = out["data"]["route"]  # still named, but it does not fit
    assert closest["agentId"] == "ria/dice" and not closest["fits"]
    assert code(platform.gql(key, '{ route(text: "", k: 2) { agentId } }')) == "INVALID_INPUT"
    assert code(platform.gql(None, '{ route(text: "x") { agentId } }')) == "UNAUTHENTICATED"


def test_an_agent_unpublished_or_deleted_leaves_others_routes_at_once(platform, agents):
    """The router's index is checked against the registry every few seconds: meanwhile
    another user's route showed an agent its owner had just unpublished, or deleted."""
    _, owner = platform.user("uma")
    _, other = platform.user("vic")
    register(platform, owner, "dice", agents.url + "/dice")
    query = '{ route(text: "Roll 4d6", k: 3) { agentId } }'
    assert {"agentId": "uma/dice"} in platform.gql(other, query)["data"]["route"]
    hidden = platform.gql(owner, """mutation { updateAgent(agentData: {handle: "dice",
        published: false}) { agent { agentId } } }""")
    assert "errors" not in hidden, hidden
    assert {"agentId": "uma/dice"} not in platform.gql(other, query)["data"]["route"]
    assert {"agentId": "uma/dice"} in platform.gql(owner, query)["data"]["route"]
    deleted = platform.gql(owner, 'mutation { deleteAgent(agentData: {handle: "dice"}) '
                                  '{ agent { handle } } }')
    assert "errors" not in deleted, deleted
    assert {"agentId": "uma/dice"} not in platform.gql(owner, query)["data"]["route"]


@pytest.mark.settings(reply_wait_seconds=0.0)  # the API never holds a request for a reply
def test_codeshot_chat_gets_replies_without_the_api_waiting(live, agents):
    _, key = live.user("chad")
    register(live, key, "dice", agents.url + "/dice")
    out = io.StringIO()
    run_chat(ChatClient(live.url + "/graphql", key), None, show_trace=False,
             stdin=io.StringIO("Roll 2d6\n"), stdout=out)
    # The Func's own roll (the shared agent server may have rolled for others since).
    rolled = re.search(r"You rolled (\d \+ \d = \d+)\.", out.getvalue())
    assert rolled and rolled.group(1) in agents.rolls


@pytest.mark.settings(reply_wait_seconds=0.0)
def test_codeshot_chat_pages_on_to_a_reply_past_a_page_of_steps(live, agents, monkeypatch):
    """A page of messages ends at 4 MiB as sent: chat read one page after its query and
    so never saw a reply behind a long trace ("no reply yet" after 180 s). Here a page is
    one message, so the planner's steps fill several."""
    from codeshot.api.graphql import budget

    monkeypatch.setattr(budget, "PAGE_BYTES", 1)  # each page: its first message only
    _, key = live.user("pia")
    register(live, key, "dice", agents.url + "/dice")
    out = io.StringIO()
    run_chat(ChatClient(live.url + "/graphql", key), None, show_trace=True,
             stdin=io.StringIO("Roll 2d6\n"), stdout=out)
    assert re.search(r"You rolled \d \+ \d = \d+\.", out.getvalue()), out.getvalue()
    assert "[func_call] pia/dice: Ask Func[roll]: 2d6" in out.getvalue()  # every page


def test_a_correlation_id_goes_from_the_request_through_the_queue_to_each_agent_call(
        live, agents):
    _, key = live.user("cora")
    register(live, key, "dice", agents.url + "/dice")
    h = session(live, key)

    def post(correlation: str | None) -> str:
        extra = {"X-Correlation-Id": correlation} if correlation else {}
        out = httpx.post(live.url + "/graphql", timeout=60, json={
            "query": """mutation ($s: String!) { sendSessionMessage(messageData:
                {session: $s, text: "Roll 2d6"}) { reply { type } } }""",
            "variables": {"s": h}}, headers={"Authorization": f"Bearer {key}", **extra})
        assert out.json()["data"]["sendSessionMessage"]["reply"]["type"] == "response"
        return out.headers["x-correlation-id"]

    assert post("trace-42") == "trace-42"
    assert agents.correlations[-1] == "trace-42"  # API -> SQS -> runner -> the Func call
    made = post(None)  # none given: the API makes one
    assert re.fullmatch(r"[0-9A-Z]{26}", made) and agents.correlations[-1] == made
    odd = "<script>alert(1)</script> " + "x" * 200  # not an id: not logged nor passed on
    replaced = post(odd)
    assert replaced != odd and agents.correlations[-1] == replaced


def test_a_lone_surrogate_in_an_agents_reply_is_stored_as_a_replacement_character(live,
                                                                                   agents):
    """JSON may escape half a surrogate pair ("\\ud800"), which no UTF-8 store takes: the
    reply's write failed, the query ended INTERRUPTED after its redelivery, and on a last
    delivery went unanswered."""
    _, key = live.user("sally")
    h = misbehaving(live, key, "halves", agents, "/surrogate")
    reply = send(live, key, h, "Roll 1d20")["reply"]
    assert reply["type"] == "response", reply
    results = [m["text"] for m in messages(live, key, h) if m["type"] == "result"]
    assert results == ["Func[roll] says: rolled \ufffd 7"], results
