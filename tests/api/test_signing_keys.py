"""Signing keys as a deploy makes them (a random seed text CloudFormation generates) and
as an operator rotates them (`codeshot keys rotate`): the platform only reads the secret."""

from __future__ import annotations

import json

import pytest

from codeshot import aws as aws_clients
from codeshot import cli
from codeshot.auth.keys import SigningKey, SigningUnavailable
from codeshot.services import Services
from codeshot.store.tables import SIGNING_SECRET
from codeshot.usecases.users import create_user


def secret(settings) -> dict:
    client = aws_clients.client("secretsmanager", settings)
    return json.loads(client.get_secret_value(SecretId=settings.signing_secret_id)["SecretString"])


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
    assert stored[1]["kid"] in printed and first.kid in printed
    fresh = Services(aws)  # a cold container after the rotation
    assert fresh.keyring.signing_key().kid == stored[1]["kid"]
    assert fresh.auth.user_for_api_key(api_key).username == "ops"
