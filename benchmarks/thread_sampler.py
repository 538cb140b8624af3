"""Where every thread of this process spends its time: a sampling profiler in pure Python.

``cProfile`` sees only the thread that started it; an ingest runs on three (the main thread, the
prefetch thread that reads and tokenizes, the thread that embeds). :class:`ThreadSampler` looks at
every thread's stack every ``interval`` seconds (``sys._current_frames``) and counts, per thread,
the innermost Python function and the innermost ragidx function calling it; the shares say what
each thread was doing (a thread waiting on a lock or a queue shows the waiting function). Used by
``benchmarks/gpu/run.py --profile-pipeline`` and ``benchmarks/ingest_pipeline.py``-style checks.

    with ThreadSampler() as sampler:
        ingest(...)
    print(sampler.table())
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from types import FrameType, TracebackType
from typing import Any


def _label(frame: FrameType | None, focus: str) -> str:
    """``innermost function ← innermost function under ``focus`` (a path part)``."""
    if frame is None:
        return "?"
    inner = f"{frame.f_code.co_name} ({_short(frame.f_code.co_filename)}:{frame.f_lineno})"
    current: FrameType | None = frame
    while current is not None:
        if focus in current.f_code.co_filename:
            mine = f"{current.f_code.co_name} ({_short(current.f_code.co_filename)}:{current.f_lineno})"
            return inner if mine == inner else f"{inner} <- {mine}"
        current = current.f_back
    return inner


def _short(path: str) -> str:
    for marker in ("/ragidx/", "/site-packages/", "/lib/python"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path.rsplit("/", 1)[-1]


class ThreadSampler:
    """Samples all threads but its own every ``interval`` seconds while in a ``with`` block."""

    def __init__(self, interval: float = 0.005, focus: str = "/ragidx/"):
        self.interval, self.focus = interval, focus
        self.counts: dict[str, Counter[str]] = {}
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="thread-sampler", daemon=True)

    def _run(self) -> None:
        me = threading.get_ident()
        while not self._stop.is_set():
            names = {t.ident: t.name for t in threading.enumerate()}
            for ident, frame in sys._current_frames().items():
                if ident == me:
                    continue
                name = names.get(ident, str(ident))
                self.counts.setdefault(name, Counter())[_label(frame, self.focus)] += 1
            self.samples += 1
            time.sleep(self.interval)

    def __enter__(self) -> ThreadSampler:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join()

    def report(self, top: int = 12) -> dict[str, Any]:
        """Per thread: its samples and its ``top`` labels with their share of the run's samples."""
        out: dict[str, Any] = {}
        for name, counts in sorted(self.counts.items(), key=lambda kv: -sum(kv[1].values())):
            total = sum(counts.values())
            out[name] = {
                "samples": total,
                "top": [[label, round(n / max(self.samples, 1), 4)] for label, n in counts.most_common(top)],
            }
        return out

    def table(self, top: int = 12) -> str:
        lines = [f"thread sampler: {self.samples} samples every {self.interval * 1e3:g} ms"]
        for name, data in self.report(top).items():
            lines.append(f"-- {name} ({data['samples']} samples)")
            lines += [f"   {share * 100:5.1f} %  {label}" for label, share in data["top"]]
        return "\n".join(lines)
