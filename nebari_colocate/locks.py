"""One asyncio lock per user, shared by every spawner of a hub.

The spawner holds its user's lock from the pre-spawn check until the new pod is visible, so
concurrent spawns of one user see each other (docs/decisions.md, "Concurrent spawns").  An entry
lives while a spawn holds or waits for it, so the table never outgrows the users spawning now.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator


class _Entry:
    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.users = 0  # spawns holding or waiting for the lock


class UserLocks:
    """Per-user locks: :meth:`acquire` (with a timeout) and :meth:`release`, by username."""

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}

    async def acquire(self, user: str, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for ``user``'s lock: True once held, False on timeout."""
        entry = self._entries.setdefault(user, _Entry())
        entry.users += 1
        if entry.users == 1:
            # No other spawn holds or awaits it: take it without yielding.  ``wait_for`` runs
            # the wait as a task of its own before Python 3.12, a full trip through the event
            # loop's queue: in a burst of spawns that trip, not the lock, was what the check
            # waited for (benchmarks/burst.py).
            await entry.lock.acquire()  # a free lock with no waiters is taken at once
            return True
        try:
            await asyncio.wait_for(entry.lock.acquire(), timeout=timeout)
        except asyncio.TimeoutError:
            self._leave(user, entry)
            return False
        except BaseException:
            self._leave(user, entry)
            raise
        return True

    def release(self, user: str) -> None:
        """Release ``user``'s lock, held by the caller after a successful :meth:`acquire`."""
        entry = self._entries.get(user)
        if entry is not None:
            entry.lock.release()
            self._leave(user, entry)

    def _leave(self, user: str, entry: _Entry) -> None:
        entry.users -= 1
        if entry.users <= 0 and self._entries.get(user) is entry:
            del self._entries[user]

    def __iter__(self) -> Iterator[str]:
        """The users whose lock is held or awaited now."""
        return iter(list(self._entries))

    def __contains__(self, user: object) -> bool:
        return user in self._entries

    def __len__(self) -> int:
        return len(self._entries)
