"""Observe mode (``colocation_mode = "observe"``): every spawn is decided exactly as in enforce,
and what enforce would have done is recorded, but nothing is changed (docs/rollout.md).

What observe mode leaves as it is: the spawn is refused never (no refusal, no hold of a refused
REST spawn, no way out), the pod manifest is KubeSpawner's own (no label, no affinity of ours,
the operator's hand-written co-location terms kept: ``helm.configure`` leaves the hub config as
it is), the pod's events end nothing (no fail fast: the spawn waits as KubeSpawner's does) and
the progress stream is KubeSpawner's.  What it adds: one hub-log line per decision ("observe:
would refuse alice's 'gpu-lab': ..."), the metrics with ``mode="observe"``, and a record of each
would-be decision in a bounded ring (:func:`observed`: pins and skips too); the would-be refusals
also go into the operator's page's history (:func:`nebari_colocate.history.record_refused`, with
``mode="observe"``).

The spawner calls :func:`decided` from ``get_pod_manifest`` and :func:`start` around KubeSpawner's
start; both take the spawner itself (KubeSpawner ships no types: ``Any``).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable
from dataclasses import asdict, dataclass
from typing import Any

from . import history, messages, metrics, refusing
from .config import MODE_OBSERVE
from .events import EventVerdict
from .fail_fast import watch_events
from .objects import JsonDict
from .placement import REFUSE, Decision
from .refusal import Refusal

__all__ = [
    "OBSERVATION_RING",
    "Observation",
    "clear",
    "decided",
    "observed",
    "record",
    "start",
]

#: the would-be decisions kept (the oldest go first): ~1 KiB each
OBSERVATION_RING = 1000


@dataclass(frozen=True)
class Observation:
    """One thing enforce would have done and observe mode did not: ``would`` is ``refuse``,
    ``pin`` (to ``node``), ``colocate`` (no node known yet), ``skip`` (no exclusive claim) or
    ``end`` (a pod event on which enforce ends the spawn at once; ``verdict`` is then the event
    verdict's reason code).  ``message`` is what the user would have read (refuse, end)."""

    at: float  # seconds since the epoch
    username: str
    server_name: str
    would: str
    verdict: str
    node: str | None
    reasons: tuple[str, ...]
    warnings: tuple[str, ...]
    message: str
    operator_line: str
    mode: str = MODE_OBSERVE

    def as_json(self) -> JsonDict:
        """The record as plain JSON (lists for the code tuples)."""
        shown = asdict(self)
        shown["reasons"], shown["warnings"] = list(self.reasons), list(self.warnings)
        return shown


_RING: deque[Observation] = deque(maxlen=OBSERVATION_RING)


def record(observation: Observation) -> None:
    """Keep ``observation`` in the ring (the oldest goes when it is full)."""
    _RING.append(observation)


def observed(since: float | None = None) -> list[Observation]:
    """The would-be decisions kept, oldest first; only those at or after ``since`` (seconds since
    the epoch) when given.  No API request: the hub's own memory."""
    return [o for o in _RING if since is None or o.at >= since]


def clear() -> None:
    """Forget every record (tests)."""
    _RING.clear()


def decided(spawner: Any, decision: Decision, pod: JsonDict) -> Observation:
    """Say in the hub log and record what enforce would do with ``spawner``'s ``pod`` on
    ``decision`` (the words the user would read when it refuses); changes nothing."""
    username, server_name = spawner.user.name, spawner.name or ""
    operator_line = messages.operator_line(decision, username=username, server_name=server_name)
    message = ""
    if decision.verdict == REFUSE:
        refusing.offer_move(spawner, decision, pod)  # the words enforce shows, its move too
        refused = refusing.refused(spawner, decision, pod)
        message = str(refused.jupyterhub_message)
        # the operator's page's 24 hours of refusals, marked as would-be ones
        history.record_refused(username, server_name, refused.refusal, mode=MODE_OBSERVE)
    observation = Observation(
        at=time.time(),
        username=username,
        server_name=server_name,
        would=messages.would(decision),
        verdict=decision.verdict,
        node=decision.node,
        reasons=tuple(sorted(decision.reasons)),
        warnings=tuple(sorted(decision.warnings)),
        message=message,
        operator_line=operator_line,
    )
    line = messages.observed_decision_line(
        decision,
        username=username,
        server_name=server_name,
        message=message,
        operator_line=operator_line,
    )
    say = spawner.log.warning if decision.verdict == REFUSE else spawner.log.info
    say(line)
    record(observation)
    return observation


def ended(spawner: Any, verdict: EventVerdict) -> Observation:
    """Say in the hub log, count and record that enforce would end ``spawner``'s spawn at once on
    its pod's events (``verdict``); the spawn goes on waiting, as KubeSpawner's does."""
    username, server_name = spawner.user.name, spawner.name or ""
    reason = verdict.reason or "unknown"
    operator_line = messages.event_operator_line(
        verdict, username=username, server_name=server_name, pod_name=spawner.pod_name
    )
    message, html = messages.event_refusal(
        verdict, spawner.name, spawner.server_display_names(), action=spawner.way_out_url()
    )
    refusal = Refusal(message, html, operator_line, event_verdict=verdict)
    history.record_refused(username, server_name, refusal, mode=MODE_OBSERVE)
    decision = spawner._colocation_decision
    observation = Observation(
        at=time.time(),
        username=username,
        server_name=server_name,
        would=messages.WOULD_END,
        verdict=reason,
        node=decision.node if decision is not None else None,
        reasons=(reason,),
        warnings=(),
        message=message,
        operator_line=operator_line,
    )
    spawner.log.warning(
        messages.observed_event_line(
            reason,
            username=username,
            server_name=server_name,
            message=message,
            operator_line=operator_line,
        )
    )
    metrics.observe_event_verdict(reason, mode=MODE_OBSERVE)
    record(observation)
    return observation


async def start(spawner: Any, start_future: Awaitable[Any]) -> Any:
    """KubeSpawner's start (``start_future``), never ended early: the pod's events are read as
    the fail fast reads them (``fail_fast_on_events``), and the first on which enforce would end
    the spawn is recorded (:func:`ended`), once."""
    started = asyncio.ensure_future(start_future)
    if not (spawner.fail_fast_on_events and spawner.events_enabled):
        return await started
    watcher = asyncio.ensure_future(watch_events(spawner, started))
    try:
        await asyncio.wait({started, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if watcher.done() and not watcher.cancelled() and watcher.exception() is None:
            verdict = watcher.result()
            if verdict is not None:
                ended(spawner, verdict)
        return await started
    finally:
        if not watcher.done():
            watcher.cancel()
