"""``wait_until`` (tests/support/waiting.py): returns the value that satisfied the wait, and when it
gives up says what it waited for and what it saw last."""

from __future__ import annotations

import asyncio

import pytest

from tests.support.waiting import WaitTimeout, wait_until, wait_until_sync


async def test_returns_the_first_value_that_satisfies_the_wait():
    reads = iter([1, 2, 3, 4])
    assert await wait_until(lambda: next(reads), until=lambda v: v >= 3, timeout=5, what="3") == 3


async def test_an_async_read_is_awaited():
    count = 0

    async def read():
        nonlocal count
        count += 1
        await asyncio.sleep(0)
        return count

    assert await wait_until(read, until=lambda v: v == 2, timeout=5, what="two", interval=0) == 2


async def test_giving_up_names_what_it_waited_for_and_what_it_saw_last():
    with pytest.raises(WaitTimeout) as info:
        await wait_until(
            lambda: {"phase": "Pending"},
            until=lambda pod: pod["phase"] == "Running",
            timeout=0.05,
            what="pod lab Running",
            seen=lambda pod: pod["phase"],
            interval=0.01,
        )
    message = str(info.value)
    assert "waiting for pod lab Running" in message
    assert "last saw 'Pending'" in message
    assert isinstance(info.value, TimeoutError)
    assert isinstance(info.value, AssertionError)


async def test_exceptions_named_in_retry_on_are_not_yet_and_the_last_one_is_reported():
    def read():
        raise ConnectionRefusedError("apiserver down")

    with pytest.raises(WaitTimeout, match="the last read raised ConnectionRefusedError"):
        await wait_until(read, timeout=0.05, what="the API", retry_on=(OSError,), interval=0.01)


async def test_other_exceptions_propagate_at_once():
    def read():
        raise KeyError("status")

    with pytest.raises(KeyError):
        await wait_until(read, timeout=5, what="anything")


async def test_the_read_runs_once_even_with_no_time_left():
    assert await wait_until(lambda: "ok", timeout=0, what="ok") == "ok"


def test_the_sync_form_waits_the_same_way():
    reads = iter([0, 0, 7])
    assert wait_until_sync(lambda: next(reads), timeout=5, what="7", interval=0) == 7
    with pytest.raises(WaitTimeout, match="last saw 0"):
        wait_until_sync(lambda: 0, timeout=0.02, what="never", interval=0.005)


def test_the_sync_form_reports_the_last_error_and_the_reads_as_the_async_one_does():
    def read():
        raise ConnectionRefusedError("port closed")

    with pytest.raises(WaitTimeout, match="reads, the last read raised ConnectionRefusedError"):
        wait_until_sync(read, timeout=0.02, what="the port", retry_on=(OSError,), interval=0.005)
