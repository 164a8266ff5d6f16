"""Turns one queued user message into its answer, stored in the session.

Exactly once: the terminal message (response, error or question) is written in one
transaction with an ``ANSWER#<query id>`` marker, so a redelivered or concurrently retried
message can never be answered twice; a message already answered is skipped at once.
Every intermediate step is stored as a message too (the session is its own trace), in
that same transaction: a retried run never leaves a half or doubled trace, and a query
costs one read (session, paused program and history together) and one write.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from codeshot import ids
from codeshot.engine.builtin import SessionHistory
from codeshot.engine.executor import COMMAND_TIMEOUT_SETTING, Limits, Outcome, Status, TraceStep
from codeshot.errors import (
    AgentFailed,
    CallbackFailed,
    Canceled,
    CodeshotError,
    Conflict,
    Interrupted,
    NotFound,
    RateLimited,
    Unavailable,
)
from codeshot.llm import get_llm
from codeshot.models import (
    PLANNER_ID,
    Agent,
    EmbedRef,
    Message,
    MessageType,
    Session,
    SessionStatus,
    stamp,
)
from codeshot.runner import metrics
from codeshot.runner.agent_client import AgentClient
from codeshot.runner.budgets import budget_for
from codeshot.runner.callbacks import PROMPT_FORMAT
from codeshot.runner.embeds import EmbedBook
from codeshot.runner.fairness import (
    UNQUEUED_ANSWER,
    Lease,
    posted_again,
    query_deadline,
    running_query,
)
from codeshot.runner.fetch import Fetched, fetch_public_url
from codeshot.runner.platform_funcs import FuncContext
from codeshot.runner.programs import (
    PlannerProgram,
    RunContext,
    failure_outcome,
    program_for,
)
from codeshot.services import Services
from codeshot.store.corpora import CorpusState
from codeshot.store.dynamo import MAX_ITEM_BYTES, cancelled_by, item_bytes, retry_transient
from codeshot.store.queue import (
    LANDING_SECONDS,
    PROMPT_FIRST_DELAY_SECONDS,
    PromptWork,
    Work,
)
from codeshot.store.sessions import (
    ANSWER_PREFIX,
    MSG_PREFIX,
    PURGE_PAGES,
    RESUMED_AT,
    RESUMING,
    SESSION_ITEM,
    STATE_ITEM,
    Recent,
)
from codeshot.store.usage import INTERRUPTED

if TYPE_CHECKING:
    from types_boto3_dynamodb.type_defs import (
        AttributeValueTypeDef,
        TransactWriteItemTypeDef,
        UpdateTypeDef,
    )

    from codeshot.runner.corpora import CorpusSearch

log = logging.getLogger("codeshot.runner")

HISTORY_MESSAGES = 40
# Embeds a prompt lists (the query's, then the most recent): a session of thousands would
# put thousands of lines into every LLM call. A query reads only these; a key not listed
# can still be named (it is read by key).
PROMPT_EMBEDS = 50
# DynamoDB's limits on one transaction; a longer trace is written ahead of the reply.
TRANSACTION_ITEMS = 100
TRANSACTION_BYTES = 3_500_000  # of 4 MB, leaving room for keys and attribute names
# Index pages of a deleted registration's user storage one queued part sweeps (100 keys
# each: a user's thousand keys and count, a few seconds of deletes); the rest is the next
# part's, queued by this one.
SWEEP_PAGES = 10
# A sweep is queued a few milliseconds before its registration is deleted, in the same
# request, and may arrive first: it looks again once after this pause before it waits
# for a redelivery (the queue's visibility timeout, half an hour).
SWEEP_RECHECK_SECONDS = 2.0
ANSWERED_ENDED = ("the question this message answered was ended or answered before it was "
                  "taken in: nothing ran, and it was not charged")
ANSWERED: Literal["answered"] = "answered"  # why a queued query has nothing to do
MISSING: Literal["missing"] = "missing"
_TERMINAL = {Status.DONE: MessageType.RESPONSE, Status.ERROR: MessageType.ERROR,
             Status.AWAITING_INPUT: MessageType.AWAITING_INPUT}


def _line(step: TraceStep) -> str:
    """A trace step as the transcript line it stands for (what a person reads)."""
    if step.type is MessageType.FUNC_CALL or step.type is MessageType.AGENT_CALL:
        return f"Ask {step.target}: {step.text}"
    if step.type is MessageType.RESULT and step.target:
        return f"{step.target} says: {step.text}"
    return step.text


@dataclass(frozen=True)
class SessionMemory:
    """A session's recent messages before the current query (oldest first), read once."""

    recent: list[Message]
    frontend: str  # who answers the session's queries: an agent id or PLANNER_ID

    def turns(self) -> list[tuple[str, str]]:
        """The user's questions and the session's answers."""
        questions = {m.message_id: m.text for m in self.recent if m.type is MessageType.QUERY}
        return [(questions[m.in_reply_to], m.text) for m in self.recent
                if m.type is MessageType.RESPONSE and m.in_reply_to in questions]

    def turns_with(self, agent_id: str) -> list[tuple[str, str]]:
        """What ``agent_id`` was asked in this session and what it answered: the session's
        turns when it is the frontend, else the planner's calls of it (as _line wrote them)."""
        if agent_id == self.frontend:
            return self.turns()
        ask, says = f"Ask Agent[{agent_id}]: ", f"Agent[{agent_id}] says: "
        asked: dict[str | None, str] = {}
        turns = []
        for m in self.recent:
            if m.sent_by != PLANNER_ID:
                continue
            if m.type is MessageType.AGENT_CALL and m.text.startswith(ask):
                asked[m.in_reply_to] = m.text.removeprefix(ask)
            elif m.type is MessageType.RESULT and m.text.startswith(says) \
                    and m.in_reply_to in asked:
                turns.append((asked.pop(m.in_reply_to), m.text.removeprefix(says)))
        return turns

    def embeds(self) -> list[tuple[str, EmbedRef]]:
        """The embeds earlier messages carried, in the order they carried them."""
        return [(key, ref) for m in self.recent for key, ref in m.embeds.items()]

    def unread_embeds(self, bound: int, newest: list[str], query: Message) -> int:
        """How many of the session's ``bound`` embeds (its count) the query did not read:
        those bound are the users' (the agents' are only in their replies), and it read
        the ``newest``, its own and those of the users' recent messages."""
        read = set(newest) | set(query.embeds) | {
            key for m in self.recent if m.type is MessageType.QUERY for key in m.embeds}
        return max(0, bound - len(read))


