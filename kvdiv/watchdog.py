"""Wall-time budgets for jobs that run the user's code (own presses may never return: docs/security.md).

:func:`doing` notes what the process is doing (document, action, press, layer; the kernel and the trajectory job set
it). :func:`time_budget` gives a block ``seconds`` of wall time: past it ``SIGALRM`` raises :class:`BudgetExceeded` in
the main thread naming the budget's key and what was being done, and the block's cleanups run; code stuck in C, which
a signal cannot interrupt, is ended :data:`GRACE_S` later by :mod:`faulthandler` with every thread's traceback in the
log. Imports nothing of kvdiv.
"""

from __future__ import annotations

import contextlib
import faulthandler
import signal
import threading
from typing import Any, Iterator, TextIO

#: Seconds past a budget after which a process whose main thread never returned to Python is ended.
GRACE_S = 30.0

_NOW: dict[str, Any] = {}
_UNSET = object()


class BudgetExceeded(TimeoutError):
    """A block ran past its wall-time budget (the message names the budget and what was being done)."""


@contextlib.contextmanager
def doing(**what: Any) -> Iterator[None]:
    """Note ``what`` (e.g. ``document="d"``, ``action="a"``) as what the process is doing while the block runs."""
    previous = {key: _NOW.get(key, _UNSET) for key in what}
    _NOW.update(what)
    try:
        yield
    finally:
        for key, value in previous.items():
            if value is _UNSET:
                _NOW.pop(key, None)
            else:
                _NOW[key] = value


def now() -> dict[str, Any]:
    """What :func:`doing` says the process is doing (a copy)."""
    return dict(_NOW)


def describe(what: dict[str, Any]) -> str:
    """``what`` (:func:`now`) in words: ``press 'X' of action 'a' (layer 3) on document 'd' (prefill)``."""
    parts = [f"the import of {what['importing']}"] if "importing" in what else []
    if "press" in what:
        parts.append(f"press {what['press']}" + (f" of action {what['action']!r}" if "action" in what else ""))
    elif "action" in what:
        parts.append(f"action {what['action']!r}")
    if "layer" in what:
        parts.append(f"(layer {what['layer']})")
    if "document" in what:
        parts.append(f"on document {what['document']!r}")
    elif "documents" in what:
        parts.append(f"on documents {', '.join(map(repr, what['documents']))}")
    if "phase" in what:
        parts.append(f"({what['phase']}" + (f", step {what['step']})" if "step" in what else ")"))
    return " ".join(parts) or "(nothing noted)"


def press_label(press: Any) -> str:
    """A press's class with the presses it wraps: ``AdaKVPress(MyPress)``."""
    inner = getattr(press, "press", None) or getattr(press, "base_press", None)
    name = type(press).__name__
    return f"{name}({press_label(inner)})" if inner is not None and not isinstance(inner, (str, dict)) else name


@contextlib.contextmanager
def time_budget(seconds: float | None, what: str, key: str, log: TextIO | None = None) -> Iterator[None]:
    """Run the block within ``seconds`` of wall time (None: no budget); past it raise :class:`BudgetExceeded`
    naming ``what`` (e.g. ``trajectory job X``), the config ``key`` and :func:`describe` of :func:`now`. Only in
    the main thread (signals); ``log`` (a file with a descriptor) receives the tracebacks if the process must be
    ended because its main thread never returns to Python."""
    if seconds is None or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expired(signum, frame):
        raise BudgetExceeded(
            f"{what} ran past its wall-time budget of {seconds:g} s ({key}) while running {describe(now())}: "
            f"a press that never returns? Raise {key} (or set it to null) if the job only needs longer"
        )

    def stuck() -> None:  # the main thread did not come back to Python: say what it was doing before it is ended
        log.write(
            f"{what} ran past its wall-time budget of {seconds:g} s ({key}) and does not return to Python: running "
            f"{describe(now())}; ending the process in {GRACE_S / 2:g} s (tracebacks below)\n"
        )
        log.flush()

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    backstop = log is not None and hasattr(log, "fileno")
    timer = threading.Timer(seconds + GRACE_S / 2, stuck) if backstop else None
    if timer is not None:
        timer.daemon = True
        timer.start()
        faulthandler.dump_traceback_later(seconds + GRACE_S, exit=True, file=log)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if timer is not None:
            timer.cancel()
            faulthandler.cancel_dump_traceback_later()
