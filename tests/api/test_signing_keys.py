"""Signing keys as a deploy makes them (a random seed text CloudFormation generates) and
as an operator rotates them (`codeshot keys rotate`): the platform only reads the secret."""

from __future__ import annotations

import json
from datetime import timedelta

import httpx
import jwt
import pytest

import codeshot.sdk.auth
from codeshot import aws as aws_clients
from codeshot import cli
from codeshot.api.mcp import KeyRingCodec
from codeshot.auth.keys import (
    JWKS_MAX_AGE_SECONDS,
    SIGNING_DELAY_SECONDS,
    KeyRing,
    SigningKey,
    SigningUnavailable,
)
from codeshot.auth.service import Auth
from codeshot.devtools.agents import serve
from codeshot.models import utcnow
from codeshot.services import Services
from codeshot.store.tables import SIGNING_SECRET
from codeshot.usecases.users import create_user
from tests.conftest import TestClock as SettableClock
from tests.sdk.demo import AGENT_ID, demo_agent


def secret(settings) -> dict:
    client = aws_clients.client("secretsmanager", settings)
    # AWSCURRENT named, as the platform does: moto's bare read answers the version last put
    value = client.get_secret_value(SecretId=settings.signing_secret_id, VersionStage="AWSCURRENT")
    return json.loads(value["SecretString"])


def test_the_first_key_derives_from_the_deploy_time_seed(aws):
    seed = secret(aws)[SIGNING_SECRET.seed_key]
    assert len(seed) == SIGNING_SECRET.seed_length and seed.isalnum()
    (key,) = Services(aws).keyring.keys()
    assert key == SigningKey.from_seed_text(seed)  # every container derives the same key
    assert key.private_bytes != seed.encode()[:32]  # the seed text is not the key itself
    jwk = Services(aws).keyring.jwks()["keys"][0]
    assert jwk["kid"] == key.kid and jwk["crv"] == "Ed25519" and "d" not in jwk


def test_no_secret_is_an_unavailable_platform_not_a_new_key(aws):
    missing = Services(aws.replace(signing_secret_id="codeshot/nowhere"))
    with pytest.raises(SigningUnavailable):
        missing.keyring.keys()


def test_codeshot_keys_rotate_adds_a_key_and_old_api_keys_stay_valid(aws, monkeypatch, capsys):
    _, api_key = create_user(Services(aws), "ops")
    (first,) = Services(aws).keyring.keys()
    monkeypatch.setenv("CODESHOT_SIGNING_SECRET_ID", aws.signing_secret_id)
    monkeypatch.setenv("CODESHOT_REGION", aws.region)
    assert cli.main(["keys", "rotate"]) == 0
    printed = capsys.readouterr().out
    stored = secret(aws)["keys"]
    assert stored[0]["kid"] == first.kid and len(stored) == 2
    new = SigningKey.from_json(stored[1])
    assert new.kid in printed and first.kid in printed
    assert f"signs from {new.signs_from():%Y-%m-%d %H:%M:%S} UTC" in printed
    clock = SettableClock()
    fresh = Services(aws, clock=clock)  # a cold container after the rotation
    assert {k["kid"] for k in fresh.keyring.jwks()["keys"]} == {first.kid, new.kid}
    assert fresh.keyring.signing_key().kid == first.kid  # published, not yet signing
    clock.now = new.signs_from()
    assert fresh.keyring.signing_key().kid == new.kid
    assert fresh.auth.user_for_api_key(api_key).username == "ops"


