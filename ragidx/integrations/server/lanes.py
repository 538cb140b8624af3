"""Where searches run: two bounded thread pools ("lanes"), and each search's deadline.

A :class:`Lane` runs at most ``workers`` searches at once and keeps at most ``queue`` more waiting;
one more is refused at once (:class:`Busy`, answered 503) rather than queued without end. The
server has a light lane for plain searches and a heavy one for the rest
(:mod:`~ragidx.integrations.server.limits`), so a heavy search waits only for other heavy ones.

A :class:`Deadline` is what a search may take from its arrival. The request handler stops waiting
when it passes (503); a search still queued then is cancelled before it starts, and a running one
stops at its next :meth:`Deadline.check` (the server checks it for each document its ``where``
filter looks at). Threads cannot be killed, so a search past its deadline without a filter runs to
its end, bounded by the work budget, holding its worker.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from ragidx.search.options import SearchKwargs

T = TypeVar("T")


class Busy(Exception):
    """A lane with every worker busy and its queue full."""


class TimedOut(Exception):
    """A search past its deadline."""


class Deadline:
    """``seconds`` from now (monotonic clock); :meth:`cancel` ends it early."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.at = time.monotonic() + seconds
        self._cancelled = False

    def cancel(self) -> None:
        self._cancelled = True

    def remaining(self) -> float:
        return 0.0 if self._cancelled else max(0.0, self.at - time.monotonic())

    @property
    def expired(self) -> bool:
        return self._cancelled or time.monotonic() >= self.at

    def check(self) -> None:
        """Raise :class:`TimedOut` once the deadline has passed."""
        if self.expired:
            raise TimedOut(f"over the time limit of {self.seconds:g} s")

    def guard(self, options: SearchKwargs) -> SearchKwargs:
        """``options`` (changed in place) whose ``where`` predicate, if any, checks this deadline on
        every document it tests: a filtered search stops at the time limit instead of running on."""
        where = options.get("where")
        if callable(where):
            predicate = where

            def stoppable(record: Any) -> bool:
                self.check()
                return predicate(record)

            options["where"] = stoppable
        return options


class Lane:
    """A thread pool of ``workers`` threads that holds at most ``queue`` waiting calls."""

    def __init__(self, name: str, workers: int, queue: int):
        self.name = name
        self.workers = workers
        self.queue = queue
        self._slots = threading.BoundedSemaphore(workers + queue)
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix=f"ragidx-{name}")

    def submit(self, call: Callable[..., T], *args: object) -> Future[T]:
        """Run ``call(*args)`` on a worker; :class:`Busy` at once when the lane is full. The slot is
        free again when the call ends (or is cancelled before it starts)."""
        if not self._slots.acquire(blocking=False):
            raise Busy(f"the {self.name} lane is full ({self.workers} running, {self.queue} waiting)")
        try:
            future = self._pool.submit(call, *args)
        except BaseException:
            self._slots.release()
            raise
        future.add_done_callback(lambda _: self._slots.release())
        return future

    def shutdown(self) -> None:
        """Cancel what waits, and wait for what runs."""
        self._pool.shutdown(wait=True, cancel_futures=True)
