"""Users and the ids of their active API keys (the keys themselves are never stored)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from codeshot import ids
from codeshot.errors import Conflict, InvalidInput, LastApiKey, NotFound
from codeshot.models import MAX_DAILY_LIMIT, Session, User, validate_handle
from codeshot.store.base import Repository
from codeshot.store.dynamo import (
    cancelled_by,
    from_item,
    is_condition_failure,
    lookup_key,
    retry_transient,
    to_item,
)
from codeshot.store.tables import EXPIRES_AT, USERS

if TYPE_CHECKING:
    from types_boto3_dynamodb.type_defs import AttributeValueTypeDef, UpdateTypeDef

GUARD_PREFIX = "@"  # "@<username>" -> user_id, written with the user in one transaction
# "!<Cognito sub>" -> user_id: the one user a signed-in identity is, written the same way.
IDENTITY_PREFIX = "!"
# "%<user_id>#<idempotency key>" -> the API key a createApiKey under that key made, kept
# ONCE_SECONDS (the table's TTL): what signs it again (:class:`IssuedKey`), never the key.
ONCE_PREFIX = "%"
ONCE_SECONDS = 86_400
NOT_USERS = (GUARD_PREFIX, IDENTITY_PREFIX, ONCE_PREFIX)  # other items' ids start so
REVOKED_SINCE = ("the API key this idempotencyKey made was revoked since; use a new "
                 "idempotencyKey for a new key")
# An added key's condition: the user has fewer than :most keys.
ROOM = "attribute_not_exists(api_key_ids) OR size(api_key_ids) < :most"
LIST_PAGE = 100  # users an operator's list shows at a time
# The platform's own name: its planner is the agent "platform/planner", and a user of
# that name would share the planner's id, counters and name in chat logs.
PLATFORM_USERNAME = "platform"
LIMITS = ("daily_query_limit", "daily_token_limit")
# What a deleted user's tombstone no longer holds (its identity stays: the account's
# sign-in then finds a deleted user, not a new one to name).
# A tombstone's erasure's progress, written by each part's count (the eraser's grant).
ERASURE_FIELDS = ("erasure_part", "erasure_step", "erasure_after", "erasure_by",
                  "erasure_ran", "erasure_recheck")
ERASED_FIELDS = ("api_key_ids", "email", "first_name", "last_name", "time_zone",
                 "operator", *LIMITS)


@dataclass(frozen=True)
class ErasureProgress:
    """Where a deleted user's erasure goes on after a part: its ``step`` and cursor in it
    (``after``), the send that counted the part (``sent``), when it ran (``ran``, ISO) and
    whether it was the last (``erased``)."""

    step: int
    after: str | None
    sent: str
    ran: str
    erased: bool = False


@dataclass(frozen=True)
class IssuedKey:
    """An API key as its claims: signed again by the key ``kid`` (Ed25519 signatures are
    deterministic), they are the same API key."""

    key_id: str  # its jti
    issued_at: int  # its iat
    kid: str  # the signing key's id


def _too_many(most: int) -> InvalidInput:
    return InvalidInput(f"you have {most} active API keys, the most allowed; revoke one first")


def _user(item: dict[str, Any]) -> User:
    """A stored user. A limit out of range (one written before set_limits refused it, such
    as 10**40, which DynamoDB holds but boto3 cannot read) reads as the nearest allowed
    value: the user stays readable, and an operator can set the limit again."""
    for name in LIMITS:
        raw = item.get(name, {}).get("N")
        if raw is not None and not 0 <= Decimal(raw) <= MAX_DAILY_LIMIT:
            item = item | {name: {"N": "0" if Decimal(raw) < 0 else str(MAX_DAILY_LIMIT)}}
    return User.from_dict(from_item(item))


def _awaiting(part: int) -> str:
    """A tombstone's condition: its erasure awaits part ``part`` (``:part``)."""
    awaited = "erasure_part = :part" if part else \
        "(attribute_not_exists(erasure_part) OR erasure_part = :part)"
    return f"attribute_exists(deleted) AND {awaited}"