def test_a_new_key_signs_only_once_every_cached_jwks_lists_it(platform, monkeypatch):
    """An API container serves the key ring it read up to 5 minutes ago; a container that
    read the secret right after a rotation must not sign with a key that JWKS lacks."""
    api = platform.services.keyring
    before = api.signing_key().kid  # the API container has read the keys
    new = KeyRing(platform.services.settings).rotate()  # the operator's CLI
    runner = Auth(platform.services.settings, KeyRing(platform.services.settings,
                                                      clock=platform.clock),
                  platform.services.users)  # a container cold-started after the rotation

    def call(agent_url: str) -> tuple[int, str]:
        token = runner.agent_token(AGENT_ID, None, None)
        response = httpx.get(agent_url + "/", headers={"Authorization": f"Bearer {token}"})
        return response.status_code, jwt.get_unverified_header(token)["kid"]

    with serve(demo_agent(), platform.url, AGENT_ID) as agent_url:
        assert call(agent_url) == (200, before)  # was 401 "token signed by an unknown key"
        # SIGNING_DELAY_SECONDS later every API container has read the new key, and every
        # JWKS older than that has expired.
        platform.clock.now = utcnow() + timedelta(seconds=SIGNING_DELAY_SECONDS)
        api.keys(max_age=0)
        monkeypatch.setattr(codeshot.sdk.auth, "MIN_REFETCH_INTERVAL", 0.0)
        assert call(agent_url) == (200, new.kid)


def test_agents_keep_the_jwks_no_longer_than_the_signing_delay_allows():
    """An agent that kept a JWKS longer than the platform's max-age could meet a key that
    signs before its cached JWKS lists it."""
    assert codeshot.sdk.auth.MAX_KEY_AGE <= JWKS_MAX_AGE_SECONDS


def test_two_rotations_at_once_keep_both_keys(aws, monkeypatch):
    """Both read the secret before either writes: the second to write builds again on
    the first's keys instead of overwriting them."""
    first, second = KeyRing(aws), KeyRing(aws)
    (seed,) = first.keys()
    made: list[SigningKey] = []
    read = KeyRing._read

    def read_then_the_other_rotates(ring: KeyRing):
        out = read(ring)
        if ring is first and not made:
            made.append(second.rotate())
        return out

    monkeypatch.setattr(KeyRing, "_read", read_then_the_other_rotates)
    made.append(first.rotate())
    kids = [seed.kid, made[0].kid, made[1].kid]
    assert [k["kid"] for k in secret(aws)["keys"]] == kids
    loaded = KeyRing(aws).keys()  # a container reading the secret now
    assert [k.kid for k in loaded] == kids


def test_mcp_request_state_sealed_after_a_rotation_opens_on_every_api_instance(aws):
    stale = Services(aws)
    stale.keyring.keys()  # an instance that read the keys before the rotation
    KeyRing(aws).rotate()
    fresh = Services(aws)  # one started after it
    sealed = KeyRingCodec(fresh).seal(b"state")
    assert KeyRingCodec(stale).unseal(sealed) == b"state"


def test_an_api_key_that_cannot_be_signed_leaves_no_id_behind(aws, monkeypatch, capsys):
    """An operator's `users new-key` whose signing keys cannot be read (no GetSecretValue):
    no phantom id counts toward the user's most keys or as "not the last one"."""
    user, _ = create_user(Services(aws), "ops")
    before = Services(aws).users.get(user.user_id).api_key_ids
    monkeypatch.setattr(cli, "_target_settings",
                        lambda: aws.replace(signing_secret_id="codeshot/nowhere"))
    assert cli.main(["users", "new-key", "ops"]) != 0
    assert "UNAVAILABLE" in capsys.readouterr().err
    assert len(before) == 1 and Services(aws).users.get(user.user_id).api_key_ids == before


def test_cryptographys_keys_still_sign_and_verify_beside_the_platforms_eddsa():
    """The platform's EdDSA (PyNaCl) is PyJWT's for the whole process: a client beside it
    holding cryptography's keys (PyJWKClient's, a2a's push checks) could verify nothing."""
    from cryptography.hazmat.primitives.asymmetric import ed25519

    from codeshot.auth import eddsa

    eddsa.install()
    private = ed25519.Ed25519PrivateKey.generate()
    token = jwt.encode({"sub": "agent"}, private, algorithm="EdDSA")
    assert jwt.decode(token, private.public_key(), algorithms=["EdDSA"]) == {"sub": "agent"}
