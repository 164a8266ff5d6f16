"""Every request's JWT is checked: signature (JWKS), expiry, audience, type and agent id."""

from __future__ import annotations

import time
from datetime import timedelta

import httpx
import jwt
import pytest
from nacl.signing import SigningKey

import codeshot.sdk.auth
from codeshot.auth import tokens
from codeshot.auth.keys import SIGNING_DELAY_SECONDS
from codeshot.devtools.agents import serve
from codeshot.models import utcnow
from tests.api.test_fixie_compat import register
from tests.conftest import code
from tests.sdk.demo import demo_agent


def claims(platform, served, **changes):
    settings = platform.services.settings
    base = tokens.agent_token_claims(platform.url, settings.token_audiences(), served.agent_id,
                                     "u_1", "s_1", 300)
    return {**base, **changes}


def signed(platform, payload, private_key=None, kid=None):
    key = platform.services.keyring.signing_key()
    return tokens.sign(payload, kid or key.kid, private_key or key.private_key())


def post(served, token: str | None):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.post(served.url + "/add", headers=headers,
                      json={"message": {"text": "1, 2"}, "access_token": token})


def refused(reply, status: int, code: str, message: str) -> None:
    assert reply.status_code == status, reply.text
    assert reply.json()["error"]["code"] == code
    assert message in reply.json()["error"]["message"]


def test_a_valid_token_is_accepted(platform, sdk_agent):
    reply = post(sdk_agent, signed(platform, claims(platform, sdk_agent)))
    assert reply.status_code == 200 and reply.json()["message"]["text"] == "3"


def test_no_token(platform, sdk_agent):
    refused(post(sdk_agent, None), 401, "UNAUTHENTICATED", "missing Authorization header")
    handshake = httpx.get(sdk_agent.url + "/")
    refused(handshake, 401, "UNAUTHENTICATED", "missing Authorization header")


def test_forged_token_with_the_platforms_kid(platform, sdk_agent):
    forged = signed(platform, claims(platform, sdk_agent), private_key=SigningKey.generate())
    refused(post(sdk_agent, forged), 401, "UNAUTHENTICATED", "signature is invalid")


def test_token_signed_by_an_unknown_key(platform, sdk_agent):
    stranger = signed(platform, claims(platform, sdk_agent), SigningKey.generate(), "k_x")
    refused(post(sdk_agent, stranger), 401, "UNAUTHENTICATED", "unknown key")


def test_expired_token(platform, sdk_agent):
    past = int(time.time()) - 600
    expired = signed(platform, claims(platform, sdk_agent, iat=past, exp=past + 300))
    refused(post(sdk_agent, expired), 401, "UNAUTHENTICATED", "expired")


def test_a_token_from_a_clock_ahead_says_to_check_the_clocks(platform, sdk_agent):
    """An agent's developer was told to paste the whole API key, or given PyJWT's words."""
    ahead = int(time.time()) + 120
    early = signed(platform, claims(platform, sdk_agent, iat=ahead, exp=ahead + 300))
    refused(post(sdk_agent, early), 401, "UNAUTHENTICATED", "token is not valid yet: check "
            "the clocks")
    refused(post(sdk_agent, "not.a.token"), 401, "UNAUTHENTICATED",
            "that is not a key or token of this platform")


def test_token_for_another_agent(platform, sdk_agent):
    other = platform.services.auth.agent_token("acme/other", "u_1", "s_1")
    refused(post(sdk_agent, other), 403, "FORBIDDEN", "for agent acme/other")


def test_token_for_another_audience_or_issuer(platform, sdk_agent):
    wrong_aud = signed(platform, claims(platform, sdk_agent, aud=["https://elsewhere.example"]))
    refused(post(sdk_agent, wrong_aud), 401, "UNAUTHENTICATED", "audience")
    wrong_iss = signed(platform, claims(platform, sdk_agent, iss="https://elsewhere.example"))
    refused(post(sdk_agent, wrong_iss), 401, "UNAUTHENTICATED", "issued by someone else")


def test_an_api_key_is_not_an_agent_token(platform, sdk_agent):
    _, api_key = platform.user()
    refused(post(sdk_agent, api_key), 401, "UNAUTHENTICATED", "lacks the 'exp' claim")


def test_rotated_keys_are_fetched_on_an_unknown_kid(platform, sdk_agent, monkeypatch):
    assert post(sdk_agent, platform.services.auth.agent_token(sdk_agent.agent_id, None, None)
                ).status_code == 200  # the agent has cached the JWKS
    new_key = platform.services.keyring.rotate()
    platform.clock.now = utcnow() + timedelta(seconds=SIGNING_DELAY_SECONDS)  # it signs now
    token = platform.services.auth.agent_token(sdk_agent.agent_id, None, None)
    assert jwt.get_unverified_header(token)["kid"] == new_key.kid
    refused(post(sdk_agent, token), 401, "UNAUTHENTICATED", "unknown key")  # refetch rate limit
    monkeypatch.setattr(codeshot.sdk.auth, "MIN_REFETCH_INTERVAL", 0.0)
    assert post(sdk_agent, token).status_code == 200


@pytest.mark.parametrize("agent_id", ["acme/sdkdemo", "*"])
def test_an_agent_takes_only_its_own_tokens_unless_told_any(platform, agent_id):
    with serve(demo_agent(), platform.url, agent_id) as url:
        token = platform.services.auth.agent_token("acme/other", None, None)
        status = httpx.get(url + "/", headers={"Authorization": f"Bearer {token}"}).status_code
    assert status == (403 if agent_id != "*" else 200)


def test_registering_an_agent_served_for_another_id_says_why_it_refused(platform, sdk_agent):
    """The agent takes only tokens for the id it was served as: registering its URL under
    another handle fails, and the error says why, not only "HTTP 403"."""
    _, key = platform.user("quill")
    out = register(platform, key, sdk_agent.url, handle="other")
    assert code(out) == "AGENT_ERROR"
    message = out["errors"][0]["message"]
    assert "answered HTTP 403: it refused the platform's call token" in message
    assert "is it serving another agent?" in message


def test_registering_an_agent_served_for_another_platform_says_where_to_look(platform):
    """An agent whose CODESHOT_API_URL is not this platform's cannot read its keys and
    answers 503: registration said only "answered HTTP 503"."""
    from tests.conftest import free_port

    _, key = platform.user("quinn")
    elsewhere = f"http://127.0.0.1:{free_port()}"  # no platform there
    with serve(demo_agent(), elsewhere, "quinn/demo") as url:
        out = register(platform, key, url, handle="demo")
    assert code(out) == "AGENT_ERROR"
    assert "answered HTTP 503: a codeshot SDK agent answers 503 when it cannot read the " \
           "platform's signing keys (is its CODESHOT_API_URL this platform's?)" in \
           out["errors"][0]["message"], out
