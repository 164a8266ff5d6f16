"""Schemathesis against the API: generated GraphQL operations and REST calls (valid and
invalid shapes) never get a 500 nor an INTERNAL error."""

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

pytestmark = pytest.mark.slow

FUZZ = settings(max_examples=25, deadline=None, derandomize=True, database=None,
                suppress_health_check=list(HealthCheck))


def assert_no_internal_error(response) -> None:
    assert response.status_code < 500, (response.status_code, response.text[:500])
    content_type = response.headers.get("content-type") or [""]
    if content_type[0].startswith("application/json") and response.content:
        body = response.json()
        errors = body.get("errors", []) if isinstance(body, dict) else []
        codes = {(e.get("extensions") or {}).get("code") for e in errors}
        assert "INTERNAL" not in codes, body


def fuzz(schema, headers) -> list[str]:
    """Run every operation of ``schema``; returns the operations exercised."""
    seen = []
    for result in schema.get_all_operations():
        operation = result.ok()
        seen.append(operation.label)

        @given(case=operation.as_strategy())
        @FUZZ
        def check(case):
            assert_no_internal_error(case.call(headers=headers, timeout=30))

        check()
    return seen


def test_graphql_operations(platform):
    _, key = platform.user()
    headers = {"Authorization": f"Bearer {key}"}
    schema = schemathesis.graphql.from_url(f"{platform.url}/graphql", headers=headers)
    seen = fuzz(schema, headers)
    assert {"Query.allAgents", "Mutation.sendSessionMessage", "Mutation.createAgent"} <= set(seen)


def test_rest_routes(platform):
    user_id, key = platform.user("fuzzer")
    token = platform.services.auth.agent_token("fuzzer/a", user_id, None)
    schema = schemathesis.openapi.from_url(f"{platform.url}/openapi.json")
    for headers in ({"Authorization": f"Bearer {token}"}, {"Authorization": f"Bearer {key}"}):
        seen = fuzz(schema, headers)
    assert any("userstorage" in label for label in seen)
