"""``fixieai.agents`` under its Fixie 1.0 name, so code reaching names through it
(``fixieai.agents.Message``) works with ``import codeshot.sdk as fixieai``."""

from codeshot.sdk.agent import AgentBase, CodeShotAgent, StandaloneAgent
from codeshot.sdk.corpora import (
    CorpusDocument,
    CorpusPage,
    CorpusPartition,
    CorpusRequest,
    CorpusResponse,
    CustomCorpus,
    DocumentCorpus,
    DocumentLoader,
    UrlDocumentCorpus,
)
from codeshot.sdk.llm_settings import LlmSettings
from codeshot.sdk.oauth import OAuthHandler, OAuthParams
from codeshot.sdk.user_storage import UserStorage
from codeshot.sdk.wire import AgentError, AgentQuery, AgentResponse, Embed, Message

__all__ = [
    "AgentBase",
    "AgentError",
    "AgentQuery",
    "AgentResponse",
    "CodeShotAgent",
    "CorpusDocument",
    "CorpusPage",
    "CorpusPartition",
    "CorpusRequest",
    "CorpusResponse",
    "CustomCorpus",
    "DocumentCorpus",
    "DocumentLoader",
    "Embed",
    "LlmSettings",
    "Message",
    "OAuthHandler",
    "OAuthParams",
    "StandaloneAgent",
    "UrlDocumentCorpus",
    "UserStorage",
]
