"""AWS misbehaving: DynamoDB throttling is retried with backoff; Secrets Manager being
unreachable gives a clear error and the API keeps serving what does not need it."""

import json
import re
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from botocore.exceptions import ClientError, ReadTimeoutError

from codeshot import ids
from codeshot.api.app import create_app
from codeshot.errors import NotFound
from codeshot.local.http_server import HttpServer
from codeshot.models import MessageType
from codeshot.services import Services
from codeshot.store.sessions import SessionStore
from codeshot.usecases.messaging import TERMINAL
from tests.api.test_quota_and_posting import new_session
from tests.conftest import code, free_port
from tests.runner.conftest import run_queue
from tests.store_helpers import resent_after_landing

THROTTLED = b'{"__type":"com.amazonaws.dynamodb.v20120810#ThrottlingException",' \
            b'"message":"Rate of requests exceeds the allowed throughput."}'


class ThrottlingProxy:
    """Forwards to moto, answering the first ``throttle`` DynamoDB calls with throttling."""

    def __init__(self, target: str, throttle: int) -> None:
        self.throttle, self.dynamodb_calls, self.targets = throttle, 0, []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def _forward(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if "DynamoDB" in self.headers.get("X-Amz-Target", ""):
                    proxy.dynamodb_calls += 1
                    proxy.targets.append(self.headers.get("X-Amz-Target"))
                    if proxy.dynamodb_calls <= proxy.throttle:
                        self.send_response(400)
                        self.send_header("Content-Type", "application/x-amz-json-1.0")
                        self.send_header("Content-Length", str(len(THROTTLED)))
                        self.end_headers()
                        self.wfile.write(THROTTLED)
                        return
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                r = httpx.request(self.command, target + self.path, content=body,
                                  headers=headers)
                self.send_response(r.status_code)
                for k, v in r.headers.items():
                    if k.lower() not in ("content-length", "transfer-encoding", "connection"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(r.content)))
                self.end_headers()
                self.wfile.write(r.content)

            do_GET = do_POST = do_PUT = do_HEAD = do_DELETE = _forward

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def proxy(server_aws):
    p = ThrottlingProxy(server_aws.aws_endpoint_url, throttle=0)
    yield p, server_aws.replace(aws_endpoint_url=p.url)
    p.server.shutdown()


def test_throttled_calls_are_retried_with_backoff(proxy):
    p, settings = proxy
    store = SessionStore(settings)
    p.throttle, p.dynamodb_calls = 2, 0
    with pytest.raises(NotFound):  # it reached DynamoDB after two throttled tries
        store.get("no-such-session")
    assert p.dynamodb_calls == 3


def test_throttling_that_outlasts_the_retries_is_rate_limited_not_internal(proxy):
    p, settings = proxy
    port = free_port()
    services = Services(settings.replace(api_url=f"http://127.0.0.1:{port}"))
    user = services.users.create("throttled")
    key = services.auth.issue_api_key(user)
    server = HttpServer(create_app(services=services), "127.0.0.1", port)
    server.start()
    try:
        p.throttle, p.dynamodb_calls, p.targets = 10**6, 0, []
        r = httpx.post(f"{server.url}/graphql", json={"query": "{ allSessions { handle } }"},
                       headers={"Authorization": f"Bearer {key}"}, timeout=60)
        assert code(r.json()) == "RATE_LIMITED"
        assert p.dynamodb_calls == 4, p.targets  # the first try and three retries
    finally:
        server.stop()


def test_secrets_manager_unreachable_is_a_clear_error(server_aws):
    closed = f"http://127.0.0.1:{free_port()}"
    port = free_port()
    services = Services(server_aws.replace(
        aws_endpoint_url=closed, api_url=f"http://127.0.0.1:{port}"))
    server = HttpServer(create_app(services=services), "127.0.0.1", port)
    server.start()  # the app starts: nothing reaches AWS at cold start
    try:
        assert httpx.get(f"{server.url}/healthz").json() == {"status": "ok"}
        r = httpx.get(f"{server.url}/.well-known/jwks.json", timeout=120)
        assert r.status_code == 503
        assert r.json()["error"]["code"] == "UNAVAILABLE"
        assert "signing keys are unavailable" in r.json()["error"]["message"]
    finally:
        server.stop()


