"""GraphQL mutations: each authenticates the caller and runs one use case off the loop."""

from __future__ import annotations

from dataclasses import fields
from typing import TYPE_CHECKING

import strawberry
from strawberry.types import Info

from codeshot.api.graphql.context import caller, ctx
from codeshot.api.graphql.inputs import (
    AgentInput,
    AgentRevisionInput,
    DeleteAgentInput,
    MessageInput,
    SessionInput,
)
from codeshot.api.graphql.types import (
    AgentPayload,
    AgentRevisionPayload,
    AgentRevisionType,
    AgentType,
    ApiKeyType,
    EmbedUploadType,
    MessageGQL,
    MessagePayload,
    NewApiKeyType,
    SessionPayload,
    SessionType,
    UserType,
)
from codeshot.errors import InvalidInput
from codeshot.services import Services
from codeshot.usecases import accounts, oauth, sessions, users
from codeshot.usecases.messaging import EmbedUpload, Messaging, upload_url, wait_for_reply
from codeshot.usecases.threads import blocking
from codeshot.usecases.waits import waiting

if TYPE_CHECKING:
    from codeshot.usecases.registration import AgentFields, AgentRegistration
    from codeshot.usecases.revisions import AgentRevisions


def _registration(services: Services, data: AgentInput | None = None
                  ) -> tuple[AgentRegistration, AgentFields]:
    """The registration use case and the fields to set; imported on use because agent
    registration (handshakes, few-shot grammar, embeddings) is rare and heavy to import."""
    from codeshot.usecases.registration import AgentFields, AgentRegistration, daily_agent_change

    # AgentInput carries every AgentFields field under the same (snake_case) name.
    values = {f.name: getattr(data, f.name) for f in fields(AgentFields)} if data else {}
    return AgentRegistration(services, charge=daily_agent_change), AgentFields(**values)


def _revisions(services: Services) -> AgentRevisions:
    from codeshot.usecases.registration import daily_agent_change
    from codeshot.usecases.revisions import AgentRevisions  # heavy, as registration

    return AgentRevisions(services, charge=daily_agent_change)


