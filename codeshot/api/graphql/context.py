"""Per-request GraphQL context: the platform's services and the caller, authenticated
on first use by the API key (or, from the console's GraphiQL, the account's ID token) in
``Authorization: Bearer``."""

from __future__ import annotations

from functools import cached_property

from strawberry.fastapi import BaseContext
from strawberry.types import Info

from codeshot.api.graphql.budget import MessagePages
from codeshot.auth.tokens import bearer
from codeshot.models import Principal
from codeshot.services import Services
from codeshot.usecases.accounts import principal_for_token
from codeshot.usecases.threads import blocking


class Context(BaseContext):
    def __init__(self, services: Services, authorization: str | None,
                 idempotency_key: str | None = None) -> None:
        """``idempotency_key``: the request's Idempotency-Key header, for clients whose
        query text is fixed (fixieai 1.0's createAgentRevision) to make it safe to retry."""
        super().__init__()
        self.services = services
        self.authorization = authorization
        self.idempotency_key = idempotency_key
        self.message_pages = MessagePages()

    @cached_property
    def principal(self) -> Principal:
        return principal_for_token(self.services, bearer(self.authorization))


def ctx(info: Info) -> Context:
    context: Context = info.context
    return context


async def caller(info: Info) -> tuple[Services, Principal]:
    """The services and the authenticated caller (UNAUTHENTICATED without a valid key)."""
    c = ctx(info)
    return c.services, await blocking(lambda: c.principal)