def test_a_message_sqs_refuses_is_agent_unavailable_and_answered_at_once(platform,
                                                                        monkeypatch):
    """As docs/errors.md says: the post answers AGENT_UNAVAILABLE (not INTERNAL), and the
    query is closed with that error rather than left for a runner that never comes."""
    _, key = platform.user("olga")
    handle = platform.gql(key, "mutation { createSession(sessionData: {}) { session { handle "
                               "} } }")["data"]["createSession"]["session"]["handle"]
    sqs = platform.services.queue.sqs

    def refuse(**_):
        raise sqs.exceptions.ClientError(
            {"Error": {"Code": "AccessDenied", "Message": "not authorized"}}, "SendMessage")

    monkeypatch.setattr(sqs, "send_message", refuse)
    out = platform.gql(key, """mutation ($s: String!) { sendSessionMessage(messageData:
        {session: $s, text: "hello", wait: false}) { message { id } } }""", {"s": handle})
    error = out["errors"][0]
    assert error["extensions"]["code"] == "AGENT_UNAVAILABLE"
    assert "not authorized" not in str(out)
    [query, reply] = platform.services.sessions.all_messages(handle)
    assert reply.in_reply_to == query.message_id and reply.error_code == "AGENT_UNAVAILABLE"



@pytest.mark.settings(reply_wait_seconds=1.0, mcp_agent_tools=5)
def test_protocol_endpoints_say_rate_limited_and_leak_no_aws_error(platform, monkeypatch):
    """MCP sent any failure but codeshot's own as a JSON-RPC error of code 0 carrying
    botocore's text, and A2A's streams did the same (an AccessDenied names the role and
    the account); A2A answered AWS throttling -32603, not RATE_LIMITED (-32029)."""
    from codeshot.usecases import agents
    from codeshot.usecases.messaging import Messaging

    _, key = platform.user("faulty")
    a2a = {"A2A-Version": "1.0"}
    session = platform.gql(key, "mutation { createSession { session { handle } } }")[
        "data"]["createSession"]["session"]["handle"]
    db, get_item = platform.services.sessions.db, platform.services.sessions.db.get_item

    monkeypatch.setattr(db, "get_item", throttled(get_item, session))
    asked = platform.rpc(key, "/mcp", "tools/call", {"name": "ask", "arguments": {
        "query": "hi", "session": session}}).json()
    assert asked["result"]["isError"], asked
    assert asked["result"]["content"][0]["text"].startswith("RATE_LIMITED: "), asked
    got = platform.rpc(key, "/a2a/platform/planner", "GetTask",
                       {"id": f"{session}.{ids.ulid()}"}, a2a)
    assert got.json()["error"]["code"] == -32029, got.text
    monkeypatch.setattr(db, "get_item", get_item)

    def refuse(*_args, **_kwargs):
        raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "User: arn:"
                                     "aws:sts::123456789012:assumed-role/api is not authorized"}},
                          "Query")

    monkeypatch.setattr(Messaging, "newer", refuse)
    streamed = platform.rpc(key, "/a2a/platform/planner", "SendStreamingMessage", {
        "message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}, a2a)
    assert '"code":-32603' in streamed.text.replace(" ", ""), streamed.text[-500:]
    monkeypatch.setattr(agents, "all_visible_agents", refuse)
    listed = platform.rpc(key, "/mcp", "tools/list", {}).json()
    assert listed.get("error") == {"code": -32603, "message": "internal error"}, listed
    for body in (streamed.text, str(listed)):
        assert "arn:aws" not in body and "123456789012" not in body, body[-500:]


def throttled(get_item, matches: str):
    """``get_item`` throttled (through botocore's retries) for keys that mention ``matches``."""
    def read(**request):
        if matches in str(request.get("Key")):
            raise ClientError({"Error": {"Code": "ProvisionedThroughputExceededException",
                                         "Message": "Rate of requests exceeds"}}, "GetItem")
        return get_item(**request)

    return read


POST = """mutation ($s: String!, $k: String) { sendSessionMessage(messageData:
    {session: $s, text: "hello", wait: false, idempotencyKey: $k}) { message { id } } }"""


def error(code_: str, status: int, **response) -> ClientError:
    """DynamoDB's answer ``code_`` (HTTP ``status``) to a transaction."""
    return ClientError({"Error": {"Code": code_, "Message": code_},
                        "ResponseMetadata": {"HTTPStatusCode": status}, **response},
                       "TransactWriteItems")


def fifo(monkeypatch, platform) -> list[str]:
    """SQS FIFO's rule, which moto keeps only while a copy is still queued: a send of a
    deduplication id sent in the last five minutes is accepted, and dropped. The list
    holds the ids dropped."""
    sqs, sent, dropped = platform.services.queue.sqs, set(), []
    send = sqs.send_message

    def deduplicated(**request):
        if request["MessageDeduplicationId"] in sent:
            dropped.append(request["MessageDeduplicationId"])
            return {"MessageId": "dropped"}
        sent.add(request["MessageDeduplicationId"])
        return send(**request)

    monkeypatch.setattr(sqs, "send_message", deduplicated)
    return dropped


def replies(platform, session: str) -> list[str]:
    """The ids of the messages the runner answered in ``session``, once each answer."""
    return [m.in_reply_to for m in platform.services.sessions.all_messages(session)
            if m.type in TERMINAL]


def posted(platform, session: str) -> tuple[list[str], list[str]]:
    """The session's messages' texts, and the ids of the messages queued for the runner."""
    queued = platform.services.queue.receive(wait_seconds=0)
    return ([m.text for m in platform.services.sessions.all_messages(session)],
            [json.loads(m["Body"])["message_id"] for m in queued])


def test_a_post_whose_resend_was_refused_for_what_it_wrote_is_queued_unread(platform,
                                                                            monkeypatch):
    """The post's transaction was written, its response lost, and the resend refused for
    what the first wrote: the post is that message, queued and charged once, with no read
    to confirm it (a throttled read left it written and charged, and nothing queued it)."""
    user_id, key = platform.user()
    session = new_session(platform, key)
    db = platform.services.sessions.db
    monkeypatch.setattr(db, "transact_write_items",
                        resent_after_landing(platform.services.sessions))
    monkeypatch.setattr(db, "get_item", throttled(db.get_item, "MSG#"))
    out = platform.gql(key, POST, {"s": session})
    monkeypatch.undo()
    assert "errors" not in out, out
    assert posted(platform, session) == (
        ["hello"], [out["data"]["sendSessionMessage"]["message"]["id"]])
    assert platform.services.usage.used("query", user_id) == 1


def unconfirmed(monkeypatch, db, fault: Exception, written: bool = True) -> Callable:
    """Every transaction that writes a message answered with ``fault`` (botocore's last
    resend timed out, DynamoDB failed), ``written`` or not; returns the real write."""
    write = db.transact_write_items

    def lost(**request):
        if "MSG#" not in str(request):
            return write(**request)
        if written:
            write(**request)
        raise fault

    monkeypatch.setattr(db, "transact_write_items", lost)
    return write


@pytest.mark.parametrize("written", [True, False])
def test_a_post_whose_write_is_unconfirmed_says_so_and_leaves_no_query_unqueued(
        platform, monkeypatch, written):
    """A post whose write's answer was lost is UNAVAILABLE, saying it may have been posted
    and that the same post under its key is safe (it was INTERNAL), or, without a key, to
    read the session once its write can no longer land; its message is queued
    either way, so one that was written is answered, and the runner finds nothing to do
    for one that was not."""
    user_id, key = platform.user()
    session = new_session(platform, key)
    unconfirmed(monkeypatch, platform.services.sessions.db,
                ReadTimeoutError(endpoint_url="https://dynamodb"), written)
    out = platform.gql(key, POST, {"s": session})
    monkeypatch.undo()
    assert code(out) == "UNAVAILABLE", out
    said = out["errors"][0]["message"]  # sent without a key: none to send it again under
    assert "may have been" in said and f"session {session}" in said
    assert "idempotency key" not in said
    # A read sooner may miss a write still in flight: the message sent again runs twice.
    assert "wait 15 s (until its write can no longer land), then read the session" in said
    if written:  # charged once, and queued: the runner answers it
        texts, queued = posted(platform, session)
        assert texts == ["hello"] and len(queued) == 1
        assert platform.services.sessions.all_messages(session)[0].message_id == queued[0]
        assert platform.services.usage.used("query", user_id) == 1
    else:  # queued all the same: the runner finds no message, and writes nothing
        assert run_queue(platform.services) == 1
        assert posted(platform, session) == ([], [])
        assert platform.services.usage.used("query", user_id) == 0


def test_an_unconfirmed_post_in_a_session_its_request_made_names_that_session(
        platform, monkeypatch):
    """MCP's ask made the session in the request whose post was not confirmed: the error
    names it, so it can be read, and asks for no idempotency key the caller never sent."""
    _, key = platform.user()
    unconfirmed(monkeypatch, platform.services.sessions.db,
                ReadTimeoutError(endpoint_url="https://dynamodb"))
    asked = platform.rpc(key, "/mcp", "tools/call", {"name": "ask", "arguments": {
        "query": "hello"}}).json()
    monkeypatch.undo()
    said = asked["result"]["content"][0]["text"]
    assert said.startswith("UNAVAILABLE: ") and "idempotency key" not in said, said
    (session,) = re.findall(r"session (\S+):", said)
    assert platform.rpc(key, "/mcp", "tools/call", {"name": "ask", "arguments": {
        "query": "hello again", "session": session}}).json()["result"]
    assert [m.text for m in platform.services.sessions.all_messages(session)
            if m.type is MessageType.QUERY] == ["hello", "hello again"]


def test_the_same_post_again_under_its_key_after_an_unconfirmed_write_is_that_post(
        platform, monkeypatch):
    """DynamoDB failed (500) a post's write it had made: the post again under its key is
    that message, written and charged once; each queued a copy (the queue drops neither),
    and the runner answers it once."""
    user_id, key = platform.user()
    session = new_session(platform, key)
    dropped = fifo(monkeypatch, platform)
    write = unconfirmed(monkeypatch, platform.services.sessions.db,
                        error("InternalServerError", 500))
    first = platform.gql(key, POST, {"s": session, "k": "k1"})
    monkeypatch.setattr(platform.services.sessions.db, "transact_write_items", write)
    assert code(first) == "UNAVAILABLE", first
    assert "send it again under the same idempotency key" in first["errors"][0]["message"]
    again = platform.gql(key, POST, {"s": session, "k": "k1"})
    assert "errors" not in again, again
    posted_id = again["data"]["sendSessionMessage"]["message"]["id"]
    assert dropped == []
    assert run_queue(platform.services) == 2  # two copies: one run, one skipped
    assert replies(platform, session) == [posted_id]
    assert platform.services.usage.used("query", user_id) == 1


def test_a_post_that_lands_after_the_runner_skipped_it_is_answered_when_sent_again(
        platform, monkeypatch):
    """DynamoDB answered 500 while the post's transaction was still being applied; the
    runner took the copy the post queued before the write was visible, and skipped it;
    then the write landed. The same post again under its key queues it again, and the
    queue does not drop that as the first copy's duplicate (it did: written, charged,
    and never answered)."""
    user_id, key = platform.user()
    session = new_session(platform, key)
    db = platform.services.sessions.db
    write, held = db.transact_write_items, []

    def in_flight(**request):
        if "MSG#" in str(request) and not held:
            held.append(request)
            raise error("InternalServerError", 500)
        return write(**request)

    dropped = fifo(monkeypatch, platform)
    monkeypatch.setattr(db, "transact_write_items", in_flight)
    first = platform.gql(key, POST, {"s": session, "k": "k1"})
    monkeypatch.setattr(db, "transact_write_items", write)
    assert code(first) == "UNAVAILABLE", first
    assert run_queue(platform.services) == 1  # skipped: not written yet
    write(**held[0])  # DynamoDB's transaction completes
    again = platform.gql(key, POST, {"s": session, "k": "k1"})
    assert "errors" not in again, again
    assert dropped == []
    assert run_queue(platform.services) == 1
    assert replies(platform, session) == [again["data"]["sendSessionMessage"]["message"]["id"]]
    assert platform.services.usage.used("query", user_id) == 1


WAIT_POST = """mutation ($s: String!) { sendSessionMessage(messageData:
    {session: $s, text: "hello", wait: true}) { message { id } } }"""


def test_a_post_given_up_on_conflicts_while_its_first_send_was_in_progress_is_unconfirmed(
        platform, monkeypatch):
    """botocore's resends of a post's transaction ended in TransactionInProgressException
    (an earlier send of its token still being applied); the tries after it, under tokens
    of their own, conflict with that one until the post gives up. It may land still: the
    post is UNAVAILABLE, its message queued (it was CONFLICT, and the message, once it
    landed, written and charged, and never queued). Its waiting slot, given back when the
    request ends, is taken again if it lands later: that one lapses."""
    user_id, key = platform.user()
    session = new_session(platform, key)
    db = platform.services.sessions.db
    write, held = db.transact_write_items, []

    def busy(**request):
        if "MSG#" not in str(request):
            return write(**request)
        if not held:
            held.append(request)
            raise error("TransactionInProgressException", 400)
        reasons = [{"Code": "TransactionConflict"}] + \
            [{"Code": "None"}] * (len(request["TransactItems"]) - 1)
        raise error("TransactionCanceledException", 400, CancellationReasons=reasons)

    platform.services.usage.make_room("waiting", user_id, "earlier")  # slots' item made
    monkeypatch.setattr(db, "transact_write_items", busy)
    out = platform.gql(key, WAIT_POST, {"s": session})
    monkeypatch.undo()
    write(**held[0])  # the send in progress is applied
    assert code(out) == "UNAVAILABLE", out
    texts, queued = posted(platform, session)
    assert texts == ["hello"]
    assert queued == [platform.services.sessions.all_messages(session)[0].message_id]
    assert platform.services.usage.used("query", user_id) == 1


class _Body:
    """A canned HTTP body, read as botocore reads a real one."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def stream(self, **_):
        yield self.data


def posts_sent_through(platform, monkeypatch, answer) -> list[str]:
    """Each send of a post's transaction (botocore's own resends too, whose backoff's wait
    is cut short) is given to ``answer(request, body)`` in place of moto; the tokens sent."""
    from botocore.retries.standard import ExponentialBackoff

    events, tokens = platform.services.sessions.db.meta.events, []

    def hook(request, **_):
        body = json.loads(request.body or b"{}")
        if "MSG#" not in json.dumps(body) or "ClientRequestToken" not in body:
            return None  # sent on to moto
        tokens.append(body["ClientRequestToken"])
        return answer(request, body)

    monkeypatch.setattr(ExponentialBackoff, "delay_amount", lambda self, context: 0.0)
    events.register("before-send.dynamodb.TransactWriteItems", hook, unique_id="test-posts")
    monkeypatch.setattr(platform, "_unhook", lambda: events.unregister(
        "before-send.dynamodb.TransactWriteItems", unique_id="test-posts"), raising=False)
    return tokens


def post_unhooked(platform, key: str, session: str) -> dict:
    """The post, through :func:`posts_sent_through`'s hook, which is then taken off."""
    try:
        return platform.gql(key, POST, {"s": session})
    finally:
        platform._unhook()


def throttle(request, body):
    from botocore.awsrequest import AWSResponse

    return AWSResponse(request.url, 400, {"Content-Type": "application/x-amz-json-1.0"},
                       _Body(THROTTLED))


def test_a_throttled_post_is_rate_limited_with_nothing_queued(platform, monkeypatch):
    """DynamoDB throttles every send of the post's transaction, botocore's own resends
    included (under one token a call: a token whose first send was written is answered
    with success, not a throttle, so none was). The post is RATE_LIMITED, nothing
    written, charged or queued (it was UNAVAILABLE, with a copy of a message never
    posted queued, as botocore's resends were taken for sends that may have landed)."""
    user_id, key = platform.user()
    session = new_session(platform, key)
    tokens = posts_sent_through(platform, monkeypatch, throttle)
    out = post_unhooked(platform, key, session)
    assert code(out) == "RATE_LIMITED", out
    assert posted(platform, session) == ([], [])
    assert platform.services.usage.used("query", user_id) == 0
    # botocore's four sends a call, each call's under one token of its own
    assert len(tokens) % 4 == 0 and len(tokens) > 4
    assert len(set(tokens)) == len(tokens) // 4


def test_a_post_throttled_after_a_send_that_timed_out_and_landed_is_unconfirmed(
        platform, monkeypatch):
    """botocore's first send was written and its response lost (a read timeout); its
    resends, and every later call, were throttled. The post was RATE_LIMITED "nothing
    stored", its message written, charged and never queued; it is UNAVAILABLE, queued."""
    import boto3
    from botocore.exceptions import ReadTimeoutError

    user_id, key = platform.user()
    session = new_session(platform, key)
    db = platform.services.sessions.db
    other = boto3.client("dynamodb", region_name=db.meta.region_name,  # moto's, unhooked
                         endpoint_url=db.meta.endpoint_url)

    def land_then_throttle(request, body):
        if len(tokens) == 1:
            other.transact_write_items(TransactItems=body["TransactItems"])
            raise ReadTimeoutError(endpoint_url=request.url)
        return throttle(request, body)

    tokens = posts_sent_through(platform, monkeypatch, land_then_throttle)
    out = post_unhooked(platform, key, session)
    assert code(out) == "UNAVAILABLE", out
    texts, queued = posted(platform, session)
    assert texts == ["hello"]
    assert queued == [platform.services.sessions.all_messages(session)[0].message_id]
    assert platform.services.usage.used("query", user_id) == 1
