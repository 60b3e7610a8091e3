"""What the library did, kept in the hub's memory for the operator's page: a ring per kind.

The operator's page (``{hub}/colocate/status``, ``docs/surfaces.md``) shows the refusals of the
last 24 hours with the words the user read, and the ways out and moves taken with their outcome.
Those are facts only the library knows (the cluster keeps no trace of a refused spawn), so it
records them here, where they happen: a refusal where the spawner keeps it
(``ColocatingKubeSpawner._remember``), a way out or a move where its handler ends
(``nebari_colocate.handlers``).  Each kind is a ring (``collections.deque(maxlen=...)``): the
memory is bounded whatever the hub's uptime, the oldest record goes first.  Nothing here talks
to the API or to JupyterHub; a record is a frozen dataclass, a time is the wall clock's
(``time.time()``, what a person reads), given by the caller in tests.

The record API (other rooms call these; ``mode`` is ``"enforce"`` unless the library only
watches, ``colocation_mode = "observe"``, and records what it would have done):

- :func:`record_refusal` (user, server, reasons, message, node=None, way_out=False,
  source="check", mode="enforce"): a refused spawn, or in observe mode a spawn that would have
  been refused; :func:`record_refused` takes the :class:`~nebari_colocate.refusal.Refusal`;
- :func:`record_way_out` (user, kind, outcome, server="", servers=(), mode="enforce"): a way
  out (``kind`` :data:`WAY_OUT`), a move off a premium node (:data:`MOVE_OFF_PREMIUM`) or a
  move of the user's whole set (:data:`MOVE_SET`), with its outcome code;
- :func:`premium_pod_ended` (node): a pod that asked for a premium resource left ``node``: the
  user's servers still there ride on it from now (the page says for how long).
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .refusal import Refusal

__all__ = [
    "ENFORCE",
    "MOVE_OFF_PREMIUM",
    "MOVE_SET",
    "OBSERVE",
    "WAY_OUT",
    "History",
    "RefusalRecord",
    "WayOutRecord",
    "premium_pod_ended",
    "record_refusal",
    "record_refused",
    "record_way_out",
    "the_history",
]

#: the modes a record is taken in (``colocation_mode``)
ENFORCE, OBSERVE = "enforce", "observe"
MODES = (ENFORCE, OBSERVE)

#: where a refusal came from: the check before the pod exists, or the pod's events (fail fast)
CHECK, EVENTS = "check", "events"

#: the kinds of ways out the handlers take
WAY_OUT = "way-out"  # stop the user's servers that block a start, then start it
MOVE_OFF_PREMIUM = "move-off-premium"  # servers riding on a premium node started again off it
MOVE_SET = "move"  # the user's whole set restarted together on a node that holds it
WAY_OUT_KINDS = (WAY_OUT, MOVE_OFF_PREMIUM, MOVE_SET)

#: records kept per kind: the oldest goes first once a ring is full.  2,000 refusals hold a
#: busy day of a large hub (a refusal is ~1 KB with its words: ~2 MB at most)
REFUSALS_KEPT = 2000
WAYS_OUT_KEPT = 1000
#: premium nodes whose last premium pod's end is remembered (an autoscaler's churn is bounded)
PREMIUM_NODES_KEPT = 1000
#: the refusals the page shows: the last 24 hours
WINDOW_SECONDS = 24 * 3600.0


@dataclass(frozen=True)
class RefusalRecord:
    """One refused spawn (or, ``mode`` observe, one that would have been refused)."""

    at: float  # when (seconds since the epoch)
    user: str
    server: str  # "" the default server
    reasons: tuple[str, ...]  # reason codes (placement.REASON_CODES, events' codes)
    message: str  # the words the user read (plain text; the page escapes them)
    node: str | None = None  # the node the user's home was pinned to, if known
    way_out: bool = False  # the user was offered a way out
    source: str = CHECK  # CHECK or EVENTS
    mode: str = ENFORCE


@dataclass(frozen=True)
class WayOutRecord:
    """One way out or move taken, with its outcome code (``handlers``: started, moved,
    forbidden, stale, busy, stop-failed, release-timeout, start-failed, ...)."""

    at: float
    user: str
    kind: str  # one of WAY_OUT_KINDS
    outcome: str
    server: str = ""  # the server it started (a way out), "" the default server
    servers: tuple[str, ...] = ()  # the servers it stopped or moved
    mode: str = ENFORCE


@dataclass
class History:
    """The rings of one hub process."""

    refusals: deque[RefusalRecord] = field(default_factory=lambda: deque(maxlen=REFUSALS_KEPT))
    ways_out: deque[WayOutRecord] = field(default_factory=lambda: deque(maxlen=WAYS_OUT_KEPT))
    #: node -> when the last pod that asked for a premium resource left it (insertion order:
    #: the oldest is dropped first past PREMIUM_NODES_KEPT)
    premium_ended: OrderedDict[str, float] = field(default_factory=OrderedDict)
    #: when this process began recording (what "since" means for a ride seen since then)
    started: float = field(default_factory=time.time)

    def recent_refusals(self, now: float, window: float = WINDOW_SECONDS) -> list[RefusalRecord]:
        """The refusals of the last ``window`` seconds, newest first."""
        return [r for r in reversed(self.refusals) if now - r.at <= window]

    def recent_ways_out(self) -> list[WayOutRecord]:
        """Every way out and move kept, newest first."""
        return list(reversed(self.ways_out))

    def premium_idle_since(self, node: str) -> float | None:
        """When the last premium pod left ``node``, if this process saw it."""
        return self.premium_ended.get(node)

    def snapshot(self) -> History:
        """A copy to read away from the event loop (the rings keep changing on it)."""
        return History(
            refusals=deque(self.refusals, maxlen=self.refusals.maxlen),
            ways_out=deque(self.ways_out, maxlen=self.ways_out.maxlen),
            premium_ended=OrderedDict(self.premium_ended),
            started=self.started,
        )

    def clear(self) -> None:
        self.refusals.clear()
        self.ways_out.clear()
        self.premium_ended.clear()
        self.started = time.time()


_HISTORY = History()


def the_history() -> History:
    """The hub process's history (one per process, as the hub's metrics are)."""
    return _HISTORY


def _check_mode(mode: str) -> str:
    if mode not in MODES:
        raise ValueError(f"history: mode {mode!r} is not one of {', '.join(MODES)}")
    return mode


def record_refusal(
    user: str,
    server: str,
    *,
    reasons: Iterable[str],
    message: str,
    node: str | None = None,
    way_out: bool = False,
    source: str = CHECK,
    mode: str = ENFORCE,
    at: float | None = None,
) -> RefusalRecord:
    """Record a refused spawn of ``user``'s server ``server`` (or, ``mode`` observe, a spawn
    that would have been refused): its reason codes and the words the user read (or would
    have read)."""
    record = RefusalRecord(
        at=time.time() if at is None else at,
        user=user,
        server=server or "",
        reasons=tuple(reasons),
        message=message,
        node=node,
        way_out=way_out,
        source=source,
        mode=_check_mode(mode),
    )
    _HISTORY.refusals.append(record)
    return record


def record_refused(
    user: str, server: str, refusal: Refusal, *, mode: str = ENFORCE, at: float | None = None
) -> RefusalRecord:
    """:func:`record_refusal` of a :class:`~nebari_colocate.refusal.Refusal` (the check's
    refusal, or a spawn ended by its pod's events)."""
    decision, verdict = refusal.decision, refusal.event_verdict
    if decision is not None:
        reasons: tuple[str, ...] = tuple(decision.reasons)
        node = decision.node
    else:
        reasons = (verdict.code,) if verdict is not None and verdict.code else ()
        node = verdict.node if verdict is not None else None
    return record_refusal(
        user,
        server,
        reasons=reasons,
        message=refusal.message,
        node=node,
        way_out=refusal.way_out is not None,
        source=CHECK if decision is not None else EVENTS,
        mode=mode,
        at=at,
    )


def record_way_out(
    user: str,
    kind: str,
    outcome: str,
    *,
    server: str = "",
    servers: Iterable[str] = (),
    mode: str = ENFORCE,
    at: float | None = None,
) -> WayOutRecord:
    """Record a way out or a move of ``user``'s (``kind``: one of :data:`WAY_OUT_KINDS`) that
    ended with ``outcome``."""
    if kind not in WAY_OUT_KINDS:
        raise ValueError(f"history: kind {kind!r} is not one of {', '.join(WAY_OUT_KINDS)}")
    record = WayOutRecord(
        at=time.time() if at is None else at,
        user=user,
        kind=kind,
        outcome=outcome,
        server=server or "",
        servers=tuple(servers),
        mode=_check_mode(mode),
    )
    _HISTORY.ways_out.append(record)
    return record


def premium_pod_ended(node: str, *, at: float | None = None) -> None:
    """A pod that asked for a premium resource left ``node`` (deleted or finished)."""
    ended = _HISTORY.premium_ended
    ended.pop(node, None)
    ended[node] = time.time() if at is None else at
    while len(ended) > PREMIUM_NODES_KEPT:
        ended.popitem(last=False)
