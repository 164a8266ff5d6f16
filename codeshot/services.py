"""The platform's parts, built lazily from settings and shared per process.

FastAPI injects a :class:`Services` into every request; the runner and the CLI build
their own. Nothing here touches the network until a part is first used, which keeps
Lambda cold starts short.
"""

from __future__ import annotations

from functools import cached_property

from codeshot.settings import Settings


class Services:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @cached_property
    def registry(self):
        from codeshot.store.registry import AgentRegistry

        return AgentRegistry(self.settings)

    @cached_property
    def sessions(self):
        from codeshot.store.sessions import SessionStore

        return SessionStore(self.settings)

    @cached_property
    def users(self):
        from codeshot.store.users import UserStore

        return UserStore(self.settings)

    @cached_property
    def usage(self):
        from codeshot.store.usage import UsageCounters

        return UsageCounters(self.settings)

    @cached_property
    def storage(self):
        from codeshot.store.user_storage import UserStorageStore

        return UserStorageStore(self.settings)

    @cached_property
    def embeds(self):
        from codeshot.store.embeds import EmbedStore

        return EmbedStore(self.settings)

    @cached_property
    def queue(self):
        from codeshot.store.queue import SessionQueue

        return SessionQueue(self.settings)

    @cached_property
    def keyring(self):
        from codeshot.auth.keys import KeyRing

        return KeyRing(self.settings)

    @cached_property
    def auth(self):
        from codeshot.auth.service import Auth

        return Auth(self.settings, self.keyring, self.users)

    @cached_property
    def embedder(self):
        from codeshot.routing.embedders import get_embedder

        return get_embedder(self.settings)

    @cached_property
    def router(self):
        from codeshot.routing.router import Router

        return Router(self.registry, self.embedder)

    @cached_property
    def agents(self):
        from codeshot.store.registry import AgentCache

        return AgentCache(self.registry, self.settings.agent_cache_seconds)

    def daily_limit(self, user_limit: int | None) -> int:
        return self.settings.daily_query_limit if user_limit is None else user_limit
