"""Fault injection for crash-safety tests: die or fail at a named step, deterministically.

The writer calls :func:`point` at its steps (``after-batch`` after each checkpointed batch,
``before-commit``, ``mid-commit`` when the new generation's files are written but the manifest is
not yet switched, ``after-commit``, and ``write`` on every atomic file write). Nothing happens
unless a test asks:

* the environment variable ``RAGIDX_FAULT`` (for subprocesses), ``NAME:N[:ACTION]`` with several
  comma-separated — at the N-th time step ``NAME`` is reached, ``kill`` (SIGKILL to this process,
  the default: a crash with no clean-up at all) or ``oserror`` (raise ``OSError(ENOSPC)``, as a
  full disk would);
* :func:`hook` (in-process): run a callback each time the step is reached.
"""

from __future__ import annotations

import errno
import os
import signal
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

ENV = "RAGIDX_FAULT"

_counts: Counter[str] = Counter()
_hooks: dict[str, list[Callable[[], None]]] = {}


def point(name: str) -> None:
    """A step where a fault can be injected (a no-op unless a test asked for one)."""
    for callback in list(_hooks.get(name, ())):
        callback()
    spec = os.environ.get(ENV)
    if not spec:
        return
    _counts[name] += 1
    for rule in spec.split(","):
        target, _, rest = rule.strip().partition(":")
        count, _, action = rest.partition(":")
        if target != name or not count.isdigit() or int(count) != _counts[name]:
            continue
        if action in ("", "kill"):
            os.kill(os.getpid(), signal.SIGKILL)
        if action == "oserror":
            raise OSError(errno.ENOSPC, f"injected fault at {name} #{count}: no space left on device")


@contextmanager
def hook(name: str, callback: Callable[[], None]) -> Iterator[None]:
    """Run ``callback`` whenever step ``name`` is reached inside the ``with`` block."""
    _hooks.setdefault(name, []).append(callback)
    try:
        yield
    finally:
        _hooks[name].remove(callback)


def reset() -> None:
    """Forget how often each step was reached (tests that set ``RAGIDX_FAULT`` in-process)."""
    _counts.clear()
