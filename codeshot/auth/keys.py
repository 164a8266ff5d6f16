"""Ed25519 signing keys kept in Secrets Manager, published as a JWKS.

The secret holds every key, newest last: the newest signs, all verify (so tokens signed
before a rotation stay valid until they expire). The secret is created on first use
with ``create_secret``, which fails if another cold start created it first; the loser
then reads the winner's keys, so two starts can never end up with different keys.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from dataclasses import dataclass
from typing import Any

from codeshot import aws, ids
from codeshot.errors import Unauthenticated, Unavailable
from codeshot.models import utcnow
from codeshot.settings import Settings

REFRESH_SECONDS = 300  # pick up rotations made by other containers


class SigningUnavailable(Unavailable):
    """Secrets Manager cannot be read and no keys are cached."""


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass(frozen=True)
class SigningKey:
    kid: str
    private_bytes: bytes  # raw 32-byte Ed25519 seed
    created: str

    @classmethod
    def generate(cls) -> SigningKey:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
        from cryptography.hazmat.primitives.serialization import (
            Encoding,
            NoEncryption,
            PrivateFormat,
        )

        raw = Ed25519PrivateKey.generate().private_bytes(
            Encoding.Raw, PrivateFormat.Raw, NoEncryption()
        )
        return cls(kid="k_" + ids.ulid().lower(), private_bytes=raw,
                   created=utcnow().isoformat())

    def private_key(self) -> Any:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        return Ed25519PrivateKey.from_private_bytes(self.private_bytes)

    def public_key(self) -> Any:
        return self.private_key().public_key()

    def jwk(self) -> dict[str, str]:
        from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

        raw = self.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        return {"kty": "OKP", "crv": "Ed25519", "alg": "EdDSA", "use": "sig",
                "kid": self.kid, "x": _b64url(raw)}

    def to_json(self) -> dict[str, str]:
        return {"kid": self.kid, "d": _b64url(self.private_bytes), "created": self.created}

    @classmethod
    def from_json(cls, data: dict[str, str]) -> SigningKey:
        raw = base64.urlsafe_b64decode(data["d"] + "=" * (-len(data["d"]) % 4))
        return cls(kid=data["kid"], private_bytes=raw, created=data["created"])


class KeyRing:
    """The platform's signing keys, cached in memory and refreshed every few minutes."""

    def __init__(self, settings: Settings, secrets: Any | None = None) -> None:
        self.settings = settings
        self._secrets = secrets
        self._keys: list[SigningKey] = []
        self._loaded_at = 0.0
        self._lock = threading.Lock()

    @property
    def secrets(self) -> Any:
        if self._secrets is None:
            self._secrets = aws.client("secretsmanager", self.settings)
        return self._secrets

    def _read(self) -> list[SigningKey] | None:
        try:
            value = self.secrets.get_secret_value(SecretId=self.settings.signing_secret_id)
        except self.secrets.exceptions.ResourceNotFoundException:
            return None
        return [SigningKey.from_json(k) for k in json.loads(value["SecretString"])["keys"]]

    def _create(self) -> list[SigningKey]:
        keys = [SigningKey.generate()]
        try:
            self.secrets.create_secret(
                Name=self.settings.signing_secret_id,
                Description="codeshot Ed25519 signing keys (newest signs)",
                SecretString=json.dumps({"keys": [k.to_json() for k in keys]}),
            )
        except self.secrets.exceptions.ResourceExistsException:
            return self._read() or []  # another start won the race: use its keys
        return keys

    def keys(self) -> list[SigningKey]:
        with self._lock:
            if not self._keys or time.monotonic() - self._loaded_at > REFRESH_SECONDS:
                try:
                    self._keys = self._read() or self._create()
                except Exception as exc:
                    if self._keys:  # keep serving with the keys we have
                        return self._keys
                    raise SigningUnavailable(
                        "signing keys are unavailable (Secrets Manager): " + str(exc)
                    ) from exc
                self._loaded_at = time.monotonic()
            return self._keys

    def signing_key(self) -> SigningKey:
        return self.keys()[-1]

    def verification_key(self, kid: str | None) -> Any:
        for key in self.keys():
            if key.kid == kid:
                return key.public_key()
        self._loaded_at = 0.0  # an unknown kid may be a fresh rotation: reload once
        for key in self.keys():
            if key.kid == kid:
                return key.public_key()
        raise Unauthenticated("token signed by an unknown key")

    def jwks(self) -> dict[str, list[dict[str, str]]]:
        return {"keys": [k.jwk() for k in self.keys()]}

    def rotate(self) -> SigningKey:
        """Add a new newest key (the old ones keep verifying)."""
        with self._lock:
            current = self._read() or []
            new = SigningKey.generate()
            keys = [*current, new]
            self.secrets.put_secret_value(
                SecretId=self.settings.signing_secret_id,
                SecretString=json.dumps({"keys": [k.to_json() for k in keys]}),
            )
            self._keys, self._loaded_at = keys, time.monotonic()
            return new
