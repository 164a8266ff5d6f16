"""The GraphQL input types (what mutations take), with Fixie 1.0's names and fields."""

from __future__ import annotations

import strawberry
from strawberry.file_uploads import Upload


@strawberry.input
class AgentInput:
    handle: str
    name: str | None = None
    description: str | None = None
    query_url: str | None = None
    func_url: str | None = None
    more_info_url: str | None = None
    published: bool | None = None
    base_prompt: str | None = None
    few_shots: list[str] | None = None
    sample_queries: list[str] | None = None
    conversational: bool | None = None
    mcp_url: str | None = strawberry.field(
        default=None, description="an MCP server (streamable HTTP) whose tools are the "
        "agent's Funcs, instead of queryUrl/funcUrl; \"\" on update: no longer one")
    mcp_authorization: str | None = strawberry.field(
        default=None, description="the Authorization header to call mcpUrl with; kept in "
        "Secrets Manager, never shown again")
    new_handle: str | None = None
    current_revision_id: strawberry.ID | None = strawberry.field(
        default=None, description="make this revision of the agent current (its handshake "
        "is read there); given with handle only")


@strawberry.input
class RevisionMetadataKeyValuePairInput:
    key: str
    value: str


@strawberry.input(description="A revision served somewhere: where the agent answers.")
class ExternalDeploymentInput:
    url: str


@strawberry.input(description="Code for the platform to build and host (Fixie's `fixie "
                  "deploy`): refused, codeshot does not build code on request.")
class ManagedDeploymentInput:
    environment: str | None = None
    code_package: Upload | None = None


@strawberry.input
class AgentRevisionInput:
    metadata: list[RevisionMetadataKeyValuePairInput] = strawberry.field(default_factory=list)
    external_deployment: ExternalDeploymentInput | None = None
    managed_deployment: ManagedDeploymentInput | None = None


@strawberry.input
class DeleteAgentInput:
    owner: str | None = None
    handle: str


@strawberry.input
class SessionInput:
    frontend_agent_id: str | None = None
    name: str | None = None
    description: str | None = None
    callback_url: str | None = strawberry.field(
        default=None, description="receives signed response/error/awaiting_input events")


@strawberry.input
class EmbedInput:
    key: str
    content_type: str
    content: str | None = strawberry.field(default=None, description="base64, small only")
    content_hash: str | None = strawberry.field(
        default=None, description="SHA-256 of bytes uploaded with createEmbedUpload")


@strawberry.input
class MessageInput:
    session: str
    text: str = ""
    embeds: list[EmbedInput] | None = None
    wait: bool = strawberry.field(default=True, description=(
        "wait (bounded) for the reply; while you already have CODESHOT_MAX_WAITING_REQUESTS "
        "requests waiting, RATE_LIMITED and nothing posted"))
    idempotency_key: str | None = None
