"""OAuth for agents, the platform's half: flows waiting for their callback, and users'
tokens for agents, encrypted.

A flow (``STATE#<state>``) is bound to a user, an agent and a session, holds the PKCE
verifier, is taken once (a conditional delete: a replay finds nothing) and only before it
expires. A token (``USER#<user>`` / ``AGENT#<agent>``) is sealed with XSalsa20-Poly1305
(PyNaCl's SecretBox) under a key derived from a Secrets Manager seed secret, the user and
agent sealed inside, so an item copied to another user or agent does not open there.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from nacl.exceptions import CryptoError

from codeshot import aws
from codeshot.errors import InvalidInput, OAuthStateInvalid
from codeshot.models import utcnow
from codeshot.settings import Settings
from codeshot.store.base import Repository
from codeshot.store.tables import OAUTH, OAUTH_KEY_SECRET

if TYPE_CHECKING:
    from nacl.secret import SecretBox
    from types_boto3_dynamodb import DynamoDBClient

log = logging.getLogger(__name__)
STATE_PREFIX, USER_PREFIX, AGENT_PREFIX = "STATE#", "USER#", "AGENT#"
MAX_TOKEN_BYTES = 16_000  # a token response (access, refresh, id token) is far smaller
KEY_PERSON = b"codeshot-oauth1"  # the derivation's domain: this key is for nothing else


@dataclass(frozen=True)
class Flow:
    """An authorization in progress: who asked, where it resumes, the PKCE verifier."""

    state: str
    user_id: str
    agent_id: str
    session_id: str
    code_verifier: str
    redirect_uri: str


@dataclass(frozen=True)
class Grant:
    """That a user's token for an agent is held (never the token itself)."""

    agent_id: str
    created: datetime
    modified: datetime


class TokenCipher:
    """Seals tokens with a key derived from the seed secret (read once per process)."""

    def __init__(self, settings: Settings, secrets_client: Any | None = None) -> None:
        self.settings = settings
        self._client = secrets_client
        self._box: SecretBox | None = None
        self._lock = threading.Lock()

    def _secret_box(self) -> SecretBox:
        from nacl.encoding import RawEncoder
        from nacl.hash import blake2b
        from nacl.secret import SecretBox

        with self._lock:
            if self._box is None:
                client = self._client or aws.client("secretsmanager", self.settings)
                name = getattr(self.settings, OAUTH_KEY_SECRET.setting)
                seed = json.loads(client.get_secret_value(SecretId=name)["SecretString"])
                key = blake2b(seed[OAUTH_KEY_SECRET.seed_key].encode(), digest_size=32,
                              person=KEY_PERSON, encoder=RawEncoder)
                self._box = SecretBox(key)
            return self._box

    def seal(self, user_id: str, agent_id: str, token: dict[str, Any]) -> bytes:
        text = json.dumps({"user": user_id, "agent": agent_id, "token": token})
        return bytes(self._secret_box().encrypt(text.encode()))

    def open(self, user_id: str, agent_id: str, sealed: bytes) -> dict[str, Any]:
        data = json.loads(self._secret_box().decrypt(sealed))
        if (data["user"], data["agent"]) != (user_id, agent_id):
            raise ValueError("a token sealed for another user or agent")
        token: dict[str, Any] = data["token"]
        return token


def check_token(token: Any) -> dict[str, Any]:
    """A token response as an agent hands it over: an object with an access token."""
    if not isinstance(token, dict) or not isinstance(token.get("access_token"), str) \
            or not token["access_token"]:
        raise InvalidInput("token must be an object with an access_token")
    for name in ("refresh_token", "token_type", "scope"):
        if token.get(name) is not None and not isinstance(token[name], str):
            raise InvalidInput(f"token.{name} must be text")
    if token.get("expires_at") is not None and not isinstance(token["expires_at"], int | float):
        raise InvalidInput("token.expires_at must be a number (seconds since the epoch)")
    if len(json.dumps(token).encode()) > MAX_TOKEN_BYTES:
        raise InvalidInput(f"token exceeds {MAX_TOKEN_BYTES} bytes")
    return token