@strawberry.type
class Mutation:
    @strawberry.mutation
    async def create_agent(self, info: Info, agent_data: AgentInput) -> AgentPayload:
        services, p = await caller(info)
        reg, values = _registration(services, agent_data)
        if agent_data.current_revision_id is not None:
            raise InvalidInput("a new agent has no revisions: give currentRevisionId to "
                               "updateAgent")
        agent = await blocking(reg.create, p, agent_data.handle, values)
        return AgentPayload(agent=AgentType.of(agent))

    @strawberry.mutation
    async def update_agent(self, info: Info, agent_data: AgentInput) -> AgentPayload:
        services, p = await caller(info)
        reg, values = _registration(services, agent_data)
        if agent_data.current_revision_id is not None:
            # A switch re-describes the agent from its handshake: no field to set beside.
            if values != type(values)() or agent_data.new_handle is not None:
                raise InvalidInput("currentRevisionId is given with handle only")
            agent = await blocking(_revisions(services).set_current, p, agent_data.handle,
                                   agent_data.current_revision_id)
        else:
            agent = await blocking(reg.update, p, agent_data.handle, values,
                                   agent_data.new_handle)
        return AgentPayload(agent=AgentType.of(agent))

    @strawberry.mutation(description="A revision of your agent: where it answers "
                         "(externalDeployment.url), current at once with makeCurrent. With "
                         "an idempotencyKey (or an Idempotency-Key header; 1-128 characters), "
                         "the same request again returns the revision it made, while that is "
                         "kept, and makes none.")
    async def create_agent_revision(
        self, info: Info, agent_handle: str, revision: AgentRevisionInput, make_current: bool,
        reindex_corpora: bool = False, idempotency_key: str | None = None,
    ) -> AgentRevisionPayload:
        services, p = await caller(info)
        external = revision.external_deployment
        url = external.url if external and revision.managed_deployment is None else None
        header = ctx(info).idempotency_key
        if None not in (idempotency_key, header) and idempotency_key != header:
            raise InvalidInput("idempotencyKey and the Idempotency-Key header differ: give one")
        created, current = await blocking(
            _revisions(services).create_revision, p, agent_handle, url,
            [(m.key, m.value) for m in revision.metadata], make_current, reindex_corpora,
            idempotency_key if idempotency_key is not None else header)
        return AgentRevisionPayload(revision=AgentRevisionType.of(created, current))

    @strawberry.mutation(description="Delete a revision of your agent (not its current one).")
    async def delete_agent_revision(self, info: Info, agent_handle: str,
                                    revision_id: strawberry.ID) -> AgentPayload:
        services, p = await caller(info)
        agent = await blocking(_revisions(services).delete_revision, p, agent_handle,
                               revision_id)
        return AgentPayload(agent=AgentType.of(agent))

    @strawberry.mutation
    async def delete_agent(self, info: Info, agent_data: DeleteAgentInput) -> AgentPayload:
        services, p = await caller(info)
        reg, _ = _registration(services)
        agent = await blocking(reg.delete, p, agent_data.owner or p.username or "",
                               agent_data.handle)
        return AgentPayload(agent=AgentType.of(agent))

    @strawberry.mutation
    async def create_session(
        self, info: Info, session_data: SessionInput | None = None
    ) -> SessionPayload:
        services, p = await caller(info)
        data = session_data or SessionInput()
        session = await blocking(sessions.create_session, services, p, data.frontend_agent_id,
                                 data.name or "", data.description or "", data.callback_url)
        return SessionPayload(session=SessionType.of(session))

    @strawberry.mutation
    async def delete_session(self, info: Info, handle: str) -> SessionPayload:
        services, p = await caller(info)
        session = await blocking(sessions.delete_session, services, p, handle)
        return SessionPayload(session=SessionType.of(session))

    @strawberry.mutation
    async def send_session_message(self, info: Info, message_data: MessageInput) -> MessagePayload:
        services, p = await caller(info)
        uploads = [EmbedUpload(key=e.key, content_type=e.content_type,
                               content_base64=e.content, content_hash=e.content_hash)
                   for e in message_data.embeds or []]
        messaging = Messaging(services)
        wait = services.settings.reply_wait_seconds if message_data.wait else 0
        async with waiting(services, p, wait, posting=True) as slot:
            message, _ = await blocking(messaging.post, p, message_data.session,
                                        message_data.text, uploads, message_data.idempotency_key,
                                        slot=slot)
            reply = await wait_for_reply(messaging, message, wait) if wait > 0 else None
        return MessagePayload(
            message=MessageGQL.of(message, services),
            reply=MessageGQL.of(reply, services) if reply else None,
        )

    @strawberry.mutation(description="Set your time zone (an IANA name such as Europe/Paris; "
                         "null for UTC): platform Funcs such as fixie_local_datetime use it.")
    async def set_time_zone(self, info: Info, time_zone: str | None = None) -> UserType:
        services, p = await caller(info)
        await blocking(users.set_time_zone, services, p, time_zone)
        return UserType.of(await blocking(users.profile, services, p))

    @strawberry.mutation(description="A presigned URL to upload an embed's bytes to.")
    async def create_embed_upload(
        self, info: Info, content_type: str, size: int, content_hash: str
    ) -> EmbedUploadType:
        services, p = await caller(info)
        upload = await blocking(upload_url, services, p, content_type, size, content_hash)
        return EmbedUploadType.of(upload)

    @strawberry.mutation(description="A new API key of yours (shown once). With an "
                         "idempotencyKey (1-128 characters, yours alone), the same request "
                         "again within a day returns the key it made and creates none.")
    async def create_api_key(self, info: Info, idempotency_key: str | None = None
                             ) -> NewApiKeyType:
        services, p = await caller(info)
        record, key = await blocking(users.create_api_key, services, p, idempotency_key)
        return NewApiKeyType(id=record.key_id, created=record.created, key=key)

    @strawberry.mutation(name="revokeOAuthGrant",
                         description="Forget your OAuth token for an agent: it can no longer "
                         "act for you at that service until you authorize it again.")
    async def revoke_oauth_grant(self, info: Info, agent_id: str) -> bool:
        services, p = await caller(info)
        await blocking(oauth.revoke, services, p, agent_id)
        return True

    @strawberry.mutation(description="Revoke one of your API keys (not the last one): it is "
                         "refused at once.")
    async def revoke_api_key(self, info: Info, id: str) -> ApiKeyType:
        services, p = await caller(info)
        return ApiKeyType.of(await blocking(users.revoke_api_key, services, p, id))

    @strawberry.mutation(description="Delete your account, confirmed by your username: "
                         "every API key and sign-in is refused at once, and the erasure of "
                         "your sessions (messages, embeds), agents, user storage, uploads, "
                         "OAuth grants and usage starts minutes later, a part at a time. "
                         "Embeds' files another user's session holds too stay, and every "
                         "one on a platform upgraded from before it tracked them until its "
                         "operator runs `codeshot users hold-replies`. Your username stays "
                         "taken.")
    async def delete_account(self, info: Info, confirm_username: str) -> bool:
        services, p = await caller(info)
        await blocking(accounts.delete_account, services, p, confirm_username)
        return True
