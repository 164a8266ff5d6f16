"""Ed25519 for PyJWT through PyNaCl (libsodium) instead of ``cryptography``.

PyJWT's own EdDSA needs ``cryptography``, 14 MB of every Lambda bundle (more than the
rest of an agent's); PyNaCl is 3 MB and PyJWT takes algorithms as plug-ins. PyJWT still
does everything else (encoding, claims, expiry, audience). Keys are PyNaCl's
``SigningKey`` (from the 32-byte RFC 8032 seed) and ``VerifyKey``; a ``cryptography``
Ed25519 key object is accepted too, so code holding one keeps working.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import jwt
from jwt.algorithms import Algorithm
from jwt.exceptions import InvalidKeyError
from jwt.utils import base64url_decode, base64url_encode
from nacl.exceptions import BadSignatureError
from nacl.signing import SigningKey, VerifyKey

ALGORITHM = "EdDSA"
_lock = threading.Lock()


def b64url(data: bytes) -> str:
    """Unpadded base64url (JWK members, the signing secret's keys)."""
    return base64url_encode(data).decode()


def unb64url(text: str) -> bytes:
    return base64url_decode(text)


def _raw(key: Any, private: bool) -> bytes | None:
    """The raw bytes of a ``cryptography`` Ed25519 key, or None for anything else."""
    try:
        from cryptography.hazmat.primitives.asymmetric import ed25519
        from cryptography.hazmat.primitives.serialization import (
            Encoding,
            NoEncryption,
            PrivateFormat,
            PublicFormat,
        )
    except ImportError:  # not installed (Lambda bundles): only PyNaCl keys exist there
        return None
    if private and isinstance(key, ed25519.Ed25519PrivateKey):
        return key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    if not private and isinstance(key, ed25519.Ed25519PublicKey):
        return key.public_bytes(Encoding.Raw, PublicFormat.Raw)
    return None


class NaclEdDSA(Algorithm):
    """PyJWT's ``EdDSA`` (Ed25519 only) on PyNaCl."""

    def prepare_key(self, key: Any) -> SigningKey | VerifyKey:
        if isinstance(key, (SigningKey, VerifyKey)):
            return key
        # Installed for the whole process: code beside it holding cryptography's keys
        # (PyJWKClient's, a2a's, tests') must keep working.
        seed = _raw(key, private=True)
        if seed is not None:
            return SigningKey(seed)
        public = _raw(key, private=False)
        if public is not None:
            return VerifyKey(public)
        raise InvalidKeyError("EdDSA needs an Ed25519 SigningKey or VerifyKey")

    def sign(self, msg: bytes, key: SigningKey | VerifyKey) -> bytes:
        if not isinstance(key, SigningKey):
            raise InvalidKeyError("signing needs the private (signing) key")
        return key.sign(msg).signature

    def verify(self, msg: bytes, key: SigningKey | VerifyKey, sig: bytes) -> bool:
        verify_key = key.verify_key if isinstance(key, SigningKey) else key
        try:
            verify_key.verify(msg, sig)
        except (BadSignatureError, ValueError):
            return False
        return True

    @staticmethod
    def to_jwk(key_obj: Any, as_dict: bool = False) -> Any:
        verify_key = key_obj.verify_key if isinstance(key_obj, SigningKey) else key_obj
        jwk = {"kty": "OKP", "crv": "Ed25519", "x": b64url(bytes(verify_key))}
        return jwk if as_dict else json.dumps(jwk)

    @staticmethod
    def from_jwk(jwk: Any) -> VerifyKey:
        data = json.loads(jwk) if isinstance(jwk, str) else jwk
        if data.get("kty") != "OKP" or data.get("crv") != "Ed25519" or "x" not in data:
            raise InvalidKeyError("not an Ed25519 public JWK")
        try:
            return VerifyKey(unb64url(data["x"]))
        except (ValueError, TypeError) as exc:
            raise InvalidKeyError(f"bad Ed25519 public key: {exc}") from exc


def install() -> None:
    """Make PyJWT's EdDSA this one (idempotent; replaces ``cryptography``'s if present)."""
    with _lock:
        try:
            current = jwt.get_algorithm_by_name(ALGORITHM)
        except NotImplementedError:
            current = None
        if isinstance(current, NaclEdDSA):
            return
        if current is not None:
            jwt.unregister_algorithm(ALGORITHM)
        jwt.register_algorithm(ALGORITHM, NaclEdDSA())


def signing_key(seed: bytes) -> SigningKey:
    return SigningKey(seed)


def public_jwk(seed: bytes) -> dict[str, str]:
    return NaclEdDSA.to_jwk(SigningKey(seed), as_dict=True)  # type: ignore[no-any-return]


def verify_key_from_jwk(jwk: dict[str, Any]) -> VerifyKey:
    return NaclEdDSA.from_jwk(jwk)


def new_seed() -> bytes:
    return bytes(SigningKey.generate())
