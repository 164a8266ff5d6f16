"""Ed25519 signing keys kept in Secrets Manager, published as a JWKS.

The secret is made by whoever deploys (CloudFormation in AWS: ``infra/components/
signing.py``; ``codeshot.store.provision`` locally) with a random seed text generated at
deploy time (``{"seed": ...}``, see ``tables.SIGNING_SECRET``); the first key derives from
it. A rotation (``codeshot keys rotate``) rewrites the secret as an explicit list,
``{"keys": [...]}``, newest last: the newest signs, all verify, so tokens and API keys
signed before a rotation stay valid. The platform only reads the secret.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
from dataclasses import dataclass
from typing import Any

from codeshot import aws, ids
from codeshot.errors import Unauthenticated, Unavailable
from codeshot.models import utcnow
from codeshot.settings import Settings
from codeshot.store.tables import SIGNING_SECRET

REFRESH_SECONDS = 300  # pick up rotations made by other containers
# Domain separation: the deploy-time seed text is never used as a key directly.
SEED_CONTEXT = b"codeshot-ed25519-signing-key-v1\0"


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
        from codeshot.auth.eddsa import new_seed

        return cls(kid="k_" + ids.ulid().lower(), private_bytes=new_seed(),
                   created=utcnow().isoformat())

    @classmethod
    def from_seed_text(cls, text: str) -> SigningKey:
        """The key a deploy-time generated seed text stands for (kid from its public key)."""
        from codeshot.auth.eddsa import public_jwk

        seed = hashlib.sha256(SEED_CONTEXT + text.encode()).digest()
        public = public_jwk(seed)["x"]
        return cls(kid="k_" + _b64url(hashlib.sha256(public.encode()).digest()[:12]),
                   private_bytes=seed, created="")

    def private_key(self) -> Any:
        from codeshot.auth.eddsa import signing_key

        return signing_key(self.private_bytes)

    def public_key(self) -> Any:
        return self.private_key().verify_key

    def jwk(self) -> dict[str, str]:
        from codeshot.auth.eddsa import public_jwk

        return {**public_jwk(self.private_bytes), "alg": "EdDSA", "use": "sig", "kid": self.kid}

    def to_json(self) -> dict[str, str]:
        return {"kid": self.kid, "d": _b64url(self.private_bytes), "created": self.created}

    @classmethod
    def from_json(cls, data: dict[str, str]) -> SigningKey:
        raw = base64.urlsafe_b64decode(data["d"] + "=" * (-len(data["d"]) % 4))
        return cls(kid=data["kid"], private_bytes=raw, created=data["created"])


def parse_secret(text: str) -> list[SigningKey]:
    """The keys a secret holds, in either form (generated seed, or an explicit list)."""
    data = json.loads(text)
    if "keys" in data:
        return [SigningKey.from_json(k) for k in data["keys"]]
    return [SigningKey.from_seed_text(data[SIGNING_SECRET.seed_key])]


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

    def _read(self) -> list[SigningKey]:
        value = self.secrets.get_secret_value(SecretId=self.settings.signing_secret_id)
        return parse_secret(value["SecretString"])

    def keys(self) -> list[SigningKey]:
        with self._lock:
            if not self._keys or time.monotonic() - self._loaded_at > REFRESH_SECONDS:
                try:
                    self._keys = self._read()
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
        """Add a new newest key (the old ones keep verifying): an operator's step
        (``codeshot keys rotate``, needs secretsmanager:PutSecretValue), never the
        platform's."""
        with self._lock:
            current = self._read()
            new = SigningKey.generate()
            keys = [*current, new]
            self.secrets.put_secret_value(
                SecretId=self.settings.signing_secret_id,
                SecretString=json.dumps({"keys": [k.to_json() for k in keys]}),
            )
            self._keys, self._loaded_at = keys, time.monotonic()
            return new
