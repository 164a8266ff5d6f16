"""Feeds the local SQS queue to the runner the way Lambda's event source would: batches,
partial failures retried, sessions processed in parallel and each in order."""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from codeshot.runner.batch import GiveUp, Handle, Parse, grouped, process_batch, record_of
from codeshot.store.queue import Work

log = logging.getLogger("codeshot.local")
RETRY_DELAY_SECONDS = 2  # Lambda waits out the visibility timeout; locally, retry soon
# Short polls, not long ones: moto decides which FIFO groups are busy when a receive
# starts, so a long poll would hold a session's next message for the whole wait. Quick
# while work is in flight (its next step is queued soon); doubling up to the most while
# idle, where 20 polls a second of two pollers cost ~13% of a core and ~1,900 sockets
# in TIME-WAIT (moto's server closes every connection).
IDLE_SLEEP_SECONDS = 0.05
IDLE_MAX_SLEEP_SECONDS = 0.5


class QueuePoller:
    def __init__(self, queue: Any, handle: Handle, workers: int = 8, parse: Parse = Work.parse,
                 name: str = "sqs-poller", give_up: GiveUp | None = None) -> None:
        self.queue, self.handle, self.parse, self.give_up = queue, handle, parse, give_up
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="runner")
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _loop(self) -> None:
        sleep, in_flight = IDLE_SLEEP_SECONDS, set[Future[None]]()
        while not self._stop.is_set():
            try:
                messages = self.queue.receive(max_messages=10, wait_seconds=0)
            except Exception:
                if self._stop.is_set():
                    return
                log.exception("receiving from the session queue failed")
                self._stop.wait(1)
                continue
            if not messages:
                in_flight = {f for f in in_flight if not f.done()}
                self._stop.wait(sleep)
                sleep = IDLE_SLEEP_SECONDS if in_flight else \
                    min(sleep * 2, IDLE_MAX_SLEEP_SECONDS)
                continue
            sleep = IDLE_SLEEP_SECONDS
            # Each session (each record of a standard queue) is a batch of its own, as
            # process_batch would group them: its records are acknowledged as soon as it
            # is done, not when the slowest session of the receive is (Lambda's way), so
            # a quick session's next message is not held up locally.
            for records in grouped([record_of(m) for m in messages]).values():
                in_flight.add(self._pool.submit(self._process, records))

    def _process(self, records: list[dict[str, Any]]) -> None:
        result = process_batch({"Records": records}, self.handle, parse=self.parse,
                               give_up=self.give_up)
        failed = {f["itemIdentifier"] for f in result["batchItemFailures"]}
        self.queue.set_visibility([r["receiptHandle"] for r in records
                                   if r["messageId"] in failed], RETRY_DELAY_SECONDS)
        for record in records:
            if record["messageId"] not in failed:
                try:
                    self.queue.delete(record["receiptHandle"])
                except Exception:
                    log.exception("acknowledging %s failed", record["messageId"])
