"""Redelivery (#13 item 12): a query whose run stopped mid-way (its reply could not be
stored after an agent's Func had run) is delivered again by the queue; it must not run again and
repeat what the agent already did. It is answered INTERRUPTED, and the user's running
slot is free again."""

from __future__ import annotations

from codeshot.local.poller import QueuePoller
from codeshot.runner.session_runner import SessionRunner
from tests.runner.conftest import messages, register, send, session


class FailsToStoreOnce(SessionRunner):
    """The runner, except that storing its first reply fails as a DynamoDB outage (or a
    reply over the item limit) would: after the agent's Func has run."""

    failed = False

    def _finish(self, *args, **kwargs):
        if not self.failed:
            self.failed = True
            raise RuntimeError("the reply could not be stored")  # not a platform error
        return super()._finish(*args, **kwargs)


def test_a_query_interrupted_mid_way_is_not_run_again(platform, agents):
    runner = FailsToStoreOnce(platform.services)
    poller = QueuePoller(platform.services.queue, runner.handle)
    poller.start()
    try:
        _, key = platform.user("crash")
        dice = register(platform, key, "dice", agents.url + "/dice")
        handle = session(platform, key, frontend=dice)
        rolls = len(agents.rolls)
        reply = send(platform, key, handle, "Roll 1d20")["reply"]
        assert runner.failed and reply["type"] == "error", reply
        assert "interrupted mid-way and is not run again" in reply["text"]
        assert messages(platform, key, handle)[-1]["errorCode"] == "INTERRUPTED"
        assert len(agents.rolls) == rolls + 1  # the Func ran once, not again
        # The slot the crashed run held is free: the next query runs.
        assert send(platform, key, handle, "Roll 1d20")["reply"]["type"] == "response"
        assert len(agents.rolls) == rolls + 2
    finally:
        poller.stop()