def _task_of(query: Message, paused: dict[str, Any] | None) -> str:
    """The query that began the task ``query`` belongs to (the A2A task its reply is
    pushed for): the paused program's, when it answers that program's question (kept in
    its state; one paused before states kept it: its own); the task it was sent to
    answer, when that question was ended before it was taken (``Message.task``); else
    ``query`` itself."""
    return str((paused or {}).get("task") or query.task or query.message_id)


def _answers_ended(query: Message, paused: dict[str, Any] | None, recent: Recent) -> bool:
    """Whether ``query`` was sent to answer a question (``Message.answers``) the session
    no longer waits on: ended (no paused program), or answered another way and the
    program asked another since (the one kept with its state): nothing of it runs, nor is
    it taken as the answer to that other question. (A program paused before states kept
    their question takes it.)"""
    return query.answers is not None and (
        paused is None or recent.question not in (None, query.answers))


def _posted_again(query: Message, kept_question: str | None, error_code: str | None) -> bool:
    """Whether a reply that refused ``query`` with ``error_code``, keeping
    ``kept_question``, refused an answer to that question at the user's running-query
    cap: in a task with a callback, the platform posts it again once a slot is free
    (codeshot.usecases.prompts). The callback's answer has no one else to send it again;
    one sent by A2A is too (of two, one runs: a paused program is taken once)."""
    return kept_question is not None and query.answers == kept_question and \
        error_code == RateLimited.code


def _asks_by_prompt(session: Session) -> bool:
    """Whether the session's questions are asked through its task's callback."""
    return bool(session.callback_url) and session.callback_format == PROMPT_FORMAT


