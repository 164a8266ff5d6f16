"""The bytes of an agent's reply embed (stored by the runner, named in the reply message
alone) are erased with the user whose sessions alone hold them, and kept while another
user's session holds them, whoever else posted the same bytes and deleted their account."""

from __future__ import annotations

import base64
import hashlib
from datetime import timedelta
from unittest import mock

import pytest

from codeshot.errors import NotFound
from codeshot.usecases import accounts, erasure, erasure_start, users
from codeshot.usecases.messaging import EmbedUpload, Messaging
from codeshot.usecases.sessions import create_session
from tests.fixie.test_embeds_and_memory import answer_of, chart_agent
from tests.runner.test_user_erasure import later, run_erasure

CHART = b"hi"  # what chart_agent's Func returns for "inline" (data:base64,aGk=)


def erase(live, user_id: str) -> None:
    """The user deletes their account; their erasure runs once it may start. The moto
    server runs in a process of its own, where a test cannot move SQS's clock: its parts
    are sent undelayed, and the eraser's own check of the platform's clock holds them;
    a part the eraser puts off (a look again at objects it deleted) moves the clock on."""
    user = live.services.users.get(user_id)
    queue = live.services.erasure_queue
    undelayed = queue.send

    def send_now(work, delay=0):
        if work.part:  # not the deletion's own, which the window below waits out
            live.clock.now += timedelta(seconds=delay)
        undelayed(work)

    with mock.patch.object(queue, "send", send_now):
        accounts.delete_account(live.services, users.principal_of(user), user.username)
        with later(live.services, live.clock,
                   erasure_start.window_seconds(live.services.settings) + 1):
            assert run_erasure(live.services) > len(erasure.STEPS)


def test_another_user_posting_a_replys_bytes_then_deleting_their_account_keeps_them(
        live, user, deploy):
    answer = answer_of(live, user, deploy(chart_agent(), "chart"), "Draw the chart at inline")
    [embed] = answer["embeds"]
    assert embed["contentHash"] == hashlib.sha256(CHART).hexdigest()
    mallory_id, _ = live.user("mallory")
    mallory = users.principal_of(live.services.users.get(mallory_id))
    session_id = create_session(live.services, mallory).session_id
    Messaging(live.services).post(mallory, session_id, "look", embeds=[
        EmbedUpload("c.png", "image/png", base64.b64encode(CHART).decode())])
    erase(live, mallory_id)
    assert live.services.embeds.read(embed["contentHash"]) == CHART


def test_a_deleted_users_own_reply_embeds_are_erased(live, user, deploy):
    answer = answer_of(live, user, deploy(chart_agent(), "chart"), "Draw the chart at inline")
    [embed] = answer["embeds"]
    erase(live, user.user_id)
    with pytest.raises(NotFound):
        live.services.embeds.read(embed["contentHash"])

