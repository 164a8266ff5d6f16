"""What agent authors import. A Fixie 1.0 agent (fixieai 1.0.4) ports with one line:

    import codeshot.sdk as fixieai

Every public name of fixieai's agent side is here with the same arguments (and
``fixieai.agents`` as :mod:`codeshot.sdk.agents`), plus ``AgentError`` and
``DocumentLoader``, which fixieai kept in submodules.

This package never imports the platform (store, api, runner, services) nor boto3, so an
agent's Lambda bundle stays small.
"""

from codeshot.sdk import agents
from codeshot.sdk.agent import AgentBase, CodeShotAgent, StandaloneAgent
from codeshot.sdk.auth import Claims
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
from codeshot.sdk.wire import (
    AgentError,
    AgentException,
    AgentQuery,
    AgentResponse,
    Embed,
    Message,
    ask_user,
)

__all__ = [
    "AgentBase",
    "AgentError",
    "AgentException",
    "AgentQuery",
    "AgentResponse",
    "Claims",
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
    "agents",
    "ask_user",
]