class UserStore(Repository):
    table = USERS

    def create(self, username: str, identity: str | None = None, **profile: Any) -> User:
        """A new user; with ``identity`` (a Cognito sub), the user that identity signs in
        as. A taken username, or an identity that already has a user, is a Conflict."""
        validate_handle(username, "username")
        if username == PLATFORM_USERNAME:
            raise InvalidInput(f"username {username!r} is the platform's own")
        user = User(user_id="u_" + ids.ulid().lower(), username=username, identity=identity,
                    **profile)
        guards = [GUARD_PREFIX + username] + ([IDENTITY_PREFIX + identity] if identity else [])
        puts = [{"user_id": guard, "owner_id": user.user_id} for guard in guards]
        puts.append(user.to_dict() | {"api_key_ids": None, "erasure_recheck": None})  # sets
        try:
            self.db.transact_write_items(TransactItems=[
                {"Put": {"TableName": self.table_name, "Item": to_item(item),
                         "ConditionExpression": "attribute_not_exists(user_id)"}}
                for item in puts])
        except Exception as exc:
            if is_condition_failure(exc):
                if identity and self.find_by_identity(identity):
                    raise Conflict("this account already has a username") from exc
                raise Conflict(f"username {username!r} is taken") from exc
            raise
        return user

    def get(self, user_id: str) -> User:
        if lookup_key(user_id, "user").startswith(NOT_USERS):
            raise NotFound(f"user {user_id} not found")
        item = self.db.get_item(
            TableName=self.table_name, Key={"user_id": {"S": user_id}}, ConsistentRead=True
        ).get("Item")
        if not item:
            raise NotFound(f"user {user_id} not found")
        return _user(item)

    def owner_name(self, session: Session) -> str:
        """The username of the session's owner: kept on the session, or read for one made
        before it was."""
        return session.owner_name or self.get(session.owner).username

    def get_by_username(self, username: str) -> User:
        lookup_key(username, "user")
        user = self._by_guard(GUARD_PREFIX + username)
        if user is None:
            raise NotFound(f"user {username!r} not found")
        return user

    def find_by_identity(self, identity: str) -> User | None:
        """The user a Cognito identity signs in as; None before it has picked a username."""
        return self._by_guard(IDENTITY_PREFIX + lookup_key(identity, "identity"))

    def _by_guard(self, guard_id: str) -> User | None:
        guard = self.db.get_item(
            TableName=self.table_name, Key={"user_id": {"S": guard_id}}, ConsistentRead=True,
        ).get("Item")
        return self.get(guard["owner_id"]["S"]) if guard else None

    def list(self, after: str | None = None) -> tuple[list[User], str | None]:
        """A page of users in no particular order, and the user id to go on after (None:
        the last page). A Scan: only operators list users, and rarely."""
        kwargs: dict[str, Any] = {"TableName": self.table_name, "Limit": LIST_PAGE}
        if after:
            kwargs["ExclusiveStartKey"] = {"user_id": {"S": lookup_key(after, "user")}}
        out = self.db.scan(**kwargs)
        users = [_user(item) for item in out.get("Items", [])
                 if not item["user_id"]["S"].startswith(NOT_USERS)]
        last = out.get("LastEvaluatedKey")
        return users, last["user_id"]["S"] if last else None

    def set_flag(self, user_id: str, name: str, value: bool) -> User:
        """Set one of the user's switches (``disabled``, ``operator``); returns the user."""
        if name not in ("disabled", "operator"):
            raise ValueError(name)
        try:
            out = self.db.update_item(
                TableName=self.table_name, Key={"user_id": {"S": user_id}},
                UpdateExpression="SET #f = :v", ExpressionAttributeNames={"#f": name},
                ConditionExpression="attribute_exists(user_id)",
                ExpressionAttributeValues={":v": {"BOOL": value}}, ReturnValues="ALL_NEW")
        except self.db.exceptions.ConditionalCheckFailedException as exc:
            raise NotFound(f"user {user_id} not found") from exc
        return _user(out["Attributes"])

    def mark_deleted(self, user_id: str, when: str) -> User:
        """Make the user a tombstone: deleted (``when``, ISO; kept as first written, so a
        retry changes nothing), disabled, every API key id and profile field gone. The
        user item and its ``@<username>`` guard stay: the name is never taken again."""
        try:
            out = self.db.update_item(
                TableName=self.table_name, Key={"user_id": {"S": user_id}},
                UpdateExpression="SET deleted = if_not_exists(deleted, :w), disabled = :t "
                                 "REMOVE " + ", ".join(f"#r{i}" for i in range(len(ERASED_FIELDS))),
                ConditionExpression="attribute_exists(user_id)",
                ExpressionAttributeNames={f"#r{i}": n for i, n in enumerate(ERASED_FIELDS)},
                ExpressionAttributeValues={":w": {"S": when}, ":t": {"BOOL": True}},
                ReturnValues="ALL_NEW")
        except self.db.exceptions.ConditionalCheckFailedException as exc:
            raise NotFound(f"user {user_id} not found") from exc
        return _user(out["Attributes"])

    def advance_erasure(self, user_id: str, part: int, progress: ErasureProgress) -> bool:
        """Count erasure part ``part`` done, if it is the one the tombstone awaits, with
        where the next part goes on (``progress``): False when another copy of the part
        counted it first (nothing more to do for it)."""
        values: dict[str, AttributeValueTypeDef] = {
            ":part": {"N": str(part)}, ":next": {"N": str(part + 1)},
            ":step": {"N": str(progress.step)}, ":by": {"S": progress.sent},
            ":ran": {"S": progress.ran}}
        sets = ["erasure_part = :next", "erasure_step = :step", "erasure_by = :by",
                "erasure_ran = :ran"]
        if progress.after is not None:
            values[":after"] = {"S": progress.after}
            sets.append("erasure_after = :after")
        if progress.erased:
            values[":e"] = {"S": progress.ran}
            sets.append("erased = :e")
        try:
            self.db.update_item(
                TableName=self.table_name, Key={"user_id": {"S": user_id}},
                UpdateExpression="SET " + ", ".join(sets) +
                ("" if progress.after is not None else " REMOVE erasure_after"),
                ConditionExpression=_awaiting(part),
                ExpressionAttributeValues=values)
        except self.db.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def pending_recheck(self, user_id: str) -> set[str]:
        """The tombstone's ``erasure_recheck`` as it is now (a consistent read)."""
        item = self.db.get_item(
            TableName=self.table_name, Key={"user_id": {"S": user_id}}, ConsistentRead=True,
            ProjectionExpression="erasure_recheck").get("Item", {})
        return set(item.get("erasure_recheck", {}).get("SS", []))

    def note_recheck(self, user_id: str, part: int, digests: set[str]) -> bool:
        """Add embeds' objects to those the erasure looks at again (``erasure_recheck``),
        before part ``part`` deletes them, if the tombstone still awaits that part: False
        when another copy of it counted it (it must delete nothing more)."""
        return self._recheck_update(user_id, part, "ADD", digests)

    def rechecked(self, user_id: str, part: int, digests: set[str]) -> bool:
        """Drop embeds' objects part ``part`` looked at again from ``erasure_recheck``."""
        return self._recheck_update(user_id, part, "DELETE", digests)

    def _recheck_update(self, user_id: str, part: int, action: str, digests: set[str]) -> bool:
        try:
            self.db.update_item(
                TableName=self.table_name, Key={"user_id": {"S": user_id}},
                UpdateExpression=f"{action} erasure_recheck :d",
                ConditionExpression=_awaiting(part),
                ExpressionAttributeValues={":part": {"N": str(part)},
                                           ":d": {"SS": sorted(digests)}})
        except self.db.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def note_embeds_kept(self, user_id: str, crowded: bool = False) -> None:
        """Record on the tombstone that its erasure kept embeds' objects (``crowded``:
        bytes held by more deleted users than a look reads past)."""
        self.db.update_item(
            TableName=self.table_name, Key={"user_id": {"S": user_id}},
            UpdateExpression=f"SET {'embeds_crowded' if crowded else 'embeds_kept'} = :t",
            ConditionExpression="attribute_exists(deleted)",
            ExpressionAttributeValues={":t": {"BOOL": True}})

    def _key_update(self, user_id: str, action: str, key_id: str, rule: str = "",
                    values: dict[str, AttributeValueTypeDef] | None = None,
                    names: dict[str, str] | None = None) -> UpdateTypeDef:
        """The update (an UpdateItem's arguments, or a transaction's Update) that adds or
        deletes ``key_id`` if the user exists and ``rule`` holds (in the write's own
        condition: two requests at once cannot both pass a check made before)."""
        update: UpdateTypeDef = {
            "TableName": self.table_name, "Key": {"user_id": {"S": user_id}},
            "UpdateExpression": f"{action} api_key_ids :k",
            "ConditionExpression": "attribute_exists(user_id)" + (f" AND ({rule})" if rule
                                                                  else ""),
            "ExpressionAttributeValues": {":k": {"SS": [key_id]}, **(values or {})},
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}
        if names:
            update["ExpressionAttributeNames"] = names
        return update

    def _keys(self, user_id: str, action: str, key_id: str, rule: str = "",
              values: dict[str, AttributeValueTypeDef] | None = None,
              names: dict[str, str] | None = None) -> User | None:
        """Make :meth:`_key_update`. None when done; the user as it was when the rule
        failed."""
        try:
            self.db.update_item(**self._key_update(user_id, action, key_id, rule, values, names))
        except self.db.exceptions.ConditionalCheckFailedException as exc:
            old = exc.response.get("Item")  # the user as it was (ALL_OLD)
            if not isinstance(old, dict) or not old:
                raise NotFound(f"user {user_id} not found") from exc
            return _user(old)
        return None

    def set_time_zone(self, user_id: str, time_zone: str | None) -> None:
        """Set (or, with None, clear) the user's time zone."""
        key: dict[str, Any] = {"user_id": {"S": user_id}}
        try:
            if time_zone:
                self.db.update_item(
                    TableName=self.table_name, Key=key, UpdateExpression="SET time_zone = :z",
                    ExpressionAttributeValues={":z": {"S": time_zone}},
                    ConditionExpression="attribute_exists(user_id)")
            else:
                self.db.update_item(
                    TableName=self.table_name, Key=key, UpdateExpression="REMOVE time_zone",
                    ConditionExpression="attribute_exists(user_id)")
        except self.db.exceptions.ConditionalCheckFailedException as exc:
            raise NotFound(f"user {user_id} not found") from exc

    def add_key(self, user_id: str, key_id: str, most: int | None = None) -> None:
        """Add a key; with ``most``, only while the user has fewer (INVALID_INPUT)."""
        if most is None:
            self._keys(user_id, "ADD", key_id)
        elif self._keys(user_id, "ADD", key_id, ROOM, {":most": {"N": str(most)}}):
            raise _too_many(most)

    def add_key_once(self, user_id: str, issued: IssuedKey, most: int, once: str
                     ) -> IssuedKey:
        """Add ``issued``'s key as :meth:`add_key` does and remember it under the client's
        idempotency key ``once``, in one transaction; or, when ``once`` made a key in the
        last ONCE_SECONDS, add nothing and return that key (INVALID_INPUT if it was
        revoked since: nobody may use it again)."""
        now = int(time.time())
        try:
            # Another request's transaction on these items at the same time (the user's
            # other keys, this one's own retry) is waited out, not refused.
            retry_transient(lambda: self.db.transact_write_items(TransactItems=[
                {"Update": self._key_update(user_id, "ADD", issued.key_id, ROOM,
                                            {":most": {"N": str(most)}})},
                {"Put": {"TableName": self.table_name, "Item": to_item({
                    "user_id": self._once_id(user_id, once), "key_id": issued.key_id,
                    "issued_at": issued.issued_at, "kid": issued.kid,
                    EXPIRES_AT: now + ONCE_SECONDS}),
                    "ConditionExpression": "attribute_not_exists(user_id) OR #e < :now",
                    "ExpressionAttributeNames": {"#e": EXPIRES_AT},
                    "ExpressionAttributeValues": {":now": {"N": str(now)}}}}]))
        except self.db.exceptions.TransactionCanceledException as exc:
            # The idempotency key first: a retry of the key that reached the most is that
            # key, not refused.
            if (earlier := self._issued_once(user_id, once, now)) is not None:
                if earlier.key_id not in self.get(user_id).api_key_ids:
                    raise Conflict(REVOKED_SINCE) from exc
                return earlier
            if cancelled_by(exc)[:1] == ["ConditionalCheckFailed"]:
                self.get(user_id)  # NOT_FOUND without the user
                raise _too_many(most) from exc
            raise
        return issued

    @staticmethod
    def _once_id(user_id: str, once: str) -> str:
        return lookup_key(f"{ONCE_PREFIX}{user_id}#{once}", "idempotency key")

    def _issued_once(self, user_id: str, once: str, now: int) -> IssuedKey | None:
        item = self.db.get_item(TableName=self.table_name,
                                Key={"user_id": {"S": self._once_id(user_id, once)}},
                                ConsistentRead=True).get("Item")
        if item is None or int(item[EXPIRES_AT]["N"]) < now:  # TTL deletes it lazily
            return None
        return IssuedKey(item["key_id"]["S"], int(item["issued_at"]["N"]), item["kid"]["S"])

    def revoke_key(self, user_id: str, key_id: str) -> None:
        """Revoke one of the user's keys (NOT_FOUND for another's), never the last of a
        user who has no account to sign in with (INVALID_INPUT)."""
        was = self._keys(user_id, "DELETE", key_id,
                         "contains(api_key_ids, :id) AND "
                         "(size(api_key_ids) > :one OR attribute_exists(#identity))",
                         {":id": {"S": key_id}, ":one": {"N": "1"}},
                         {"#identity": "identity"})
        if was is None:
            return
        if key_id not in was.api_key_ids:
            raise NotFound(f"no active API key {key_id!r}")  # another's looks absent too
        raise LastApiKey("this is the last API key; create another before revoking it")

    def set_limits(self, user_id: str, daily_queries: int | None,
                   daily_tokens: int | None) -> User:
        """Set the user's own limits (each None: left as it is; each 0 to MAX_DAILY_LIMIT, else
        INVALID_INPUT and nothing is written); returns the user."""
        values = {"daily_query_limit": daily_queries, "daily_token_limit": daily_tokens}
        changes = {name: value for name, value in values.items() if value is not None}
        if any(not 0 <= value <= MAX_DAILY_LIMIT for value in changes.values()):
            raise InvalidInput(f"a daily limit is a whole number from 0 to {MAX_DAILY_LIMIT:,}")
        if not changes:
            return self.get(user_id)
        try:
            out = self.db.update_item(
                TableName=self.table_name,
                Key={"user_id": {"S": user_id}},
                UpdateExpression="SET " + ", ".join(f"{n} = :{n}" for n in changes),
                ConditionExpression="attribute_exists(user_id)",
                ExpressionAttributeValues={f":{n}": {"N": str(v)} for n, v in changes.items()},
                ReturnValues="ALL_NEW",
            )
        except self.db.exceptions.ConditionalCheckFailedException as exc:
            raise NotFound(f"user {user_id} not found") from exc
        return _user(out["Attributes"])
