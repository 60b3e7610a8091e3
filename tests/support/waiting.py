"""``wait_until``: the one way a test waits for something to become true.

A test that waits on the real control plane, a hub or a browser reads something again and again
until it is what the test wants. When it gives up, the failure says what it waited for and what
it saw last (the value read, or the exception reading it raised), so a timeout in CI reads as a
finding, not as "timed out". Standard library only and Python 3.10 (the end-to-end legs import it
in virtualenvs of their own).

    pod = await wait_until(
        lambda: api.read_namespaced_pod(name, ns),
        until=lambda p: p.status.phase == "Running",
        timeout=30,
        what=f"pod {name} Running",
        seen=lambda p: p.status.phase,
    )
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import Any, TypeVar, cast

T = TypeVar("T")

_NOTHING = object()


class WaitTimeout(AssertionError, TimeoutError):
    """A ``wait_until`` that gave up: ``what`` it waited for and the ``last`` thing it saw.

    Both an ``AssertionError`` (a test's expectation not met; what the hand-written loops it
    replaced raised in the tests) and a ``TimeoutError`` (what they raised in the harness), so
    every caller that caught either still does."""

    def __init__(self, what: str, timeout: float, last: object, reads: int) -> None:
        self.what = what
        self.timeout = timeout
        self.last = last
        self.reads = reads
        super().__init__(f"timed out after {timeout:g} s waiting for {what}; {reads} reads, {last}")


def _describe_last(last: object, error: BaseException | None, seen: Callable[[Any], object]) -> str:
    if error is not None:
        return f"the last read raised {type(error).__name__}: {error}"
    if last is _NOTHING:
        return "nothing read yet"
    try:
        return f"last saw {seen(last)!r}"
    except Exception as e:  # a describer that cannot read the value still leaves the value
        return f"last saw {last!r} ({type(e).__name__} describing it: {e})"


class _Wait:
    """One wait's bookkeeping, the same for both loops: the deadline (from the start), the
    reads, the last value and error; :meth:`after` judges each read."""

    def __init__(
        self,
        timeout: float,
        what: str,
        until: Callable[[Any], object],
        seen: Callable[[Any], object],
        interval: float,
    ) -> None:
        self.deadline = time.monotonic() + timeout
        self.timeout, self.what, self.until, self.seen = timeout, what, until, seen
        self.interval = interval
        self.last: object = _NOTHING
        self.error: BaseException | None = None
        self.reads = 0

    def after(self, read: tuple[object, BaseException | None]) -> float | None:
        """None once the read ``(value, error)`` satisfies the wait (the value is ``last``);
        else the seconds to sleep before the next read; WaitTimeout when no time is left."""
        value, self.error = read
        self.reads += 1
        if self.error is None:
            self.last = value
            if self.until(value):
                return None
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            last = _describe_last(self.last, self.error, self.seen)
            raise WaitTimeout(self.what, self.timeout, last, self.reads)
        return min(self.interval, remaining)


def _read(
    read: Callable[[], Any], retry_on: tuple[type[BaseException], ...]
) -> tuple[object, BaseException | None]:
    try:
        return read(), None
    except retry_on as e:
        return _NOTHING, e


async def _read_async(
    read: Callable[[], Any], retry_on: tuple[type[BaseException], ...]
) -> tuple[object, BaseException | None]:
    try:
        value = read()
        return (await value if inspect.isawaitable(value) else value), None
    except retry_on as e:
        return _NOTHING, e


async def wait_until(
    read: Callable[[], Any],
    *,
    timeout: float,
    what: str,
    until: Callable[[Any], object] = bool,
    seen: Callable[[Any], object] = lambda value: value,
    interval: float = 0.2,
    retry_on: tuple[type[BaseException], ...] = (),
) -> Any:
    """Call ``read`` (plain or async) until ``until(value)`` is true; return that value.

    Gives up after ``timeout`` seconds with :class:`WaitTimeout`, naming ``what`` and the last
    value (through ``seen``, to keep the message short) or the exception of the last read.
    Exceptions of the types in ``retry_on`` count as "not yet"; any other propagates at once.
    ``read`` runs at least once, also with ``timeout`` 0.
    """
    wait = _Wait(timeout, what, until, seen, interval)
    while (pause := wait.after(await _read_async(read, retry_on))) is not None:
        await asyncio.sleep(pause)
    return wait.last


def wait_until_sync(
    read: Callable[[], T],
    *,
    timeout: float,
    what: str,
    until: Callable[[T], object] = bool,
    seen: Callable[[T], object] = lambda value: value,
    interval: float = 0.2,
    retry_on: tuple[type[BaseException], ...] = (),
) -> T:
    """``wait_until`` for code without an event loop (a process starting, a port opening)."""
    wait = _Wait(timeout, what, until, seen, interval)
    while (pause := wait.after(_read(read, retry_on))) is not None:
        time.sleep(pause)
    return cast(T, wait.last)  # the value until() accepted
