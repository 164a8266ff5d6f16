"""Asking the user through an Agent Protocol task's ``callback_url`` (the RFC's option 2).

When a task's agent asks the user, the runner stores the question and queues a
:class:`PromptWork` on the prompt queue; each delivery is one exchange, never a wait:

1. ``POST {callback_url}`` ``{"prompt": question}``; the reply names the prompt:
   ``{"prompt_id", "status": "pending" | "resolved" | "rejected", "answer"?}``.
2. ``pending``: the next poll, ``GET {callback_url}/{prompt_id}``, is queued with a delay
   that doubles from 1 s up to ``CODESHOT_PROMPT_POLL_MAX_SECONDS`` (SQS holds it: no
   Lambda waits meanwhile), until ``CODESHOT_PROMPT_DEADLINE_SECONDS`` after the question.
3. ``resolved``: the answer is posted to the session as the user's message, and the paused
   program resumes with it (as if the user had typed it). ``rejected``: the question ends,
   CANCELED; the deadline: TIMEOUT. A reply that breaks these rules, an error status, an
   unreachable or refused address: CALLBACK_FAILED. Every end is the question's reply, so
   the task never stays stuck.

Each request is signed as session callbacks are (a platform JWT whose ``aud`` is the URL
called and ``body_sha256`` the body's hash), and goes through the SSRF-checked client.
A reply is read up to ``MAX_REPLY_BYTES`` (more is refused unread) within
``CALL_TIMEOUT_SECONDS`` in all, however slowly it comes: a callback cannot hold or
flood the runner.
A question answered meanwhile (by a step's input, or canceled) stops the exchange (when
by the callback's answer, one written and never run is queued again: its write may land
after the runner skipped its copy, see ``Messaging.queue_unrun``); one an answer's
refusal kept (``keeps_question``) is still asked, and polled. A
prompt is POSTed once a question: a redelivered first exchange polls the prompt the first
one named, once its id is kept; before that, it waits for another delivery, and the
last ends the question (CALLBACK_FAILED) rather than ask the user twice.

The callback's answer (or another answer to the question) refused at the user's
running-query cap (RATE_LIMITED, the question kept) is posted again, under a key of its
own, once the user has a slot free: the runner queues a :class:`PromptWork` naming it
(``answer_id``), which looks for a free slot after the same backoff as the polls, until
the deadline ends the question (TIMEOUT): the polls' own, counted from the question. Past
it, with a slot free, the answer is posted once more (it came in time), and refused
again, the question ends. The callback is not asked again: its answer stands. Of the
answers to one question, one runs (the runner takes a paused program once), so a
repeated post runs nothing twice.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import time
from functools import partial
from typing import Any
from urllib.parse import quote

import httpx

from codeshot import ids
from codeshot.errors import (
    CallbackFailed,
    Canceled,
    Changed,
    CodeshotError,
    Conflict,
    NotFound,
    Throttled,
    Timeout,
    Unavailable,
)
from codeshot.models import Message, Session, SessionStatus
from codeshot.net.http import public_client
from codeshot.runner.batch import Invocation, RemainingMs, process_batch
from codeshot.runner.callbacks import event_claims
from codeshot.runner.fairness import UNQUEUED_ANSWER, running_slot_free
from codeshot.services import Services
from codeshot.settings import RUNNER_RECORD_MARGIN_SECONDS
from codeshot.store.queue import PROMPT_FIRST_DELAY_SECONDS, PromptWork
from codeshot.usecases.messaging import Messaging
from codeshot.usecases.tasks import end_question, pending_question
from codeshot.usecases.users import principal_of

log = logging.getLogger("codeshot.prompts")
CALL_TIMEOUT_SECONDS = 5.0
MAX_REPLY_BYTES = 64 * 1024
MAX_PROMPT_ID = 200
ANSWER_TRIES = 3  # the answer's post, sent again while its write is not confirmed
STATUSES = frozenset({"pending", "resolved", "rejected"})


class Prompts:
    def __init__(self, services: Services) -> None:
        self.s = services

    def handle(self, work: PromptWork, final_attempt: bool = False,
               remaining_ms: RemainingMs | None = None) -> None:
        """One exchange about ``work``'s question (a queue delivery), in an invocation
        with ``remaining_ms`` left (None: no end). Trouble of the platform's own (a failed
        read or write) is retried by redelivery; on the last delivery the question ends
        instead of waiting forever."""
        try:
            session = self.s.sessions.get(work.session_id)
        except NotFound:
            return  # deleted meanwhile
        question = self._pending_question(session, work.question_id)
        if question is None:  # answered or ended meanwhile; perhaps by the callback's
            # answer, whose write landed after the runner skipped its copy: run then
            Messaging(self.s).queue_unrun(session.session_id, session.owner,
                                          _answer_key(work.question_id, work.answer_id))
            return
        try:
            if work.answer_id is None:
                self._exchange(session, question, work, remaining_ms)
            else:
                self._answer_again(session, question, work, remaining_ms)
        except NotFound:
            return  # deleted meanwhile: its prompt's claim was refused, nothing asked
        except Exception:
            if not final_attempt:
                raise
            log.exception("giving up on the question of %s", session.session_id)
            text, code = ("The platform could not ask the question through the task's "
                          "callback; please answer it with a step.", CallbackFailed.code) \
                if work.answer_id is None else (UNQUEUED_ANSWER, Unavailable.code)
            try:
                self._end(session, question, text, code)
            except Exception:  # busy even now (or AWS's raw error): queued again, to end it
                log.exception("could not end the question of %s", session.session_id)
                self.give_up(work)

    def give_up(self, work: PromptWork) -> None:
        """``work`` on its last delivery, never started: queued again (prompts have no
        order to keep), so the question is still asked or polled."""
        self.s.prompt_queue.schedule(work)

    def _exchange(self, session: Session, question: Message, work: PromptWork,
                  remaining_ms: RemainingMs | None) -> None:
        url = session.callback_url or ""
        try:
            if work.prompt_id is None:
                work = self._claimed(session, question, work)
            if work.prompt_id is None:
                reply = self._call(session, url, {"prompt": question.text})
            elif time.time() >= work.deadline:
                # One last look first: a prompt asked late (a redelivered query queues it
                # up to the queue's visibility timeout after the question, whose time the
                # deadline counts from) may have its answer by now.
                last = self._last_look(session, url, work.prompt_id)
                if last is None:
                    self._end(session, question, f"No answer to the question "
                              f"{question.text!r} came back from the task's callback in "
                              "time.", Timeout.code)
                    return
                reply = last
            else:
                reply = self._call(session, f"{url.rstrip('/')}/{quote(work.prompt_id, safe='')}")
            self._follow(session, question, work, reply, remaining_ms)
        except CallbackFailed as exc:
            self._end(session, question, f"The question {question.text!r} could not be "
                      f"asked through the task's callback: {exc.message}", exc.code)

    def _claimed(self, session: Session, question: Message, work: PromptWork) -> PromptWork:
        """``work``, the prompt's first exchange, if it may POST the prompt: once a
        question. Redelivered after the POST (or queued again by a redelivered query),
        it polls the prompt the callback named instead; while none is kept, it waits for
        a redelivery (the last ends the question: the user is never asked twice)."""
        claimed, prompt_id = self.s.sessions.claim_prompt(session.session_id,
                                                          question.message_id)
        if claimed:
            return work
        if prompt_id is None:
            raise RuntimeError(f"the prompt of {session.session_id} was posted; its id is "
                               "not known yet")
        return dataclasses.replace(work, prompt_id=prompt_id, attempt=max(work.attempt, 1))

    def _pending_question(self, session: Session, question_id: str) -> Message | None:
        """``question_id``, if the session still waits on it: its newest message, or the
        question a refusal of an answer kept (the running-query cap's, or a late
        answer's to a question before it), which is still to be asked."""
        if session.status is not SessionStatus.AWAITING_INPUT:
            return None
        try:
            return pending_question(self.s, session.session_id, question_id)
        except (Conflict, NotFound):  # answered, ended, or deleted meanwhile
            return None

    def _call(self, session: Session, url: str, payload: dict[str, Any] | None = None
              ) -> dict[str, Any]:
        """POST ``payload`` (or GET without one) to ``url``, signed; the reply's JSON."""
        body = b"" if payload is None else json.dumps(payload, separators=(",", ":")).encode()
        token = self.s.auth.sign(event_claims(self.s.auth.issuer, url, session.session_id,
                                              body))
        # Not compressed: a few KB of gzip can inflate to megabytes in one chunk.
        headers = {"Authorization": f"Bearer {token}", "Accept": "application/json",
                   "Accept-Encoding": "identity"}
        if payload is not None:
            headers["Content-Type"] = "application/json"
        try:
            with public_client(allow_loopback=self.s.settings.local_mode,
                               timeout=CALL_TIMEOUT_SECONDS,
                               deadline=time.monotonic() + CALL_TIMEOUT_SECONDS) as client, \
                    client.stream("GET" if payload is None else "POST", url, headers=headers,
                                  content=None if payload is None else body) as response:
                if not response.is_success:
                    raise CallbackFailed(f"{url} answered HTTP {response.status_code}")
                data = b""
                for chunk in response.iter_raw():
                    data += chunk
                    if len(data) > MAX_REPLY_BYTES:  # nothing more is read
                        raise CallbackFailed(f"{url} answered more than {MAX_REPLY_BYTES} "
                                             "bytes")
        except CallbackFailed:
            raise
        except CodeshotError as exc:  # the address is refused
            raise CallbackFailed(exc.message) from exc
        except httpx.TimeoutException as exc:
            raise CallbackFailed(f"{url} did not answer within {CALL_TIMEOUT_SECONDS:g}s"
                                 ) from exc
        except httpx.HTTPError as exc:
            raise CallbackFailed(f"{url} could not be reached ({type(exc).__name__})") from exc
        try:
            reply = json.loads(data)
        except ValueError as exc:
            raise CallbackFailed(f"{url} did not answer JSON") from exc
        if not isinstance(reply, dict) or reply.get("status") not in STATUSES:
            raise CallbackFailed(f"{url} answered no status of {sorted(STATUSES)}")
        return reply

    def _follow(self, session: Session, question: Message, work: PromptWork,
                reply: dict[str, Any], remaining_ms: RemainingMs | None) -> None:
        status = reply["status"]
        if status == "resolved":
            answer = reply.get("answer")
            if not isinstance(answer, str) or not answer.strip():
                raise CallbackFailed("a resolved prompt needs a non-empty text answer")
            self._answer(session, question, answer, remaining_ms)
        elif status == "rejected":
            self._end(session, question,
                      f"The user declined to answer the question {question.text!r}.",
                      Canceled.code)
        else:
            prompt_id = work.prompt_id or reply.get("prompt_id")
            if not isinstance(prompt_id, str) or not 0 < len(prompt_id) <= MAX_PROMPT_ID \
                    or "/" in prompt_id:
                raise CallbackFailed(f"a pending prompt needs a prompt_id of 1-{MAX_PROMPT_ID} "
                                     "characters without '/'")
            if work.prompt_id is None:  # kept before its poll is queued (see _claimed)
                try:
                    self.s.sessions.keep_prompt_id(session.session_id, question.message_id,
                                                   prompt_id)
                except NotFound:
                    return  # the session was deleted meanwhile
            self._schedule(PromptWork(session.session_id, question.message_id, work.deadline,
                                      prompt_id, work.attempt + 1))

    def _last_look(self, session: Session, url: str, prompt_id: str
                   ) -> dict[str, Any] | None:
        """The prompt's reply at its deadline if it is an end (resolved or rejected);
        None for one still pending or a callback failing now (the deadline's TIMEOUT)."""
        try:
            reply = self._call(session, f"{url.rstrip('/')}/{quote(prompt_id, safe='')}")
        except CallbackFailed:
            return None
        return reply if reply.get("status") in ("resolved", "rejected") else None

    def _schedule(self, work: PromptWork) -> None:
        """The next poll, after the backoff (the deadline's poll ends the question)."""
        backoff = min(PROMPT_FIRST_DELAY_SECONDS * 2 ** (work.attempt - 1),
                      self.s.settings.prompt_poll_max_seconds)
        delay = min(backoff, math.ceil(max(0.0, work.deadline - time.time())))
        self.s.prompt_queue.schedule(work, delay)

    def _answer_again(self, session: Session, question: Message, work: PromptWork,
                      remaining_ms: RemainingMs | None) -> None:
        """The answer the runner refused at the running-query cap (``work.answer_id``),
        posted again once the user has a slot free (else looked at again after the
        backoff). Past the question's deadline, with a slot free, it is posted once more
        (refused in the deadline's last moment, or asked late by a redelivered query, it
        came in time); with none free, or refused again so, the question ends TIMEOUT, as
        one the callback never answered does."""
        late = time.time() >= work.deadline
        if not running_slot_free(self.s, session.owner):
            if late:
                self._end(session, question, f"The answer to the question {question.text!r} "
                          "could not run: none of the user's running-query slots was free "
                          "by the question's deadline.", Timeout.code)
            else:
                self._schedule(dataclasses.replace(work, attempt=work.attempt + 1))
            return
        refused = self.s.sessions.get_message(session.session_id, work.answer_id or "")
        if refused.answers != question.message_id:
            log.warning("%s/%s answers no question %s: not posted again", session.session_id,
                        refused.message_id, question.message_id)
            return
        if late and self._posted_late_again(session, question, refused, work.deadline):
            self._end(session, question, f"The answer to the question {question.text!r} "
                      "could not run: posted again past the question's deadline, it was "
                      "refused again (the user's running-query slots taken, or the "
                      "platform busy).", Timeout.code)
            return
        self._answer(session, question, refused.text, remaining_ms,
                     _answer_key(question.message_id, refused.message_id))

    def _posted_late_again(self, session: Session, question: Message, refused: Message,
                           deadline: float) -> bool:
        """Whether ``refused`` is the platform's own post again of an answer, made past the
        ``deadline``: posted after it, and not the callback's answer (which a prompt asked
        late may bring after it). Such a post is the last: this bounds the posts again."""
        if ids.ulid_time_ms(refused.message_id) / 1000 < deadline:
            return False
        first = self.s.sessions.posted_under(session.session_id,
                                             _answer_key(question.message_id))
        return first is None or first.message_id != refused.message_id

    def _answer(self, session: Session, question: Message, answer: str,
                remaining_ms: RemainingMs | None, key: str | None = None) -> None:
        """The answer as the session owner's message: the runner resumes the program.
        ``key``: its idempotency key (by default the callback's first answer's)."""
        owner = principal_of(self.s.users.get(session.owner))
        # Keyed by the question: a poll delivered twice still answers once, and a post
        # whose write was not confirmed (UNAVAILABLE) is safely sent again, here: the
        # callback is not asked again, and a first exchange's redelivery cannot post it
        # (its prompt was POSTed, no id kept). As A2A's answers: only while nothing was
        # posted since the question was read pending (a step that answered it during the
        # call is its answer: this one would run as a new, charged query), and naming the
        # question, so one ended before the runner takes it runs nothing.
        post = partial(Messaging(self.s).post, owner, session.session_id, answer,
                       idempotency_key=key or _answer_key(question.message_id),
                       answers=question.message_id)
        unconfirmed = False
        for attempt in range(ANSWER_TRIES):
            try:
                post(unchanged_since=session.modified)
                return
            except Unavailable:  # perhaps posted (queued: then answered). If not, a poll's
                # redelivery polls again and posts it; a first exchange's cannot, and the
                # last ends the question CALLBACK_FAILED, for the user to answer with a step.
                delay = 0.2 * 2 ** attempt
                if attempt + 1 == ANSWER_TRIES or not _time_for(remaining_ms, delay):
                    raise
                unconfirmed = True
            except Changed:  # a post since: a step that answered it, or one refused
                # (busy, or a late answer's CANCELED) that left the question waiting
                session = self.s.sessions.get(session.session_id)
                if self._pending_question(session, question.message_id) is None:
                    log.info("the question of %s was answered or ended meanwhile; the "
                             "callback's answer is not posted", session.session_id)
                    return
                if attempt + 1 == ANSWER_TRIES:
                    raise  # still waiting on it: the redelivery polls and posts again
                continue
            except CodeshotError as exc:  # too long, over the daily quota ...
                if unconfirmed:  # ... or refused for an earlier try's write, in flight
                    raise Unavailable("the callback's answer was not confirmed posted, and "
                                      f"then refused: {exc.message}") from exc
                if isinstance(exc, Throttled):
                    raise  # nothing written: the redelivery polls and posts it again
                self._end(session, question,
                          f"The callback's answer could not be used: {exc.message}", exc.code)
                return
            time.sleep(delay)

    def _end(self, session: Session, question: Message, text: str, code: str) -> None:
        """End ``question``, and only it: during the exchange (a call of up to
        ``CALL_TIMEOUT_SECONDS``) the user may have answered it and the agent asked
        another, which this exchange must not end."""
        log.info("ending the question of %s: %s", session.session_id, text)
        # Answered, ended or deleted meanwhile: nothing to end. The platform busy (or its
        # store unavailable) raises: the work is delivered again, and its next delivery
        # ends the question (consumed, nothing else would: it would wait for ever).
        with contextlib.suppress(Conflict, NotFound):
            end_question(self.s, session, text, code, question_id=question.message_id)


def _answer_key(question_id: str, refused_id: str | None = None) -> str:
    """The idempotency key the callback's answer to ``question_id`` is posted under; the
    key it is posted again under after the runner refused its post ``refused_id``."""
    return f"prompt-{question_id}" + (f"-{refused_id}" if refused_id else "")


def _time_for(remaining_ms: RemainingMs | None, delay: float) -> bool:
    """Whether the invocation has time for a post after ``delay`` seconds: the margin a
    record keeps for its writes (past it, Lambda could stop the post midway)."""
    return remaining_ms is None or \
        remaining_ms() >= (delay + RUNNER_RECORD_MARGIN_SECONDS) * 1000


def process_prompts(event: dict[str, Any], prompts: Prompts,
                    remaining_ms: RemainingMs | None = None) -> dict[str, list[dict[str, str]]]:
    """A batch of the prompt queue, as the runner's batches are processed: an exchange
    takes at most ``CALL_TIMEOUT_SECONDS``."""
    invocation = None if remaining_ms is None else Invocation(remaining_ms, CALL_TIMEOUT_SECONDS)
    return process_batch(event, partial(prompts.handle, remaining_ms=remaining_ms), invocation,
                         parse=PromptWork.parse,
                         queue=prompts.s.prompt_queue, give_up=prompts.give_up)