class OAuthStore(Repository):
    table = OAUTH

    def __init__(self, settings: Settings, dynamodb: DynamoDBClient | None = None,
                 cipher: TokenCipher | None = None) -> None:
        super().__init__(settings, dynamodb)
        self.cipher = cipher or TokenCipher(settings)

    # -- flows --------------------------------------------------------------------------
    def start_flow(self, user_id: str, agent_id: str, session_id: str, redirect_uri: str
                   ) -> Flow:
        from authlib.common.security import generate_token

        flow = Flow(secrets.token_urlsafe(32), user_id, agent_id, session_id,
                    generate_token(64), redirect_uri)  # RFC 7636: 43-128 characters
        self.db.put_item(TableName=self.table_name, Item={
            "pk": {"S": STATE_PREFIX + flow.state}, "sk": {"S": "STATE"},
            "user_id": {"S": user_id}, "agent_id": {"S": agent_id},
            "session_id": {"S": session_id}, "code_verifier": {"S": flow.code_verifier},
            "redirect_uri": {"S": redirect_uri},
            "expires_at": {"N": str(int(time.time()) + self.settings.oauth_state_seconds)},
        }, ConditionExpression="attribute_not_exists(pk)")
        return flow

    def take_flow(self, state: str) -> Flow:
        """The flow ``state`` names, removed: single use; OAUTH_STATE_INVALID when there is
        none (never issued, already used) or it has expired."""
        if not state or len(state) > 128:
            raise OAuthStateInvalid("the OAuth state is missing or malformed")
        try:
            item = self.db.delete_item(
                TableName=self.table_name,
                Key={"pk": {"S": STATE_PREFIX + state}, "sk": {"S": "STATE"}},
                ConditionExpression="attribute_exists(pk) AND expires_at > :now",
                ExpressionAttributeValues={":now": {"N": str(int(time.time()))}},
                ReturnValues="ALL_OLD",
            )["Attributes"]
        except self.db.exceptions.ConditionalCheckFailedException as exc:
            raise OAuthStateInvalid("this authorization link is unknown, already used or "
                                    "expired; ask the agent again for a new one") from exc
        return Flow(state, item["user_id"]["S"], item["agent_id"]["S"],
                    item["session_id"]["S"], item["code_verifier"]["S"],
                    item["redirect_uri"]["S"])

    # -- tokens -------------------------------------------------------------------------
    @staticmethod
    def _token_key(user_id: str, agent_id: str) -> dict[str, Any]:
        return {"pk": {"S": USER_PREFIX + user_id}, "sk": {"S": AGENT_PREFIX + agent_id}}

    def put_token(self, user_id: str, agent_id: str, token: dict[str, Any]) -> None:
        sealed = self.cipher.seal(user_id, agent_id, check_token(token))
        now = utcnow().isoformat()
        self.db.update_item(
            TableName=self.table_name, Key=self._token_key(user_id, agent_id),
            UpdateExpression="SET sealed = :s, modified = :m, created = if_not_exists(created, :m)",
            ExpressionAttributeValues={":s": {"B": sealed}, ":m": {"S": now}},
        )

    def get_token(self, user_id: str, agent_id: str) -> dict[str, Any] | None:
        item = self.db.get_item(TableName=self.table_name, Key=self._token_key(user_id, agent_id),
                                ConsistentRead=True).get("Item")
        if not item:
            return None
        try:
            return self.cipher.open(user_id, agent_id, item["sealed"]["B"])
        except (CryptoError, ValueError, KeyError):
            # Sealed under an older seed (a new stack kept the old table) or tampered with:
            # as good as none, so the agent asks the user to authorize again.
            log.warning("OAuth token of %s for %s cannot be opened", user_id, agent_id)
            return None

    def delete_token(self, user_id: str, agent_id: str) -> bool:
        """Forget the token; whether there was one."""
        old = self.db.delete_item(TableName=self.table_name,
                                  Key=self._token_key(user_id, agent_id),
                                  ReturnValues="ALL_OLD").get("Attributes")
        return bool(old)

    def grants(self, user_id: str) -> list[Grant]:
        """The agents holding a token for the user, by agent id."""
        kwargs: dict[str, Any] = {
            "TableName": self.table_name, "KeyConditionExpression": "pk = :u",
            "ExpressionAttributeValues": {":u": {"S": USER_PREFIX + user_id}},
            "ProjectionExpression": "sk, created, modified",
        }
        grants: list[Grant] = []
        while True:
            page = self.db.query(**kwargs)
            grants += [Grant(i["sk"]["S"].removeprefix(AGENT_PREFIX),
                             datetime.fromisoformat(i["created"]["S"]),
                             datetime.fromisoformat(i["modified"]["S"])) for i in page["Items"]]
            if "LastEvaluatedKey" not in page:
                return grants
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
