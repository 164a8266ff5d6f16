"""What agent authors import. Porting a Fixie 1.0 agent means changing its import line:

    from codeshot.sdk import CodeShotAgent, StandaloneAgent, Message, Embed, AgentResponse

This package never imports the platform (store, api, runner, services) nor boto3, so an
agent's Lambda bundle stays small.
"""

from codeshot.sdk.agent import AgentBase, CodeShotAgent, StandaloneAgent
from codeshot.sdk.auth import Claims
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
    "Embed",
    "Message",
    "StandaloneAgent",
    "UserStorage",
    "ask_user",
]
