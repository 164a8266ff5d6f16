"""OAuth for agents, the platform's half: flows waiting for their callback, and users'
tokens for agents, encrypted.

A flow (``STATE#<state>``) is bound to a user, an agent and a session, holds the PKCE
verifier and the provider's authorization URL, is bound to the first browser that
continues from its link's page (the SHA-256 of that browser's cookie), and is taken
once (a conditional delete: a replay finds nothing), only before it expires and only by
that browser. A token (``USER#<user>`` / ``AGENT#<agent>``) is sealed with
XSalsa20-Poly1305 (PyNaCl's SecretBox) under a key derived from a Secrets Manager seed
secret, the user and agent sealed inside, so an item copied to another user or agent
does not open there. Flows and
tokens carry ``agent_id``, the key of the ``by_agent`` index: an agent's are found at once.
"""

from __future__ import annotations

import contextlib
import hashlib
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
from codeshot.errors import Forbidden, InvalidInput, OAuthBrowserMismatch, OAuthStateInvalid
from codeshot.models import utcnow
from codeshot.settings import Settings
from codeshot.store.base import Repository
from codeshot.store.dynamo import drop_partition
from codeshot.store.tables import OAUTH, OAUTH_KEY_SECRET

if TYPE_CHECKING:
    from nacl.secret import SecretBox
    from types_boto3_dynamodb import DynamoDBClient

log = logging.getLogger(__name__)
STATE_PREFIX, USER_PREFIX, AGENT_PREFIX = "STATE#", "USER#", "AGENT#"
CLIENT_PREFIX = "CLIENT#"  # an OAuth client's claim: CLIENT#<authorization host> / client id
MAX_TOKEN_BYTES = 16_000  # a token response (access, refresh, id token) is far smaller
KEY_PERSON = b"codeshot-oauth1"  # the derivation's domain: this key is for nothing else
BY_AGENT = "by_agent"
PAGE = 100  # an agent's keys per query page, deleted before the next page is read


@dataclass(frozen=True)
class Flow:
    """An authorization in progress: who asked, where it resumes, the PKCE verifier."""

    state: str
    user_id: str
    agent_id: str
    session_id: str
    code_verifier: str
    redirect_uri: str

    @classmethod
    def new(cls, user_id: str, agent_id: str, session_id: str, redirect_uri: str) -> Flow:
        """A fresh state and PKCE verifier (RFC 7636: 43-128 characters)."""
        from authlib.common.security import generate_token

        return cls(secrets.token_urlsafe(32), user_id, agent_id, session_id,
                   generate_token(64), redirect_uri)


@dataclass(frozen=True)
class PendingLink:
    """An open flow as its link's page shows it."""

    user_id: str
    agent_id: str
    authorize_url: str


