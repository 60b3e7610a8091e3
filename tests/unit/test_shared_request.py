"""SharedRequest: one request for every caller that asks before it is sent (the confirming LISTs
of a burst of checks, nebari_colocate.view)."""

from __future__ import annotations

import asyncio

import pytest

from nebari_colocate.kubeapi import SharedRequest


class Server:
    """Answers each request with its number, once ``release`` is set."""

    def __init__(self) -> None:
        self.requests = 0
        self.release = asyncio.Event()
        self.fail = False

    async def answer(self) -> int:
        self.requests += 1
        number = self.requests
        await self.release.wait()
        if self.fail:
            raise RuntimeError(f"request {number} failed")
        return number


async def test_callers_that_ask_at_once_share_one_request():
    server = Server()
    shared = SharedRequest(server.answer)
    callers = [asyncio.ensure_future(shared.get()) for _ in range(100)]
    await asyncio.sleep(0)
    server.release.set()
    assert await asyncio.gather(*callers) == [1] * 100
    assert server.requests == 1 and shared.sent == 1


async def test_a_caller_that_asks_after_the_request_was_sent_gets_a_request_of_its_own():
    server = Server()
    shared = SharedRequest(server.answer)
    first = asyncio.ensure_future(shared.get())
    await asyncio.sleep(0.01)  # the first request is on its way
    assert server.requests == 1
    later = asyncio.ensure_future(shared.get())
    await asyncio.sleep(0.01)
    server.release.set()
    assert (await first, await later) == (1, 2)


async def test_an_error_reaches_every_caller_and_the_next_caller_asks_again():
    server = Server()
    server.fail = True
    shared = SharedRequest(server.answer)
    callers = [asyncio.ensure_future(shared.get()) for _ in range(3)]
    server.release.set()
    results = await asyncio.gather(*callers, return_exceptions=True)
    assert [str(r) for r in results] == ["request 1 failed"] * 3
    server.fail = False
    assert await shared.get() == 2


async def test_a_caller_that_gives_up_leaves_the_request_to_the_others():
    server = Server()
    shared = SharedRequest(server.answer)
    impatient = asyncio.ensure_future(shared.get())
    patient = asyncio.ensure_future(shared.get())
    await asyncio.sleep(0.01)
    impatient.cancel()
    with pytest.raises(asyncio.CancelledError):
        await impatient
    server.release.set()
    assert await patient == 1
