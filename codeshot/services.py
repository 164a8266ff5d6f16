"""The platform's parts, built lazily from settings and shared per process.

FastAPI injects a :class:`Services` into every request; the runner and the CLI build
their own. Nothing here touches the network until a part is first used, which keeps
Lambda cold starts short.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

from codeshot.models import Clock, utcnow
from codeshot.settings import Settings

if TYPE_CHECKING:  # the parts are imported when first used, not when Services is
    from codeshot.auth.cognito import Accounts
    from codeshot.auth.keys import KeyRing
    from codeshot.auth.service import Auth
    from codeshot.routing.embedders import Embedder
    from codeshot.routing.router import Router
    from codeshot.store.agent_secrets import AgentSecrets
    from codeshot.store.corpora import CorpusStore, VectorIndexes
    from codeshot.store.embeds import EmbedStore
    from codeshot.store.oauth import OAuthStore
    from codeshot.store.queue import ErasureQueue, PromptQueue, SessionQueue
    from codeshot.store.registry import AgentCache, AgentRegistry
    from codeshot.store.sessions import SessionStore
    from codeshot.store.usage import UsageCounters
    from codeshot.store.user_storage import UserStorageStore
    from codeshot.store.users import UserStore


class Services:
    def __init__(self, settings: Settings, clock: Clock = utcnow) -> None:
        self.settings = settings
        self.clock = clock  # the time the platform's rules see (tests inject their own)

    @cached_property
    def registry(self) -> AgentRegistry:
        from codeshot.store.registry import AgentRegistry

        return AgentRegistry(self.settings)

    @cached_property
    def sessions(self) -> SessionStore:
        from codeshot.store.sessions import SessionStore

        return SessionStore(self.settings)

    @cached_property
    def accounts(self) -> Accounts:
        """The Cognito user pool (NOT_FOUND when the platform has none)."""
        from codeshot.auth.cognito import Accounts

        return Accounts(self.settings)

    @cached_property
    def users(self) -> UserStore:
        from codeshot.store.users import UserStore

        return UserStore(self.settings)

    @cached_property
    def usage(self) -> UsageCounters:
        from codeshot.store.usage import UsageCounters

        return UsageCounters(self.settings, clock=self.clock)

    @cached_property
    def storage(self) -> UserStorageStore:
        from codeshot.store.user_storage import UserStorageStore

        return UserStorageStore(self.settings)

    @cached_property
    def embeds(self) -> EmbedStore:
        from codeshot.store.embeds import EmbedStore

        return EmbedStore(self.settings)

    @cached_property
    def oauth(self) -> OAuthStore:
        from codeshot.store.oauth import OAuthStore

        return OAuthStore(self.settings)

    @cached_property
    def queue(self) -> SessionQueue:
        from codeshot.store.queue import SessionQueue

        return SessionQueue(self.settings)

    @cached_property
    def corpora(self) -> CorpusStore:
        from codeshot.store.corpora import CorpusStore

        return CorpusStore(self.settings)

    @cached_property
    def vector_indexes(self) -> VectorIndexes:
        """Corpus versions' S3 Vectors indexes (``CODESHOT_CORPUS_SEARCH=s3vectors``)."""
        from codeshot.store.corpora import VectorIndexes

        return VectorIndexes(self.settings)

    @cached_property
    def agent_secrets(self) -> AgentSecrets:
        from codeshot.store.agent_secrets import AgentSecrets

        return AgentSecrets(self.settings)

    @cached_property
    def prompt_queue(self) -> PromptQueue:
        from codeshot.store.queue import PromptQueue

        return PromptQueue(self.settings)

    @cached_property
    def erasure_queue(self) -> ErasureQueue:
        from codeshot.store.queue import ErasureQueue

        return ErasureQueue(self.settings)

    @cached_property
    def keyring(self) -> KeyRing:
        from codeshot.auth.keys import KeyRing

        return KeyRing(self.settings, clock=self.clock)

    @cached_property
    def auth(self) -> Auth:
        from codeshot.auth.service import Auth

        return Auth(self.settings, self.keyring, self.users)

    @cached_property
    def embedder(self) -> Embedder:
        from codeshot.routing.embedders import get_embedder

        return get_embedder(self.settings)

    @cached_property
    def corpus_embedder(self) -> Embedder:
        """CODESHOT_CORPUS_EMBEDDER's, else the router's embedder untuned: a router model is
        tuned on requests to agents, and a corpus holds passages (nor should a re-tune
        embed every corpus again)."""
        embedder = self.settings.corpus_embedder or self.settings.embedder
        if embedder == self.settings.embedder and (
                embedder != "minilm" or self.settings.minilm_model is None):
            return self.embedder
        from codeshot.routing.embedders import get_embedder

        return get_embedder(self.settings.replace(embedder=embedder, minilm_model=None))

    @cached_property
    def router(self) -> Router:
        from codeshot.routing.router import Router

        return Router(self.registry, self.embedder, floor=self.settings.router_floor,
                      margin=self.settings.router_margin)

    @cached_property
    def agents(self) -> AgentCache:
        from codeshot.store.registry import AgentCache

        return AgentCache(self.registry)

    def daily_limit(self, user_limit: int | None) -> int:
        return self.settings.daily_query_limit if user_limit is None else user_limit