def browser_digest(browser: str) -> str:
    """What is stored of a browser's cookie: a reader of the table cannot forge it."""
    return hashlib.sha256(browser.encode()).hexdigest()


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
    @staticmethod
    def _flow_key(state: str) -> dict[str, Any]:
        if not state or len(state) > 128:
            raise OAuthStateInvalid("the OAuth state is missing or malformed")
        return {"pk": {"S": STATE_PREFIX + state}, "sk": {"S": "STATE"}}

    def start_flow(self, flow: Flow, authorize_url: str) -> None:
        """Keep ``flow`` open for its callback; ``authorize_url`` is where its link sends
        the browser (the provider's authorization URL with the flow's state)."""
        self.db.put_item(TableName=self.table_name, Item={
            **self._flow_key(flow.state),
            "user_id": {"S": flow.user_id}, "agent_id": {"S": flow.agent_id},
            "session_id": {"S": flow.session_id}, "code_verifier": {"S": flow.code_verifier},
            "redirect_uri": {"S": flow.redirect_uri}, "authorize_url": {"S": authorize_url},
            "expires_at": {"N": str(int(time.time()) + self.settings.oauth_state_seconds)},
        }, ConditionExpression="attribute_not_exists(pk)")

    def claim_client(self, host: str, client_id: str, owner: str) -> None:
        """The first owner whose agent asks with an OAuth client (``client_id`` at
        ``host``) keeps it: the callback is one for all agents, so another owner's agent
        naming that client would have the user authorize the first owner's app and get
        its code. Claims carry no agent id: they outlive agents, for their owner."""
        try:
            self.db.put_item(
                TableName=self.table_name,
                Item={"pk": {"S": CLIENT_PREFIX + host}, "sk": {"S": client_id},
                      "owner": {"S": owner}},
                ConditionExpression="attribute_not_exists(pk) OR #o = :o",
                ExpressionAttributeNames={"#o": "owner"},
                ExpressionAttributeValues={":o": {"S": owner}})
        except self.db.exceptions.ConditionalCheckFailedException:
            raise Forbidden(f"the OAuth client {client_id!r} at {host} is another owner's: "
                            "an agent asks for authorizations with its own owner's "
                            "client") from None

    def peek_flow(self, state: str, browser: str | None) -> PendingLink:
        """The open flow ``state`` names, unchanged (what its link's page shows); refused
        as opening it would be."""
        item = self.db.get_item(TableName=self.table_name, Key=self._flow_key(state),
                                ConsistentRead=True).get("Item")
        if not item or int(item["expires_at"]["N"]) <= time.time() or (
                "browser" in item and item["browser"]["S"] != browser_digest(browser or "")):
            raise self._refusal(item, opening=True)
        return PendingLink(item["user_id"]["S"], item["agent_id"]["S"],
                           item["authorize_url"]["S"])

    def open_flow(self, state: str, browser: str) -> str:
        """Bind the flow to ``browser`` (its cookie) if no browser is bound yet, and return
        the provider's URL; the same browser may continue again, no other."""
        try:
            item = self.db.update_item(
                TableName=self.table_name, Key=self._flow_key(state),
                UpdateExpression="SET browser = :b",
                ConditionExpression="attribute_exists(pk) AND expires_at > :now AND "
                                    "(attribute_not_exists(browser) OR browser = :b)",
                ExpressionAttributeValues={":b": {"S": browser_digest(browser)},
                                           ":now": {"N": str(int(time.time()))}},
                ReturnValues="ALL_NEW", ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )["Attributes"]
        except self.db.exceptions.ConditionalCheckFailedException as exc:
            raise self._refusal(exc.response.get("Item"), opening=True) from exc
        return item["authorize_url"]["S"]

    def take_flow(self, state: str, browser: str | None) -> Flow:
        """The flow ``state`` names, removed: single use, by the browser that opened its
        link. OAUTH_STATE_INVALID when there is none (never issued, already used) or it
        has expired; OAUTH_BROWSER_MISMATCH, the flow left as it was, when ``browser``
        (the callback's cookie) is not the one that opened it, or there is none."""
        try:
            item = self.db.delete_item(
                TableName=self.table_name, Key=self._flow_key(state),
                ConditionExpression="attribute_exists(pk) AND expires_at > :now "
                                    "AND browser = :b",
                ExpressionAttributeValues={":now": {"N": str(int(time.time()))},
                                           ":b": {"S": browser_digest(browser or "")}},
                ReturnValues="ALL_OLD", ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )["Attributes"]
        except self.db.exceptions.ConditionalCheckFailedException as exc:
            raise self._refusal(exc.response.get("Item"), opening=False,
                                cookie=bool(browser)) from exc
        return Flow(state, item["user_id"]["S"], item["agent_id"]["S"],
                    item["session_id"]["S"], item["code_verifier"]["S"],
                    item["redirect_uri"]["S"])

    @staticmethod
    def _refusal(item: Any, *, opening: bool, cookie: bool = True) -> Exception:
        """Why a flow's conditional write failed, from the item as it was (None: none)."""
        if not item or int(item["expires_at"]["N"]) <= time.time():
            return OAuthStateInvalid("this authorization link is unknown, already used or "
                                     "expired; ask the agent again for a new one")
        if opening:
            return OAuthBrowserMismatch("this authorization link was opened in another "
                                        "browser first; ask the agent again for a new one")
        if not cookie:
            return OAuthBrowserMismatch(
                "this browser did not open the authorization link (no OAuth cookie: it was "
                "opened elsewhere, or cookies are blocked); open the link the agent gave "
                "you in this browser")
        return OAuthBrowserMismatch("this authorization was started in another browser; "
                                    "finish it there, or ask the agent again for a new link")

    def forget_agent(self, agent_id: str) -> int:
        """Delete the agent's flows and every user's token for it (a deleted or renamed
        agent: one registered later under its id starts with none); how many."""
        kwargs: dict[str, Any] = {
            "TableName": self.table_name, "IndexName": BY_AGENT, "Limit": PAGE,
            "KeyConditionExpression": "agent_id = :a",
            "ExpressionAttributeValues": {":a": {"S": agent_id}},
        }
        deleted = 0
        while True:
            page = self.db.query(**kwargs)
            # Key by key: DeleteItem cannot write an item, as BatchWriteItem could (its
            # grant would let these roles plant one); a throttled delete raises once
            # boto3's retries (with backoff) are spent, and the caller's retry resumes.
            for item in page["Items"]:
                self.db.delete_item(TableName=self.table_name,
                                    Key={"pk": item["pk"], "sk": item["sk"]})
            deleted += len(page["Items"])
            if "LastEvaluatedKey" not in page:
                return deleted
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def forget_agent_part(self, agent_id: str, most: int) -> bool:
        """Delete up to ``most`` of the agent's flows and users' tokens for it (as
        :meth:`forget_agent`, a bounded part of it); whether any may be left (items just
        deleted may still be in the index a moment: deleting them again does nothing)."""
        page = self.db.query(TableName=self.table_name, IndexName=BY_AGENT, Limit=most,
                             KeyConditionExpression="agent_id = :a",
                             ExpressionAttributeValues={":a": {"S": agent_id}})
        for item in page["Items"]:
            self.db.delete_item(TableName=self.table_name,
                                Key={"pk": item["pk"], "sk": item["sk"]})
        return "LastEvaluatedKey" in page

    def forget_user(self, user_id: str, most: int) -> bool:
        """Delete up to ``most`` of a deleted user's tokens; whether any may be left."""
        return drop_partition(self.db, self.table_name, "pk", "sk", USER_PREFIX + user_id,
                              most)

    # -- tokens -------------------------------------------------------------------------
    @staticmethod
    def _token_key(user_id: str, agent_id: str) -> dict[str, Any]:
        return {"pk": {"S": USER_PREFIX + user_id}, "sk": {"S": AGENT_PREFIX + agent_id}}

    def put_token(self, user_id: str, agent_id: str, token: dict[str, Any]) -> None:
        sealed = self.cipher.seal(user_id, agent_id, check_token(token))
        now = utcnow().isoformat()
        self.db.update_item(
            TableName=self.table_name, Key=self._token_key(user_id, agent_id),
            UpdateExpression="SET sealed = :s, agent_id = :a, modified = :m, "
                             "created = if_not_exists(created, :m)",
            ExpressionAttributeValues={":s": {"B": sealed}, ":a": {"S": agent_id},
                                       ":m": {"S": now}},
        )

    def get_token(self, user_id: str, agent_id: str,
                  not_before: datetime | None = None) -> dict[str, Any] | None:
        """The user's token for the agent; ``None`` if there is none, or if it was last
        written before ``not_before`` (the agent's registration: then it was a former
        agent's of the same id, stored before tokens carried ``agent_id`` for the
        deletion's index), which is deleted."""
        key = self._token_key(user_id, agent_id)
        item = self.db.get_item(TableName=self.table_name, Key=key,
                                ConsistentRead=True).get("Item")
        if not item:
            return None
        if not_before and datetime.fromisoformat(item["modified"]["S"]) < not_before:
            # Written again meanwhile: leave it, the next read judges that one.
            with contextlib.suppress(self.db.exceptions.ConditionalCheckFailedException):
                self.db.delete_item(TableName=self.table_name, Key=key,
                                    ConditionExpression="modified = :m",
                                    ExpressionAttributeValues={":m": item["modified"]})
            log.warning("OAuth token of %s for a former agent %s deleted", user_id, agent_id)
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
