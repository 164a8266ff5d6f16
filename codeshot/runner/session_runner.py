"""Turns one queued user message into its answer, stored in the session.

Exactly once: the terminal message (response, error or question) is written in one
transaction with an ``ANSWER#<query id>`` marker, so a redelivered or concurrently retried
message can never be answered twice; a message already answered is skipped at once.
Every intermediate step is stored as a message too (the session is its own trace), in
that same transaction: a retried run never leaves a half or doubled trace, and a query
costs one read (session, paused program and history together) and one write.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import re
from typing import TYPE_CHECKING, Any

from codeshot import ids
from codeshot.engine.builtin import SessionHistory
from codeshot.engine.executor import Outcome, Status, TraceStep
from codeshot.errors import AgentFailed, CodeshotError, NotFound
from codeshot.llm import get_llm
from codeshot.models import PLANNER_ID, EmbedRef, Message, MessageType, Session, SessionStatus
from codeshot.runner.agent_client import AgentClient
from codeshot.runner.programs import (
    PlannerProgram,
    RunContext,
    failure_outcome,
    program_for,
)
from codeshot.services import Services
from codeshot.store.dynamo import to_item
from codeshot.store.queue import Work
from codeshot.store.sessions import (
    ANSWER_PREFIX,
    MSG_PREFIX,
    SESSION_ITEM,
    STATE_ITEM,
    message_item,
)

if TYPE_CHECKING:
    from types_boto3_dynamodb.type_defs import TransactWriteItemTypeDef

log = logging.getLogger("codeshot.runner")

HISTORY_MESSAGES = 40
# DynamoDB's limits on one transaction; a longer trace is written ahead of the reply.
TRANSACTION_ITEMS = 100
TRANSACTION_BYTES = 3_500_000  # of 4 MB, leaving room for keys and attribute names
_TERMINAL = {Status.DONE: MessageType.RESPONSE, Status.ERROR: MessageType.ERROR,
             Status.AWAITING_INPUT: MessageType.AWAITING_INPUT}


def _line(step: TraceStep) -> str:
    """A trace step as the transcript line it stands for (what a person reads)."""
    if step.type is MessageType.FUNC_CALL or step.type is MessageType.AGENT_CALL:
        return f"Ask {step.target}: {step.text}"
    if step.type is MessageType.RESULT and step.target:
        return f"{step.target} says: {step.text}"
    return step.text


class SessionRunner:
    def __init__(self, services: Services, llm: Any | None = None) -> None:
        self.s = services
        self.llm = llm or get_llm(services.settings)

    # -- the one entry point ---------------------------------------------------------
    def handle(self, work: Work, final_attempt: bool = False) -> None:
        # The session, its paused program and recent history (the query in it): one read.
        recent = self.s.sessions.recent(work.session_id, HISTORY_MESSAGES)
        if recent.session is None:
            return  # the session was deleted meanwhile: nothing left to answer
        session = recent.session
        found = self._query(work, recent.messages)
        if found is None:
            return  # deleted meanwhile, or answered already (a redelivery)
        query, history = found
        paused = recent.state if session.status is SessionStatus.AWAITING_INPUT else None
        trace: list[Message] = []
        try:
            outcome, program_state = self._run(session, query, paused, history, trace)
        except CodeshotError as exc:
            outcome, program_state = failure_outcome(exc), None
        except Exception:
            if not final_attempt:
                raise  # infrastructure trouble: let SQS redeliver
            log.exception("giving up on %s/%s", work.session_id, work.message_id)
            outcome = Outcome(Status.ERROR, "The platform failed to answer; please try again.",
                              error_code=AgentFailed.code)
            program_state = None
        self._finish(session, query, outcome, program_state, trace)

    def _query(self, work: Work, recent: list[Message]) -> tuple[Message, list[Message]] | None:
        """The queued query and the history before it, or None if there is nothing to do.

        Its reply is written with the marker, so a terminal reply among the recent
        messages means "answered"; a query older than the recent window (many messages
        posted after it) is read with its marker instead."""
        query = next((m for m in recent if m.message_id == work.message_id), None)
        if query is None:
            marker = ANSWER_PREFIX + work.message_id
            items = self.s.sessions.get_items(work.session_id,
                                              [MSG_PREFIX + work.message_id, marker])
            if marker in items or MSG_PREFIX + work.message_id not in items:
                return None
            return self.s.sessions.message_of(items[MSG_PREFIX + work.message_id]), recent
        if any(m.in_reply_to == query.message_id and m.type in _TERMINAL.values()
               for m in recent):
            return None
        return query, recent

    # -- running -----------------------------------------------------------------------
    def _run(self, session: Session, query: Message, paused: dict[str, Any] | None,
             recent: list[Message], trace: list[Message]
             ) -> tuple[Outcome, dict[str, Any] | None]:
        settings = self.s.settings
        client = AgentClient(
            lambda agent_id: self.s.auth.agent_token(agent_id, session.owner, session.session_id),
            timeout=settings.agent_call_timeout_seconds, allow_loopback=settings.local_mode,
        )
        try:
            ctx = RunContext(
                llm=self.llm, client=client, registry_get=self.s.agents.get,
                trace=lambda sent_by, step: self._trace(query, sent_by, step, trace),
                history=self._history(session, query, recent),
                embeds={k: {"content_type": e.content_type,
                            "uri": self.s.embeds.get_url(e.content_hash)}
                        for k, e in query.embeds.items()},
            )
            program, owner_id = self._program(session, ctx)
            if paused and paused.get("program") == owner_id:
                outcome = program.resume(paused["state"], query.text)
            else:
                outcome = program.run(query.text)
            state = {"program": owner_id, "state": outcome.state} \
                if outcome.status is Status.AWAITING_INPUT else None
            return outcome, state
        finally:
            client.close()  # an abandoned (timed-out) call ends with its query

    def _program(self, session: Session, ctx: RunContext) -> tuple[Any, str]:
        if session.frontend_agent_id:
            try:
                agent = self.s.agents.get(session.frontend_agent_id)
            except NotFound as exc:
                raise NotFound(f"agent {session.frontend_agent_id} no longer exists") from exc
            return program_for(agent, ctx), agent.agent_id
        viewer = session.owner_name or self.s.users.get(session.owner).username
        mode = self.s.settings.planner_mode
        route_only = mode == "route" or (mode == "auto" and self.s.settings.llm == "fewshot")
        return PlannerProgram(ctx, self.s.router, viewer, route_only), PLANNER_ID

    def _history(self, session: Session, query: Message, recent: list[Message]
                 ) -> SessionHistory:
        questions = {m.message_id: m.text for m in recent if m.type is MessageType.QUERY}
        turns = [(questions[m.in_reply_to], m.text) for m in reversed(recent)
                 if m.type is MessageType.RESPONSE and m.in_reply_to in questions
                 and m.in_reply_to != query.message_id]
        embeds = {e.key: e.content_type for e in self.s.sessions.list_embeds(session.session_id)
                  } if session.embed_count else {}
        return SessionHistory(turns=turns, embeds=embeds)

    def _trace(self, query: Message, sent_by: str, step: TraceStep, trace: list[Message]
               ) -> None:
        if step.type in (MessageType.RESPONSE, MessageType.AWAITING_INPUT):
            return  # nested answers come back as results; the terminal one is _finish's
        kind = step.type
        if kind is MessageType.ERROR:
            if not step.target:
                return  # a run that ended in error: _finish writes it
            kind = MessageType.RESULT  # a failed call: its "says" line is the failure
        trace.append(Message(
            session_id=query.session_id, message_id=ids.ulid(), text=_line(step), type=kind,
            sent_by=sent_by, in_reply_to=query.message_id, error_code=step.error_code,
        ))

    # -- finishing, exactly once -------------------------------------------------------
    def _finish(self, session: Session, query: Message, outcome: Outcome,
                program_state: dict[str, Any] | None, trace: list[Message]) -> None:
        reply = Message(
            session_id=session.session_id, message_id=ids.ulid(), text=outcome.text,
            type=_TERMINAL[outcome.status], in_reply_to=query.message_id,
            sent_by=session.frontend_agent_id or PLANNER_ID, error_code=outcome.error_code,
            embeds=self._store_embeds(outcome.embeds),
        )
        table = self.s.sessions.table_name
        key = {"session_id": {"S": session.session_id}}
        status = SessionStatus.AWAITING_INPUT if program_state else SessionStatus.IDLE
        items: list[TransactWriteItemTypeDef] = [
            {"Put": {"TableName": table,
                     "Item": to_item({"session_id": session.session_id,
                                      "item": ANSWER_PREFIX + query.message_id,
                                      "reply_id": reply.message_id}),
                     "ConditionExpression": "attribute_not_exists(#i)",
                     "ExpressionAttributeNames": {"#i": "item"}}},
            {"Put": {"TableName": table, "Item": message_item(reply)}},
            {"Update": {"TableName": table, "Key": {**key, "item": {"S": SESSION_ITEM}},
                        "UpdateExpression": "SET #s = :s, modified = :m",
                        "ConditionExpression": "attribute_exists(session_id)",
                        "ExpressionAttributeNames": {"#s": "status"},
                        "ExpressionAttributeValues": {":s": {"S": status.value},
                                                      ":m": {"S": reply.timestamp.isoformat()}}}},
        ]
        if program_state:
            items.append({"Put": {"TableName": table, "Item": to_item({
                "session_id": session.session_id, "item": STATE_ITEM,
                "state": json.dumps(program_state, separators=(",", ":"))})}})
        else:
            state_key = {**key, "item": {"S": STATE_ITEM}}
            items.append({"Delete": {"TableName": table, "Key": state_key}})
        steps = [message_item(m) for m in trace]
        if len(items) + len(steps) <= TRANSACTION_ITEMS and \
                len(json.dumps(steps)) <= TRANSACTION_BYTES:
            items[1:1] = [{"Put": {"TableName": table, "Item": step}} for step in steps]
        else:  # too long for one transaction: the trace goes first, in batches
            self.s.sessions.put_messages(trace)
        try:
            self.s.sessions.db.transact_write_items(TransactItems=items)
        except self.s.sessions.db.exceptions.TransactionCanceledException:
            # Answered meanwhile, or the session was deleted: either way, nothing to add.
            log.info("reply to %s not written: already answered or session gone",
                     query.message_id)
            return
        if session.callback_url:
            self._notify(session, reply)

    def _notify(self, session: Session, reply: Message) -> None:
        from codeshot.runner.agent_urls import check_agent_url
        from codeshot.runner.callbacks import A2A_TOKEN_HEADER, deliver, sign_event

        url = session.callback_url or ""
        try:  # checked again at delivery: DNS may have changed since the session was made
            check_agent_url(url, allow_loopback=self.s.settings.local_mode)
        except CodeshotError as exc:
            log.warning("callback %s refused: %s", url, exc.message)
            return
        body, token = sign_event(self.s.auth.sign, self.s.auth.issuer, url, reply,
                                 session.callback_format)
        extra = {A2A_TOKEN_HEADER: session.callback_token} if session.callback_token else {}
        deliver(url, body, token, headers=extra)

    def _store_embeds(self, embeds: dict[str, Any]) -> dict[str, EmbedRef]:
        """Agents' embeds given as data: URIs become immutable embeds of ours; the platform
        does not fetch arbitrary URLs an agent names (that would be an SSRF hole)."""
        out: dict[str, EmbedRef] = {}
        for key, embed in embeds.items():
            uri = str((embed or {}).get("uri", ""))
            if not uri.startswith("data:") or ";base64," not in uri:
                continue
            content_type = uri[5:].split(";", 1)[0] or "application/octet-stream"
            try:
                data = base64.b64decode(uri.split(";base64,", 1)[1], validate=True)
                digest = self.s.embeds.put(data, content_type)
            except (binascii.Error, ValueError, CodeshotError):
                continue
            if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", str(key)):
                continue
            out[str(key)] = EmbedRef(content_type=content_type, content_hash=digest,
                                          size=len(data))
        return out
