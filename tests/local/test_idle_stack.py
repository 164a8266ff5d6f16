"""What an idle local stack costs, and what it leaves behind when stopped: a `codeshot
local up` restarted right after Ctrl-C must start, and an idle one must not spin."""

from __future__ import annotations

import itertools
import socket
import threading
import time

from codeshot.local.aws_server import check_port_free
from codeshot.local.poller import IDLE_MAX_SLEEP_SECONDS, QueuePoller
from codeshot.store.queue import SessionQueue, Work


def test_a_port_left_in_time_wait_is_free_to_start_on():
    """A stopped stack leaves its side of closed connections in TIME-WAIT for a minute;
    the check refused the port all that time (47-65 s) though the servers bind it."""
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = server.accept()
        accepted.close()  # the server closes first: its end waits in TIME-WAIT
        client.recv(1)
        client.close()
    check_port_free("127.0.0.1", port, "--port")


def test_an_idle_poller_backs_off_and_still_takes_new_work_soon(aws):
    queue = SessionQueue(aws)
    receives: list[float] = []
    queue.sqs.meta.events.register("before-call.sqs.ReceiveMessage",
                                   lambda **_: receives.append(time.monotonic()))
    handled = threading.Event()
    poller = QueuePoller(queue, lambda work, *_: handled.set())
    poller.start()
    try:
        time.sleep(3)
        idle = [b - a for a, b in itertools.pairwise(receives)]
        # 20 receives a second before; now at most 2 once backed off
        assert len(receives) < 15 and min(idle[-3:]) >= IDLE_MAX_SLEEP_SECONDS * 0.9, idle
        sent = time.monotonic()
        queue.enqueue(Work(session_id="s1", message_id="m1"))
        assert handled.wait(5)
        # Within a backed-off poll or so (generous: a loaded machine is slow to wake it).
        assert time.monotonic() - sent < IDLE_MAX_SLEEP_SECONDS + 3
    finally:
        poller.stop()
