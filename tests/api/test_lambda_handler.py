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
