"""UserLocks: one lock per user, shared by the spawners of a hub (docs/decisions.md, "Concurrent
spawns")."""

from __future__ import annotations

import asyncio

from nebari_colocate.locks import UserLocks


async def test_a_second_spawn_of_the_same_user_waits_for_the_first():
    locks = UserLocks()
    assert await locks.acquire("alice", timeout=1)
    second = asyncio.ensure_future(locks.acquire("alice", timeout=1))
    await asyncio.sleep(0.05)
    assert not second.done() and "alice" in locks
    locks.release("alice")
    assert await second is True
    locks.release("alice")
    assert list(locks) == [] and len(locks) == 0


async def test_spawns_of_different_users_do_not_wait_for_each_other():
    locks = UserLocks()
    assert await locks.acquire("alice", timeout=1)
    assert await locks.acquire("bob", timeout=0.1)
    assert sorted(locks) == ["alice", "bob"]


async def test_a_spawn_that_waited_too_long_goes_on_without_the_lock_and_leaves_no_entry():
    locks = UserLocks()
    assert await locks.acquire("alice", timeout=1)
    assert await locks.acquire("alice", timeout=0.05) is False
    locks.release("alice")
    assert "alice" not in locks


async def test_a_cancelled_wait_leaves_no_entry_behind():
    locks = UserLocks()
    assert await locks.acquire("alice", timeout=1)
    waiting = asyncio.ensure_future(locks.acquire("alice", timeout=5))
    await asyncio.sleep(0.01)
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    locks.release("alice")
    assert list(locks) == []


async def test_a_free_lock_is_taken_without_yielding_to_the_event_loop():
    # In a burst of spawns every yield waits behind all the other spawns' work.
    locks = UserLocks()
    ran = []
    asyncio.get_running_loop().call_soon(ran.append, "other task")
    assert await locks.acquire("alice", timeout=1)
    assert ran == []
    locks.release("alice")
    assert "alice" not in locks
