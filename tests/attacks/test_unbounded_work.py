"""Unbounded work (#13 items 9-10): what one request, or one user, may make the platform
do is bounded and charged."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import jwt
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from codeshot import aws
from codeshot.auth import keys, tokens
from codeshot.auth.keys import KeyRing
from codeshot.auth.service import Auth
from tests.conftest import code

USER = "{ user { username } }"


def test_unknown_kids_do_not_hammer_secrets_manager(platform, monkeypatch):
    _, key = platform.user("kid")
    claims = jwt.decode(key, options={"verify_signature": False})
    reads: list[str] = []
    stop = aws.on_call(lambda service, op: reads.append(op) if op == "GetSecretValue" else None)
    forged = [tokens.sign(claims, f"k_forged{i}", Ed25519PrivateKey.generate())
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
    elsewhere = KeyRing(platform.services.settings)
    new_key = elsewhere.rotate()
    user = platform.services.users.create("fresh")
    fresh = Auth(platform.services.settings, elsewhere, platform.services.users).issue_api_key(
        user)
    assert jwt.get_unverified_header(fresh)["kid"] == new_key.kid
    time.sleep(0.6)
    assert platform.gql(fresh, USER)["data"]["user"]["username"] == "fresh"
