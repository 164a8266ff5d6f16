"""handlers/api.py answers a real API Gateway HTTP API (payload 2.0) event."""

import dataclasses
import importlib
import json

import pytest


def http_api_event(method: str, path: str, body: str = "", headers: dict | None = None) -> dict:
    return {
        "version": "2.0", "routeKey": "$default", "rawPath": path, "rawQueryString": "",
        "headers": {"content-type": "application/json", "host": "abc.execute-api.aws",
                    **(headers or {})},
        "requestContext": {
            "accountId": "123456789012", "apiId": "abc", "domainName": "abc.execute-api.aws",
            "domainPrefix": "abc", "requestId": "r1", "routeKey": "$default", "stage": "$default",
            "time": "21/Nov/2026:07:00:00 +0000", "timeEpoch": 1795244400000,
            "http": {"method": method, "path": path, "protocol": "HTTP/1.1",
                     "sourceIp": "203.0.113.1", "userAgent": "test"},
        },
        "body": body, "isBase64Encoded": False,
    }


@pytest.fixture
def handler(server_aws, monkeypatch):
    for name, value in dataclasses.asdict(server_aws).items():
        if value is not None:
            monkeypatch.setenv(f"CODESHOT_{name.upper()}", str(value))
    from codeshot.settings import get_settings

    get_settings.cache_clear()
    module = importlib.reload(importlib.import_module("handlers.api"))
    yield module.handler
    get_settings.cache_clear()


def test_healthz_and_graphql_through_lambda_event(handler, server_aws):
    from codeshot.services import Services

    services = Services(server_aws)
    user = services.users.create("lambda")
    key = services.auth.issue_api_key(user)
    out = handler(http_api_event("GET", "/healthz"), None)
    assert out["statusCode"] == 200 and json.loads(out["body"]) == {"status": "ok"}
    out = handler(http_api_event("POST", "/graphql", json.dumps({"query": "{ user { username } }"}),
                                 {"authorization": f"Bearer {key}"}), None)
    assert out["statusCode"] == 200
    assert json.loads(out["body"]) == {"data": {"user": {"username": "lambda"}}}
    out = handler(http_api_event("GET", "/.well-known/jwks.json"), None)
    assert json.loads(out["body"])["keys"][0]["crv"] == "Ed25519"


LAMBDA_RESPONSE_BYTES = 6 * 1024 * 1024
MESSAGES = """query ($h: String!, $a: String) { sessionByHandle(handle: $h) {
    messages(after: $a) { id text sentBy { handle } type inReplyTo { id } timestamp } } }"""


@pytest.mark.parametrize(("text", "sent_by"), [
    ("日本語のテキスト" * 2000, "user"),  # 3 bytes a character stored, 6 as \u escapes
    ('"\\' * 8000, "user"),  # quotes and backslashes, escaped twice in Lambda's response
    ("\x01" * 100_000, "someone/agent"),  # an agent's control characters: 7 bytes each
])
def test_a_page_of_messages_fits_lambdas_response(handler, server_aws, monkeypatch, text,
                                                  sent_by):
    """The docs promise a page ends after about 4 MB of messages, to fit Lambda's 6 MB
    response: one page of a session DynamoDB stores in 4 MB, whatever its text, fits it
    as Lambda's runtime (Python 3.12) sends it, and paging on reads every message."""
    from awslambdaric.lambda_runtime_marshaller import to_json

    from codeshot import ids
    from codeshot.models import Message, MessageType
    from codeshot.services import Services

    monkeypatch.setenv("AWS_EXECUTION_ENV", "AWS_Lambda_python3.12")
    services = Services(server_aws)
    key = services.auth.issue_api_key(services.users.create(f"u{ids.handle(4).lower()}"
                                                            .replace("-", "").replace("_", "")))

    def gql(query: str, variables: dict) -> tuple[dict, int]:
        out = handler(http_api_event("POST", "/graphql", json.dumps(
            {"query": query, "variables": variables}), {"authorization": f"Bearer {key}"}), None)
        assert out["statusCode"] == 200
        return json.loads(out["body"]), len(to_json(out).encode())

    created, _ = gql("mutation { createSession { session { handle } } }", {})
    handle = created["data"]["createSession"]["session"]["handle"]
    stored = [Message(session_id=handle, message_id=ids.ulid(), text=text, sent_by=sent_by,
                      type=MessageType.QUERY if sent_by == "user" else MessageType.RESPONSE)
              for _ in range(4_000_000 // len(text.encode()))]
    services.sessions.put_messages(stored)

    newest, size = gql(MESSAGES, {"h": handle})
    assert "errors" not in newest, str(newest)[:300]
    assert size <= LAMBDA_RESPONSE_BYTES, size
    page = newest["data"]["sessionByHandle"]["messages"]
    assert page[-1]["id"] == stored[-1].message_id and {m["text"] for m in page} == {text}
    read, after = [], stored[0].message_id
    while True:
        out, size = gql(MESSAGES, {"h": handle, "a": after})
        assert size <= LAMBDA_RESPONSE_BYTES, size
        if not (page := out["data"]["sessionByHandle"]["messages"]):
            break
        read, after = read + [m["id"] for m in page], page[-1]["id"]
    assert read == [m.message_id for m in stored[1:]]
