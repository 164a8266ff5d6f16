"""Ed25519 signing keys kept in Secrets Manager, published as a JWKS.

The secret is made by whoever deploys (CloudFormation in AWS: ``infra/components/
signing.py``; ``codeshot.store.provision`` locally) with a random seed text generated at
deploy time (``{"seed": ...}``, see ``tables.SIGNING_SECRET``); the first key derives from
it. A rotation (``codeshot keys rotate``) rewrites the secret as an explicit list,
``{"keys": [...]}``, newest last. Every key is in the JWKS and verifies at once, so tokens
and API keys signed before a rotation stay valid; a new key signs only once every JWKS
cache has had time to see it (``SIGNING_DELAY_SECONDS``), the previous one until then.
The platform only reads the secret.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

from codeshot import aws, ids
from codeshot.errors import Conflict, Unauthenticated, Unavailable
from codeshot.models import Clock, utcnow
from codeshot.settings import Settings
from codeshot.store.tables import SIGNING_SECRET

log = logging.getLogger("codeshot.auth")
REFRESH_SECONDS = 300  # pick up rotations made by other containers
JWKS_MAX_AGE_SECONDS = 300  # how long HTTP caches and agents may keep /.well-known/jwks.json
# A new key signs only once every JWKS anyone may still use lists it: an API container
# serves the key ring it read up to REFRESH_SECONDS ago, and that answer may be kept for
# JWKS_MAX_AGE_SECONDS more (codeshot.sdk.auth.MAX_KEY_AGE, an agent's cache, is no longer).
# Until then the previous key signs, so agents never see a kid their JWKS lacks.
SIGNING_DELAY_SECONDS = REFRESH_SECONDS + JWKS_MAX_AGE_SECONDS
# A token naming a key we do not have may be signed by a fresh rotation, or forged: read
# the keys again for it at most this often, so forged kids cannot hammer Secrets Manager.
UNKNOWN_KID_RELOAD_SECONDS = 10
# Domain separation: the deploy-time seed text is never used as a key directly.
SEED_CONTEXT = b"codeshot-ed25519-signing-key-v1\0"
CURRENT = "AWSCURRENT"  # the secret's version the platform reads
# The label of a rotation's version until it is made current (a label keeps Secrets
# Manager from deleting it meanwhile; each rotation moves it to its own version).
ROTATION_STAGE = "codeshot-rotation"
# A failed attempt means another rotation succeeded: N rotations at once need at most N
# attempts each (operators rotate by hand, so far fewer are ever at once).
ROTATE_ATTEMPTS = 10


class SigningUnavailable(Unavailable):
    """Secrets Manager cannot be read and no keys are cached."""


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
        from codeshot.auth.eddsa import b64url, public_jwk

        seed = hashlib.sha256(SEED_CONTEXT + text.encode()).digest()
        public = public_jwk(seed)["x"]
        return cls(kid="k_" + b64url(hashlib.sha256(public.encode()).digest()[:12]),
                   private_bytes=seed, created="")

    def signs_from(self) -> datetime:
        """When the key may start signing (``created`` + SIGNING_DELAY_SECONDS); always,
        for the deploy-time seed key, which every JWKS has listed from the start."""
        if not self.created:
            return datetime.min.replace(tzinfo=UTC)
        created = datetime.fromisoformat(self.created)
        if created.tzinfo is None:  # written by hand without an offset: UTC
            created = created.replace(tzinfo=UTC)
        return created + timedelta(seconds=SIGNING_DELAY_SECONDS)

    def private_key(self) -> Any:
        from codeshot.auth.eddsa import signing_key

        return signing_key(self.private_bytes)

    def public_key(self) -> Any:
        return self.private_key().verify_key

    def jwk(self) -> dict[str, str]:
        from codeshot.auth.eddsa import public_jwk

        return {**public_jwk(self.private_bytes), "alg": "EdDSA", "use": "sig", "kid": self.kid}

    def to_json(self) -> dict[str, str]:
        from codeshot.auth.eddsa import b64url

        return {"kid": self.kid, "d": b64url(self.private_bytes), "created": self.created}

    @classmethod
    def from_json(cls, data: dict[str, str]) -> SigningKey:
        from codeshot.auth.eddsa import unb64url

        key = cls(kid=data["kid"], private_bytes=unb64url(data["d"]), created=data["created"])
        key.signs_from()  # a bad `created` fails reading the secret, not signing later
        return key


def parse_secret(text: str) -> list[SigningKey]:
    """The keys a secret holds, in either form (generated seed, or an explicit list)."""
    data = json.loads(text)
    if "keys" in data:
        return [SigningKey.from_json(k) for k in data["keys"]]
    return [SigningKey.from_seed_text(data[SIGNING_SECRET.seed_key])]


class KeyRing:
    """The platform's signing keys, cached in memory and refreshed every few minutes."""

    def __init__(self, settings: Settings, secrets: Any | None = None,
                 clock: Clock = utcnow) -> None:
        self.settings = settings
        self._secrets = secrets
        self.clock = clock  # wall time, compared with the keys' `created`
        self._keys: list[SigningKey] = []
        self._loaded_at = 0.0
        self._lock = threading.Lock()

    @property
    def secrets(self) -> Any:
        if self._secrets is None:
            self._secrets = aws.client("secretsmanager", self.settings)
        return self._secrets

    def _read(self) -> tuple[str, list[SigningKey]]:
        """(the current version's id, its keys). The stage is named: moto answers a bare
        read with the version last put, not the one AWSCURRENT was moved to."""
        value = self.secrets.get_secret_value(SecretId=self.settings.signing_secret_id,
                                              VersionStage=CURRENT)
        return value["VersionId"], parse_secret(value["SecretString"])

    def keys(self, max_age: float = REFRESH_SECONDS) -> list[SigningKey]:
        """The keys, read again if they were read more than ``max_age`` seconds ago (the
        check and the read happen under one lock: concurrent callers share one read)."""
        with self._lock:
            if self._keys and time.monotonic() - self._loaded_at < max_age:
                return self._keys
            try:
                self._keys = self._read()[1]
            except Exception as exc:
                if not self._keys:
                    raise SigningUnavailable(
                        "signing keys are unavailable (Secrets Manager): " + str(exc)
                    ) from exc
                log.warning("reading the signing keys failed; keeping the cached ones: %s", exc)
            self._loaded_at = time.monotonic()  # after a failure too: no retry per request
            return self._keys

    def signing_key(self) -> SigningKey:
        """The newest key whose SIGNING_DELAY_SECONDS have passed (the oldest key if none
        has: a secret holding only new keys)."""
        keys = self.keys()
        now = self.clock()
        ready = [k for k in keys if k.signs_from() <= now]
        return ready[-1] if ready else keys[0]

    def verification_key(self, kid: str | None) -> Any:
        for key in self.keys():
            if key.kid == kid:
                return key.public_key()
        for key in self.keys(max_age=UNKNOWN_KID_RELOAD_SECONDS):
            if key.kid == kid:
                return key.public_key()
        raise Unauthenticated("token signed by an unknown key")

    def jwks(self) -> dict[str, list[dict[str, str]]]:
        return {"keys": [k.jwk() for k in self.keys()]}

    def rotate(self) -> SigningKey:
        """Add a new newest key (the old ones keep verifying): an operator's step
        (``codeshot keys rotate``, needs secretsmanager:GetSecretValue, PutSecretValue and
        UpdateSecretVersionStage), never the platform's.

        Compare-and-swap, so that concurrent rotations each keep their key: the new list
        is put as a version that is not yet current, then AWSCURRENT is moved to it only
        from the version it was built on; if another rotation moved it first, the move
        fails and the list is built again on top of that one."""
        new = SigningKey.generate()
        secret_id = self.settings.signing_secret_id
        for _ in range(ROTATE_ATTEMPTS):
            base, current = self._read()
            keys = [*current, new]
            version = str(uuid.uuid4())
            self.secrets.put_secret_value(
                SecretId=secret_id, ClientRequestToken=version, VersionStages=[ROTATION_STAGE],
                SecretString=json.dumps({"keys": [k.to_json() for k in keys]}),
            )
            try:
                self.secrets.update_secret_version_stage(
                    SecretId=secret_id, VersionStage=CURRENT, MoveToVersionId=version,
                    RemoveFromVersionId=base)
            except ClientError:
                if self._read()[0] == base:
                    raise  # not another rotation: something else is wrong
                time.sleep(random.uniform(0, 0.2))  # noqa: S311 - jitter: apart next time
                continue
            with self._lock:
                self._keys, self._loaded_at = keys, time.monotonic()
            return new
        raise Conflict(f"the signing secret changed under each of {ROTATE_ATTEMPTS} attempts "
                       "to rotate it (other rotations at the same time); run it again")