class SessionRunner:
    def __init__(self, services: Services, llm: Any | None = None) -> None:
        self.s = services
        self.llm = llm or get_llm(services.settings)

    # -- the one entry point ---------------------------------------------------------
    def handle(self, work: Work, final_attempt: bool = False) -> None:
        if work.kind == Work.CORPUS:
            self._ingest(work)
            return
        if work.kind == Work.SWEEP:
            self._sweep(work, final_attempt)
            return
        if work.kind == Work.PURGE:
            if self.s.sessions.purge(work.session_id, PURGE_PAGES):
                self.s.queue.enqueue(work.next_part())
            return
        # A wait for its message to land (_pending) is part of the time the record may
        # take, not of the query's budget (with a short one, a query that landed then
        # was answered TIMEOUT with nothing run).
        started = time.monotonic()
        pending = self._pending(work, final_attempt)
        if pending is None:
            return
        deadline = query_deadline(self.s.settings, record_start=started)
        session, recent, query, history = pending
        paused = recent.state if session.status is SessionStatus.AWAITING_INPUT else None
        if _answers_ended(query, paused, recent):  # runs nothing: no running slot to take
            self._answered_ended(session, query, recent, paused)
            return
        task = _task_of(query, paused)
        trace: list[Message] = []
        book = EmbedBook(self.s.embeds, self._fetch_embed, given=query.embeds,
                         max_bytes=self.s.settings.max_query_embed_bytes, deadline=deadline,
                         lookup=functools.partial(self._bound_embed, session.session_id))
        try:
            # The slot is held until the reply is stored: a run that stops before that
            # (a crash, a failed write) is not run again when the queue redelivers it.
            with running_query(self.s, session.owner, query.message_id) as lease:
                if paused is not None and not self.s.sessions.claim_pause(
                        session.session_id, query.message_id):
                    # Its question was ended since the read (a cancel won): nothing of the
                    # paused program runs, and the message is a query of its own (unless
                    # it was sent to that question's task).
                    if query.answers:
                        self._answered_ended(session, query, recent, None, lease)
                        return
                    paused, task = None, query.message_id
                try:
                    outcome, program_state = self._run(session, query, paused, history,
                                                       trace, book, deadline, task)
                except CodeshotError as exc:
                    outcome, program_state = failure_outcome(exc), None
                try:
                    self._finish(session, query, outcome, program_state, trace, book, lease,
                                 had_state=recent.state is not None, task=task)
                except CodeshotError as exc:
                    # The run's Funcs may have run: the store's trouble keeps the slot held
                    # (not a refusal, which gives it back), so the redelivery answers
                    # INTERRUPTED instead of running them again.
                    raise RuntimeError(f"the reply was not stored: {exc.message}") from exc
                return
        except Interrupted as exc:
            # A run of this query stopped mid-way holding its slot: the slot is given
            # back with this answer, in one write, so a failed write cannot free it for
            # a run that calls the agents again.
            lease = Lease(self.s, session.owner, query.message_id)
            try:
                self._finish(session, query, failure_outcome(exc), None, trace, book, lease,
                             had_state=recent.state is not None, task=task)
            except Exception:
                if final_attempt:  # no delivery comes after: not held till it lapses
                    lease.release()
                raise
            return
        except CodeshotError as exc:
            # Not run: all slots taken, or the session too busy to take its paused program
            # (the slot given back). The reply asks for the message again (an answer the
            # platform posts again itself, its refusal says so instead): a paused program
            # stays paused (its state and status untouched), so the answer sent again
            # resumes it. One paused before its question was kept ends (the reply could
            # not name it). Nothing ran, so the day's query charge is given back: the
            # message sent again is charged instead.
            kept = recent.question if paused is not None else None
            refusal = posted_again(exc) if isinstance(exc, RateLimited) and \
                _asks_by_prompt(session) and _posted_again(query, kept, exc.code) else exc
            self._finish(session, query, failure_outcome(refusal), None, trace, book,
                         had_state=recent.state is not None, task=task, kept_question=kept,
                         refund=True)
            return
        except Exception:
            if not final_attempt:
                raise  # infrastructure trouble: let SQS redeliver
            log.exception("giving up on %s/%s", work.session_id, work.message_id)
            outcome = self._given_up("The platform failed to answer; please try again.",
                                     AgentFailed.code)
            trace.clear()  # what failed to be written, perhaps: the answer alone is
        self._finish(session, query, outcome, None, trace, book,
                     had_state=recent.state is not None, task=task)

    def _answered_ended(self, session: Session, query: Message, recent: Recent,
                        paused: dict[str, Any] | None, lease: Lease | None = None) -> None:
        """Answer ``query``, sent to answer a question that was ended or answered since
        (:func:`_answers_ended`): that question's turn is over, so nothing runs, and the
        post is not charged. The reply is that task's (pushed for it), not a task of its
        own; a question asked since (``paused``) keeps waiting. Without its running slot
        (``lease``), it says so only if no earlier run of it took one."""
        nothing = EmbedBook(self.s.embeds, self._fetch_embed)
        self._finish(session, query, failure_outcome(Canceled(ANSWERED_ENDED)), None, [],
                     nothing, lease, had_state=recent.state is not None,
                     task=_task_of(query, None),
                     kept_question=recent.question if paused is not None else None,
                     refund=True, unless_run=None if lease else Lease(
                         self.s, session.owner, query.message_id))

    def give_up(self, work: Work) -> None:
        """``work`` on its last delivery, not started by it (behind a query of its session
        that kept failing, or left for invocations that ran out of time): a query is
        answered UNAVAILABLE in its turn (INTERRUPTED if an earlier delivery ran it and
        stopped before its reply; CANCELED if it answers a question ended since, as
        :meth:`handle` answers it), so the session's later queries still follow in order
        and none vanishes into the dead-letter queue; a corpus ingestion, a storage sweep
        or a deleted session's purge, whose order nothing waits on, is queued again."""
        if work.kind in (Work.CORPUS, Work.SWEEP, Work.PURGE):
            self.s.queue.enqueue(work, again=True)
            return
        pending = self._pending(work, final=True, landing=False)  # no time left to wait
        if pending is None:
            return
        session, recent, query, _ = pending
        paused = recent.state if session.status is SessionStatus.AWAITING_INPUT else None
        if _answers_ended(query, paused, recent):  # its turn is over: not to be sent again
            self._answered_ended(session, query, recent, paused)
            return
        outcome = self._given_up("The platform could not get to this message in time (an "
                                 "earlier one kept failing, or the runners were busy); "
                                 "nothing of it ran: please send it again.", Unavailable.code)
        # As on a last attempt that failed, a paused program ends: its question is no
        # longer the session's newest, so an answer sent again starts a new query. If no
        # delivery took its running slot, nothing of it ran (no Func called, no LLM token
        # spent), so, as for a refusal at the running-query cap, its daily query charge is
        # given back in the reply's write: the message sent again is charged instead.
        nothing = EmbedBook(self.s.embeds, self._fetch_embed)
        self._finish(session, query, outcome, None, [], nothing,
                     had_state=recent.state is not None, task=_task_of(query, paused),
                     refund=True, unless_run=Lease(self.s, session.owner, query.message_id))

    def _pending(self, work: Work, final: bool, landing: bool = True
                 ) -> tuple[Session, Recent, Message, list[Message]] | None:
        """The session, its paused program and recent history (the query in it), in one
        read; None once the session is deleted or the query answered (a redelivery;
        ``final``: its last), or its message is not there (an unconfirmed post's copy:
        with ``landing``, read again once its write can no longer land)."""
        recent = self.s.sessions.recent(work.session_id, HISTORY_MESSAGES)
        if recent.session is None:
            return None
        found = self._query(work, recent.messages)
        if found == MISSING:
            wait = (work.unconfirmed_at or 0.0) + LANDING_SECONDS - time.time()
            if landing and work.unconfirmed_at is not None and wait > 0:
                log.info("%s/%s not there yet: its unconfirmed write may land in %.1f s",
                         work.session_id, work.message_id, wait)
                time.sleep(min(wait, LANDING_SECONDS))
                return self._pending(work, final, landing=False)
            return None
        if found == ANSWERED:
            self._ask_again(recent.session, work, recent.messages, final)
            return None
        return recent.session, recent, *found

    def _ask_again(self, session: Session, work: Work, newest_first: list[Message],
                   final: bool) -> None:
        """A redelivered query answered by a question that still waits on a task's
        callback, and whose prompt was never taken up: the prompt queued again, as the
        runner may have stopped between storing the question and queueing it (if that
        fails too, the query's next delivery tries again; on its last, the question ends
        CALLBACK_FAILED rather than wait for ever). A prompt taken up has its own
        redeliveries; a second one queued before the first was taken up polls the
        first's (codeshot.usecases.prompts). The question is the session's newest
        message, or the one a refusal of its answer kept (one more read). Likewise a
        redelivered answer of the callback refused at the running-query cap: its post
        again is queued (a second one posts nothing more: it is keyed by the refusal)."""
        if not (_asks_by_prompt(session) and session.status is SessionStatus.AWAITING_INPUT
                and newest_first):
            return
        question = newest_first[0]
        if question.keeps_question and question.in_reply_to == work.message_id:
            answer = next((m for m in newest_first if m.message_id == work.message_id), None) \
                or self.s.sessions.get_message(session.session_id, work.message_id)
            if _posted_again(answer, question.keeps_question, question.error_code):
                self._queue_prompt(session, self._answer_work(session, answer), final,
                                   PROMPT_FIRST_DELAY_SECONDS)
            return
        if question.keeps_question:
            question = self.s.sessions.get_message(session.session_id, question.keeps_question)
        if question.type is not MessageType.AWAITING_INPUT or \
                question.in_reply_to != work.message_id:
            return
        if self.s.sessions.prompt_claimed(session.session_id, question.message_id):
            return
        self._queue_prompt(session, self._prompt_work(session, question), final)

    def _queue_prompt(self, session: Session, work: PromptWork, final: bool,
                      delay_seconds: int = 0) -> None:
        """``work`` queued for a redelivered query: if that fails, its next delivery tries
        again; on its last, the question ends (:meth:`_prompt`)."""
        if final:
            self._prompt(session, work, delay_seconds)
        else:
            self.s.prompt_queue.schedule(work, delay_seconds)

    def _given_up(self, text: str, code: str) -> Outcome:
        """The error a query is answered with when the runner gives up on it (counted: an
        alarm watches the metric)."""
        metrics.emit(metrics.QUERIES_GIVEN_UP, self.s.settings.queue_name)
        return Outcome(Status.ERROR, text, error_code=code)

    @functools.cached_property
    def corpus_search(self) -> CorpusSearch:
        from codeshot.runner.corpora import corpus_search

        return corpus_search(self.s.settings, self.s.corpora, self.s.corpus_embedder)

    def _ingest(self, work: Work) -> None:
        """An agent's corpus ingestion, unless a newer one was queued since (or it ran)."""
        from codeshot.runner.corpora import S3VectorsSearch, ingest

        recent = self.s.corpora.recent(work.agent_id, 1)  # none: the agent was deleted
        if not recent or recent[0].version != work.message_id or \
                recent[0].state is not CorpusState.INGESTING:
            return
        vectors_to = None
        if self.s.settings.corpus_search == "s3vectors":
            vectors_to = S3VectorsSearch(self.s.settings, self.s.corpora,
                                         self.s.corpus_embedder)
        ingest(recent[0], recent[0].corpora, self.s.settings, self.s.corpora,
               self.s.corpus_embedder, vectors_to=vectors_to)

    def _sweep(self, work: Work, final_attempt: bool) -> None:
        """A part of the sweep of a deleted registration's user storage; the next part
        queued if more may be left. It is queued before the registry changes: while the
        registration is still there (its deletion is under way, or failed), it waits for
        a redelivery, and is dropped at the last (the agent was not deleted)."""
        if self._registered(work):
            time.sleep(SWEEP_RECHECK_SECONDS)
            if self._registered(work):
                if final_attempt:
                    log.warning("not sweeping the storage of %s: still registered",
                                work.agent_id)
                    return
                raise RuntimeError(f"{work.agent_id} is still registered: swept once deleted")
        if self.s.storage.sweep_registration(work.agent_id, work.registration, SWEEP_PAGES):
            self.s.queue.enqueue(work.next_part())

    def _registered(self, work: Work) -> bool:
        """Whether the registration a sweep is of is still the agent's."""
        return self.s.registry.registration(work.agent_id) == work.registration

    def _query(self, work: Work, recent: list[Message]
               ) -> tuple[Message, list[Message]] | Literal["answered", "missing"]:
        """The queued query and the history before it, or why there is nothing to do:
        ``ANSWERED``, or ``MISSING`` (an unconfirmed post's copy, whose write did not land
        or not yet).

        Its reply is written with the marker, so a terminal reply among the recent
        messages means "answered"; a query older than the recent window (many messages
        posted after it) is read with its marker instead."""
        query = next((m for m in recent if m.message_id == work.message_id), None)
        if query is None:
            marker = ANSWER_PREFIX + work.message_id
            items = self.s.sessions.get_items(work.session_id,
                                              [MSG_PREFIX + work.message_id, marker])
            if marker in items:
                return ANSWERED
            if MSG_PREFIX + work.message_id not in items:
                return MISSING
            return self.s.sessions.message_of(items[MSG_PREFIX + work.message_id]), recent
        if any(m.in_reply_to == query.message_id and m.type in _TERMINAL.values()
               for m in recent):
            return ANSWERED
        return query, recent

    # -- running -----------------------------------------------------------------------
    def _run(self, session: Session, query: Message, paused: dict[str, Any] | None,
             recent: list[Message], trace: list[Message], book: EmbedBook,
             deadline: float, task: str) -> tuple[Outcome, dict[str, Any] | None]:
        settings = self.s.settings
        # A query queued before its user was deleted or disabled runs nothing: no agent is
        # called and no LLM spent for them (the API refuses their call tokens too).
        self.s.auth.refuse_inactive(session.owner)
        memory = self._memory(session, query, recent)
        # The newest embeds only, those a prompt can list: a session may have thousands
        # (an older one is read by key when named, see _bound_embed).
        newest = self.s.sessions.newest_embeds(session.session_id, PROMPT_EMBEDS) \
            if session.embed_count else []
        book.know(reversed(newest))
        book.know(memory.embeds())
        listed, unlisted = book.listing(PROMPT_EMBEDS)
        unlisted += memory.unread_embeds(session.embed_count, [k for k, _ in newest], query)
        client = AgentClient(
            self.s.auth.call_tokens(session.owner, session.session_id),
            timeout=settings.agent_call_timeout_seconds, allow_loopback=settings.local_mode,
            deadline=deadline, timeout_set_by=COMMAND_TIMEOUT_SETTING,
        )
        viewer = self.s.users.owner_name(session)
        refresh = functools.cache(self.s.agents.refresh)  # once a query, if it calls agents

        def usable(agent_id: str) -> Agent:
            """The agent, if the session's owner may use it now: one unpublished since the
            session began is gone for its other users (from their next query on)."""
            refresh()
            agent = self.s.agents.get(agent_id)
            if not agent.usable_by(viewer):
                raise NotFound(f"agent {agent_id} is not available")
            return agent

        try:
            ctx = RunContext(
                llm=self.llm, client=client, registry_get=usable,
                trace=lambda sent_by, step: self._trace(query, sent_by, step, trace),
                embeds=book,
                platform=FuncContext(
                    time_zone=lambda: self.s.users.get(session.owner).time_zone or "UTC",
                    embeds=book, llm=None if settings.llm == "fewshot" else self.llm,
                    allow_loopback=settings.local_mode, deadline=deadline),
                history=SessionHistory(memory.turns(), listed, unlisted),
                agent_turns=memory.turns_with,
                limits=Limits(max_tokens_per_call=settings.llm_max_tokens_per_call,
                              command_timeout=settings.agent_call_timeout_seconds,
                              deadline=deadline),
                budget=budget_for(self.s, session.owner),
                agent_secret=self.s.agent_secrets.get,
                corpus_search=lambda: self.corpus_search,
                agent_models=settings.agent_models(),
            )
            program, owner_id = self._program(session, ctx, viewer)
            if paused and paused.get("program") == owner_id:
                outcome = program.resume(paused["state"], query.text)
            else:
                outcome = program.run(query.text)
            state = {"program": owner_id, "state": outcome.state, "task": task} \
                if outcome.status is Status.AWAITING_INPUT else None
            return outcome, state
        finally:
            client.close()  # an abandoned (timed-out) call ends with its query

    def _program(self, session: Session, ctx: RunContext, viewer: str) -> tuple[Any, str]:
        if session.frontend_agent_id:
            try:
                agent = ctx.registry_get(session.frontend_agent_id)
            except NotFound as exc:
                raise NotFound(f"agent {session.frontend_agent_id} is no longer available"
                               ) from exc
            return program_for(agent, ctx), agent.agent_id
        settings = self.s.settings
        return (PlannerProgram(ctx, self.s.router, viewer, settings.planner_mode,
                               settings.planner_top_k,
                               # the offline replay cannot plan freely: auto splits, routes
                               free_plans=settings.llm != "fewshot"), PLANNER_ID)

    @staticmethod
    def _memory(session: Session, query: Message, recent: list[Message]) -> SessionMemory:
        earlier = [m for m in reversed(recent)
                   if m.message_id != query.message_id and m.in_reply_to != query.message_id]
        return SessionMemory(earlier, session.frontend_agent_id or PLANNER_ID)

    def _bound_embed(self, session_id: str, key: str) -> EmbedRef | None:
        """The session's embed bound under ``key`` (one read), or None."""
        try:
            embed = self.s.sessions.get_embed(session_id, key)
        except NotFound:
            return None
        return EmbedRef(content_type=embed.content_type, content_hash=embed.content_hash,
                        size=embed.size)

    def _fetch_embed(self, url: str, deadline: float | None) -> Fetched:
        settings = self.s.settings
        return fetch_public_url(url, max_bytes=settings.max_embed_bytes,
                                allow_loopback=settings.local_mode,
                                timeout=settings.agent_call_timeout_seconds, deadline=deadline)

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
                program_state: dict[str, Any] | None, trace: list[Message], book: EmbedBook,
                lease: Lease | None = None, *, had_state: bool, task: str,
                kept_question: str | None = None, refund: bool = False,
                unless_run: Lease | None = None) -> None:
        """Store the reply (and the trace) once. The session is left waiting on
        ``program_state``'s question, or idle with a paused program it had (``had_state``)
        dropped; with ``kept_question`` (the query did not run, and its session waits on
        that question) its status and paused program are left as they are, and the reply
        names the question (every reader of tasks sees it still waiting), unless that
        question was ended since it was read. ``task``: the A2A task the reply is pushed
        for. ``refund``: the query's daily charge is given back with the reply.
        ``unless_run``: the query's running slot, which no run of it may have taken; if one
        did (it ran, and stopped before its reply), the reply is INTERRUPTED instead, as a
        redelivery of that run is answered (the slot given back with it, nothing refunded),
        so a query that may have called agents is never said not to have run."""
        keep_pause = kept_question is not None
        table = self.s.sessions.table_name
        reply_id = ids.ulid()
        state_item = self.s.sessions.state_item(session.session_id, program_state, reply_id) \
            if program_state else None
        state_bytes = 0 if state_item is None else item_bytes(state_item)
        if state_bytes > MAX_ITEM_BYTES:
            # DynamoDB refuses it, and the write with it: the query ended INTERRUPTED,
            # its session held for the queue's redelivery (a few large pages, then a
            # question, were enough).
            outcome, program_state, state_item = failure_outcome(AgentFailed(
                "the run asked a question after more steps than a paused run can keep "
                f"({state_bytes // 1024:,} KB; at most {MAX_ITEM_BYTES // 1024} KB): ask for "
                "less at a time")), None, None
        reply = Message(
            session_id=session.session_id, message_id=reply_id, text=outcome.text,
            type=_TERMINAL[outcome.status], in_reply_to=query.message_id,
            sent_by=session.frontend_agent_id or PLANNER_ID, error_code=outcome.error_code,
            embeds=book.refs(outcome.embeds), keeps_question=kept_question,
        )
        key = {"session_id": {"S": session.session_id}}
        expression = "SET modified = :m"
        values: dict[str, AttributeValueTypeDef] = {":m": {"S": stamp(reply.timestamp)}}
        if not keep_pause:
            status = SessionStatus.AWAITING_INPUT if program_state else SessionStatus.IDLE
            expression += ", #s = :s"
            values[":s"] = {"S": status.value}
        update, values = self.s.sessions.touch(expression, values)
        if not keep_pause:  # a resume's claim on the paused program ends with its reply
            update += " REMOVE #r, #t"
        # The conditional items: their failure means answered already, or session gone.
        marker: TransactWriteItemTypeDef = {"Put": self.s.sessions.answer_item(
            session.session_id, query.message_id, reply.message_id)}
        session_update: UpdateTypeDef = {
            "TableName": table, "Key": {**key, "item": {"S": SESSION_ITEM}},
            "UpdateExpression": update, "ConditionExpression": "attribute_exists(session_id)",
            "ExpressionAttributeValues": values}
        if not keep_pause:
            session_update["ExpressionAttributeNames"] = {"#s": "status", "#r": RESUMING,
                                                          "#t": RESUMED_AT}
        items: list[TransactWriteItemTypeDef] = [
            marker, {"Put": {"TableName": table, "Item": self.s.sessions.message_item(reply)}},
            {"Update": session_update},
            {"ConditionCheck": self.s.sessions.unless_deleted(session.session_id)},
        ]
        if state_item is not None:
            items.append({"Put": {"TableName": table, "Item": state_item}})
        elif had_state and not keep_pause:
            # A paused program ends (a Delete bills 2 WRU even of nothing).
            state_key = {**key, "item": {"S": STATE_ITEM}}
            items.append({"Delete": {"TableName": table, "Key": state_key}})
        asks: TransactWriteItemTypeDef | None = None
        if kept_question is not None:  # a cancel since the read may have ended it
            asks = {"ConditionCheck": self.s.sessions.still_asks(session.session_id,
                                                                 kept_question)}
            items.append(asks)
        if lease is not None:  # the running slot is given back with the reply
            items.append(lease.release_item())
        untaken: TransactWriteItemTypeDef | None = None
        if unless_run is not None:
            untaken = unless_run.untaken_item()
            items.append(untaken)
        if refund:
            items.append({"Update": self.s.usage.refund_request("query", session.owner,
                                                                query.timestamp)})
        # The reply's embeds held for its session's owner (by_content: an erasure keeps
        # what another user's session holds), in this write, not a call of their own.
        items += [{"Put": {"TableName": table, "Item": held}} for held in
                  self.s.sessions.held_items(session.session_id, session.owner,
                                             reply.embeds.values())]
        steps = [self.s.sessions.message_item(m) for m in trace]
        if len(items) + len(steps) <= TRANSACTION_ITEMS and \
                len(json.dumps(steps)) <= TRANSACTION_BYTES:
            items[1:1] = [{"Put": {"TableName": table, "Item": step}} for step in steps]
        else:  # too long for one transaction: the trace goes first, in batches
            self.s.sessions.put_messages(trace)
        try:
            # Cancelled because another transaction wrote one of its items at that moment
            # (the user's next post, another of the user's replies on the running count):
            # tried again; if it still fails, the record fails and SQS redelivers it.
            retry_transient(lambda: self.s.sessions.db.transact_write_items(TransactItems=items))
        except self.s.sessions.db.exceptions.TransactionCanceledException as exc:
            reasons = cancelled_by(exc)
            if "ConditionalCheckFailed" not in reasons:  # only theirs can fail so
                raise
            failed = [i for i, r in zip(items, reasons) if r == "ConditionalCheckFailed"]
            if failed == [asks]:
                # The question was ended since the read: a plain refusal, keeping nothing
                # (and refunding as it would have).
                self._finish(session, query, outcome, program_state, trace, book, lease,
                             had_state=had_state, task=task, refund=refund,
                             unless_run=unless_run)
                return
            if failed == [untaken]:
                # A run of it took its slot, held or lapsed (it may have called agents):
                # answered as its redelivery would be, the slot given back, charge kept.
                self._finish(session, query, failure_outcome(Interrupted(INTERRUPTED)), None,
                             trace, book, unless_run, had_state=had_state, task=task)
                return
            # Answered meanwhile, or the session was deleted: either way, nothing to add.
            log.info("reply to %s not written: already answered or session gone",
                     query.message_id)
            return
        if lease is not None:
            lease.released = True
        if _asks_by_prompt(session):
            if reply.type is MessageType.AWAITING_INPUT:
                self._prompt(session, self._prompt_work(session, reply))
            elif _posted_again(query, reply.keeps_question, reply.error_code):
                self._prompt(session, self._answer_work(session, query),
                             PROMPT_FIRST_DELAY_SECONDS)
        elif session.callback_url:
            self._notify(session, reply, task)

    def _prompt(self, session: Session, work: PromptWork, delay_seconds: int = 0) -> None:
        """Queue ``work`` on the question for the task's callback (codeshot.usecases.prompts);
        if it cannot be queued, end the question: one nobody will ask, or whose answer
        nobody will post again, would wait forever. The platform's own trouble: the
        question's answer refused at the cap ends UNAVAILABLE (the callback answered)."""
        try:
            self.s.prompt_queue.schedule(work, delay_seconds)
        except Exception:
            log.exception("could not queue the question of %s", session.session_id)
            text, code = ("The platform could not send the question to the task's callback.",
                          CallbackFailed.code) if work.answer_id is None else (
                UNQUEUED_ANSWER, Unavailable.code)
            try:
                self.s.sessions.end_pause(Message(
                    session_id=session.session_id, message_id=ids.ulid(), text=text,
                    type=MessageType.ERROR, sent_by="platform",
                    in_reply_to=work.question_id, error_code=code))
            except Conflict:  # answered meanwhile
                pass
            except CodeshotError:  # the session busy through every retry: left waiting
                log.exception("could not end the question of %s", session.session_id)

    def _prompt_work(self, session: Session, question: Message) -> PromptWork:
        return PromptWork(session.session_id, question.message_id,
                          self._deadline(question.message_id))

    def _answer_work(self, session: Session, answer: Message) -> PromptWork:
        """The post again of ``answer`` to the question it names, refused at the
        running-query cap: it ends with that question's exchanges' deadline."""
        question_id = answer.answers or ""
        return PromptWork(session.session_id, question_id, self._deadline(question_id),
                          attempt=1, answer_id=answer.message_id)

    def _deadline(self, question_id: str) -> float:
        """The question's one deadline, for its polls and its answer's posts again alike:
        counted from when it was asked (its id's time), however late a redelivered query
        queues its prompt."""
        return ids.ulid_time_ms(question_id) / 1000 + self.s.settings.prompt_deadline_seconds

    def _notify(self, session: Session, reply: Message, task: str) -> None:
        from codeshot.runner.callbacks import A2A_TOKEN_HEADER, deliver, sign_event

        url = session.callback_url or ""
        body, token = sign_event(self.s.auth.sign, self.s.auth.issuer, url, reply,
                                 session.callback_format, task)
        extra = {A2A_TOKEN_HEADER: session.callback_token} if session.callback_token else {}
        deliver(url, body, token, allow_loopback=self.s.settings.local_mode,
                extra_headers=extra)
