"""SpawnCheck: one spawn's check, from the state gathered to the decision told.

What ``ColocatingKubeSpawner.colocation_decide`` does, without KubeSpawner: gather the state
(the live view, or direct reads while it is not live), decide, confirm an unpinned decision by
the API, take a pinned decision again on the pod as admitted (its own dry run, or a model of its
shape), read a refusal's holders by name, and take the safe side on any error or timeout.  It
receives what it needs (the view, the API client and namespace, the settings, a logger), so it
is tested without a spawner (``tests/unit/test_check.py``); the spawner builds one per check
(docs/decisions.md, "As new as the API" and "One per shape").
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from jupyterhub.utils import exponential_backoff

from . import messages, metrics
from .admission import (
    CONTEXT_FIELDS,
    FIELDS,
    AdmissionModels,
    as_admitted,
    model_from_created,
    shape_key,
)
from .config import MODE_ENFORCE
from .faults import connection_failed
from .informer import HubWatches
from .known_modes import KnownModes
from .kubeapi import admitted_pod
from .objects import JsonDict, meta, pod_claims
from .placement import COLOCATE, REFUSE, Decision, Policy, decide, safe_side
from .state import ClusterState
from .view import ClusterView, DirectReader, ViewNotLive

__all__ = [
    "CheckSettings",
    "LateCheck",
    "Lesson",
    "SpawnCheck",
    "admission_lesson",
    "learn_admission",
    "needs_confirmation",
    "placement_fingerprint",
    "told",
]


@dataclass(frozen=True)
class CheckSettings:
    """The settings a check reads (the spawner's traits of the same meaning)."""

    #: ``colocation_check_timeout``: seconds for the whole check, then the safe side
    check_timeout: float
    #: ``colocation_dry_run_reuse_seconds``: how long a shape's dry run stands for its next pod
    dry_run_reuse_seconds: float
    #: the claims the configuration says are exclusive (the hub's own home claim)
    exclusive_by_config: tuple[str, ...] = ()


@dataclass
class LateCheck:
    """The rest of a check, sent and not yet awaited (``admit_later``): its task (the decision,
    the dry run's round trip, whether it took the safe side), and the seconds the check took
    till then."""

    task: asyncio.Future[tuple[Decision, float, bool]]
    check_seconds: float


def needs_confirmation(decision: Decision) -> bool:
    """An unpinned decision on an exclusive claim: the view is only as new as the last event
    it applied, and a holder created a moment ago (or a watch gone silent) is not in it yet
    (docs/decisions.md, "As new as the API")."""
    return decision.verdict == COLOCATE and decision.node is None


def claim_modes(
    view: ClusterView, namespace: str, pod: JsonDict, known: KnownModes
) -> dict[str, list[str]]:
    """What is known of the access modes of ``pod``'s claims without asking the API: the live
    view's last known claims, and what earlier checks read (which wins: it is what a completed
    read said)."""
    claims = pod_claims(pod)
    last_known = {
        c: list((pvc.get("spec") or {}).get("accessModes") or [])
        for c in claims
        if (pvc := view.pvcs.items.get(f"{namespace}/{c}")) is not None
    }
    return {**last_known, **known.of(namespace, claims)}


class SpawnCheck:
    """The check of one spawn's pod ``pod_name`` in ``namespace``.

    ``reflector_pods`` gives the pod reflector's pods (None while it has not listed): what the
    safe side knows besides the view.  After :meth:`decide`, ``dry_runs_made`` and
    ``shape_key`` say what it did (the spawner's timings and its admission lesson read them).
    """

    def __init__(
        self,
        view: ClusterView,
        api_client: Any,
        namespace: str,
        pod_name: str,
        *,
        policy: Policy,
        settings: CheckSettings,
        known_modes: KnownModes,
        log: logging.Logger | logging.LoggerAdapter[Any],
        reflector_pods: Callable[[], list[JsonDict] | None] = lambda: None,
    ) -> None:
        self.view = view
        self.api_client = api_client
        self.namespace = namespace
        self.pod_name = pod_name
        self.policy = policy
        self.settings = settings
        self.known_modes = known_modes
        self.log = log
        self.reflector_pods = reflector_pods
        #: dry runs this check sent (a reused dry run makes none)
        self.dry_runs_made = 0
        #: the admission shape key this check computed (None: it computed none)
        self.shape_key: str | None = None

    async def decide(
        self, pod: JsonDict, *, admit_later: bool = False
    ) -> tuple[Decision, float, float, bool, LateCheck | None]:
        """The decision, the seconds gathering and deciding, the dry run's round trip, whether
        the safe side was taken, and the rest of the check when ``admit_later`` left it sent
        and not awaited (then the decision is the one from memory, not yet told).

        An unpinned decision from a view that is not fresh is confirmed by the API
        (:meth:`confirmed_unpinned`); a pinned decision is taken again on the pod as admitted
        (server-side dry run), so RuntimeClass overhead, LimitRange defaults and webhooks are
        judged as the scheduler will see them.  With ``admit_later`` these requests, for a
        decision that lets the pod start, are sent and not awaited: the spawner awaits them
        (``LateCheck.task``) after KubeSpawner started its reflectors and created the PVC
        meanwhile, and takes the decision again on their answers.  A refusal is always taken on
        the answers before it is told."""
        view = self.view
        started = time.perf_counter()
        deadline = started + self.settings.check_timeout
        policy = self.policy
        try:
            # From memory when the view is live: no await, so no other task (a reflector's
            # re-list, say) runs inside the check and nothing changes the view meanwhile.
            remembered = view.state_now(pod)
            if remembered is not None:
                state, from_view = remembered, True
            else:
                state, from_view = await asyncio.wait_for(
                    self.state(pod), timeout=self.settings.check_timeout
                )
            self.known_modes.learn(self.namespace, pod_claims(pod), state)
            decision = decide(pod, state, policy)
        except Exception as exc:
            return self.safe_side(pod, exc), time.perf_counter() - started, 0.0, True, None
        confirm = from_view and needs_confirmation(decision)
        if admit_later and decision.verdict != REFUSE and (confirm or decision.node is not None):
            rest = self.finish(pod, state, decision, deadline, confirm, True)
            late = LateCheck(asyncio.ensure_future(rest), time.perf_counter() - started)
            return decision, late.check_seconds, 0.0, False, late
        decision, round_trip, safe = await self.finish(
            pod, state, decision, deadline, confirm, from_view
        )
        elapsed = time.perf_counter() - started
        return decision, elapsed - round_trip, round_trip, safe, None

    async def state(self, pod: JsonDict) -> tuple[ClusterState, bool]:
        """The state from the live view, or from direct reads while it is not live; and whether
        it came from the view."""
        try:
            first_sync = self.settings.check_timeout / 2
            return await self.view.state_for(pod, first_sync=first_sync), True
        except ViewNotLive as exc:
            self.log.warning(
                "colocate: the live view of namespace %s is not live (%s); reading the API "
                "directly for %s",
                self.namespace,
                exc,
                self.pod_name,
            )
            metrics.observe_view_fallback()
            return await self.direct_state(pod), False

    async def direct_state(self, pod: JsonDict) -> ClusterState:
        return await DirectReader(self.api_client, self.namespace).state_for(pod)

    async def confirmed_unpinned(self, pod: JsonDict, decision: Decision) -> ClusterState | None:
        """An unpinned decision that needs it (:func:`needs_confirmation`) is confirmed by one
        namespaced LIST of pods, sent after the check began (shared by the checks that confirm
        at once), and of VolumeAttachments when the view had no event for a few seconds; None
        when they agree, else the state read directly."""
        if not needs_confirmation(decision):
            return None
        view = self.view
        if await view.confirm_unpinned(pod, decision.claims, attachments=not view.fresh()):
            return None
        metrics.observe_view_fallback()
        return await self.direct_state(pod)

    async def finish(
        self,
        pod: JsonDict,
        state: ClusterState,
        decision: Decision,
        deadline: float,
        confirm: bool,
        from_view: bool,
    ) -> tuple[Decision, float, bool]:
        """The rest of a check after the decision from memory: its confirmation (``confirm``),
        the dry run of a pinned pod, and a refusal's holders read by name (``from_view``),
        each deciding again; the decision, the dry run's round trip, and whether the safe side
        was taken."""
        policy = self.policy
        round_trip = 0.0
        try:
            # (asked first: before Python 3.12 ``wait_for`` costs a trip through the loop's
            # queue even when nothing is confirmed, and in a burst that trip is long)
            if confirm:
                confirmed = await asyncio.wait_for(
                    self.confirmed_unpinned(pod, decision),
                    timeout=max(deadline - time.perf_counter(), 0.01),
                )
                if confirmed is not None:
                    state = confirmed
                    decision = decide(pod, state, policy)
            decision, round_trip = await self.decided_as_admitted(pod, state, decision, deadline)
            if decision.verdict == REFUSE and from_view:
                # Told only on a view as new as the API: its holders, read by name, are still
                # there; else (deleted a moment ago) the API is read directly and decides.
                current = await asyncio.wait_for(
                    self.view.holders_current(decision.holder_pods),
                    timeout=max(deadline - time.perf_counter(), 0.01),
                )
                if not current:
                    metrics.observe_view_fallback()
                    state = await asyncio.wait_for(
                        self.direct_state(pod), max(deadline - time.perf_counter(), 0.01)
                    )
                    decision = decide(pod, state, policy)
                    decision, more = await self.decided_as_admitted(pod, state, decision, deadline)
                    round_trip += more
        except Exception as exc:
            return self.safe_side(pod, exc), round_trip, True
        return decision, round_trip, False

    async def decided_as_admitted(
        self, pod: JsonDict, state: ClusterState, decision: Decision, deadline: float
    ) -> tuple[Decision, float]:
        """A pinned decision taken again on the pod as admitted, and the dry run's round trip.
        A model of the pod's shape is never the only ground of a refusal: what admission reads
        may have changed since (a LimitRange, a RuntimeClass's overhead), so a refusal on it is
        judged again on the pod's own dry run (docs/decisions.md, "One per shape")."""
        if decision.node is None:
            return decision, 0.0
        before = time.perf_counter()
        admitted, modelled = await self.admitted(pod, deadline)
        if admitted is not None:
            decision = decide(admitted, state, self.policy)
        if modelled and decision.verdict == REFUSE:
            admitted, _ = await self.admitted(pod, deadline, fresh=True)
            decision = decide(pod if admitted is None else admitted, state, self.policy)
        return decision, time.perf_counter() - before

    async def admitted(
        self, pod: JsonDict, deadline: float, *, fresh: bool = False
    ) -> tuple[JsonDict | None, bool]:
        """The pod after admission, or None (logged) when refused, and whether it came from a
        model (another pod's dry run, or a created pod: not this pod's own): as the last dry run
        of a pod of the same shape admitted it (``colocation_dry_run_reuse_seconds``), else (or
        ``fresh``) by a dry run of its own, which the checks of the same shape that ask
        meanwhile wait for."""
        reuse = self.settings.dry_run_reuse_seconds
        if reuse <= 0:
            self.dry_runs_made += 1
            return await self.admitted_alone(pod, deadline), False
        models = HubWatches.of_running_loop(self.api_client).admission
        key = self.shape_key = shape_key(pod)
        if fresh:
            return await self.admitted_anew(models, key, pod, deadline), False
        model = models.model(key, reuse)
        pending = models.pending(key) if model is None else None
        if pending is not None:
            remaining = deadline - time.perf_counter()
            with contextlib.suppress(Exception):
                model = await asyncio.wait_for(asyncio.shield(pending), max(remaining, 0.001))
        if model is not None:
            models.reused += 1
            metrics.observe_dry_run("reused")
            return as_admitted(pod, model), True
        return await self.admitted_anew(models, key, pod, deadline), False

    async def admitted_anew(
        self, models: AdmissionModels, key: str, pod: JsonDict, deadline: float
    ) -> JsonDict | None:
        """A dry run of ``pod``'s own, kept as its shape's model."""
        future = models.begin(key)
        self.dry_runs_made += 1
        admitted: JsonDict | None = None
        try:
            admitted = await self.admitted_alone(pod, deadline)
        finally:
            models.end(key, future, admitted)
        return admitted

    async def admitted_alone(self, pod: JsonDict, deadline: float) -> JsonDict | None:
        """The pod after admission (server-side dry run), or None (logged) when refused."""
        remaining = deadline - time.perf_counter()
        try:
            if remaining <= 0:
                raise asyncio.TimeoutError()
            admitted = await asyncio.wait_for(self.dry_run(pod, remaining), timeout=remaining)
        except Exception as exc:
            outcome = "failed" if isinstance(exc, asyncio.TimeoutError) else "refused"
            metrics.observe_dry_run(outcome)
            self.log.warning(
                "colocate: dry run of pod %s %s (%s); judging the manifest as written",
                self.pod_name,
                "timed out" if outcome == "failed" else "refused",
                f"{type(exc).__name__}: {exc}",
            )
            return None
        metrics.observe_dry_run("admitted")
        return admitted

    async def dry_run(self, pod: JsonDict, seconds: float) -> JsonDict:
        """``admitted_pod``, tried again on a connection error (an API server restart) for up
        to ``seconds``."""

        async def attempt() -> JsonDict | None:
            try:
                answer: JsonDict = await admitted_pod(self.api_client, self.namespace, pod)
            except Exception as exc:
                if not connection_failed(exc):
                    raise
                self.log.info(
                    "colocate: %s for %s: the API server could not be reached (%s: %s); "
                    "trying again",
                    "dry run",
                    self.pod_name,
                    type(exc).__name__,
                    exc,
                )
                return None
            return answer

        admitted: JsonDict = await exponential_backoff(
            attempt,
            f"dry run of pod {self.pod_name}: the API server could not be reached",
            start_wait=0.05,
            max_wait=0.5,
            timeout=seconds,
        )
        return admitted

    def safe_side(self, pod: JsonDict, exc: Exception) -> Decision:
        """The decision when the state could not be gathered (an error, or the timeout)."""
        if isinstance(exc, asyncio.TimeoutError):
            timeout = self.settings.check_timeout
            why = f"state not gathered within {timeout}s (colocation_check_timeout)"
        else:
            why = f"state not gathered: {type(exc).__name__}: {exc}"
        # A timeout is expected under load; anything else is a bug or an API surprise.
        self.log.warning(
            "colocate: %s; taking the safe side",
            why,
            exc_info=not isinstance(exc, asyncio.TimeoutError),
        )
        known = [*self.view.known_pods(pod), *(self.reflector_pods() or [])]
        return safe_side(
            pod,
            known,
            why,
            namespace=self.namespace,
            known_modes=claim_modes(self.view, self.namespace, pod, self.known_modes),
            exclusive_by_config=list(self.settings.exclusive_by_config),
        )


# --------------------------------------------------------------------------------------------------
# a decision told; what the check is kept for, and what a created pod teaches its shape


def told(
    decision: Decision,
    check: float,
    waited: float,
    round_trip: float,
    dry_runs: int,
    *,
    safe: bool,
    log: logging.Logger | logging.LoggerAdapter[Any],
    username: str,
    server_name: str,
    mode: str = MODE_ENFORCE,
) -> dict[str, float]:
    """Count and log a decision of the server ``server_name`` of user ``username``:
    ``check`` seconds gathering and deciding, and ``waited`` more waiting for what was sent and
    not awaited (``round_trip``: the dry run's own duration, or the wait for another check's);
    its timings (``colocation_timings``: benchmarks read them).  In observe mode (``mode``) the
    decision is counted with its mode, and logged by :mod:`nebari_colocate.observe_mode` with
    what enforce would have done."""
    elapsed = check + waited
    metrics.observe_decision(decision, elapsed, safe_side=safe, mode=mode)
    if mode == MODE_ENFORCE:
        line = messages.operator_line(decision, username=username, server_name=server_name)
        say = log.warning if decision.verdict == REFUSE or decision.warnings else log.info
        say("%s seconds=%.3f dry_run_seconds=%.3f", line, elapsed, round_trip)
    return {
        "check": check,
        "dry_run": waited,
        "dry_run_round_trip": round_trip,
        "dry_runs_made": float(dry_runs),
    }


def placement_fingerprint(pod: JsonDict) -> str:
    """The parts of a manifest the decision depends on, and every field of its admission shape
    (:func:`nebari_colocate.admission.shape_key`): equal fingerprints, equal shapes."""
    spec = pod.get("spec") or {}
    relevant = {k: spec.get(k) for k in _FINGERPRINT_FIELDS}
    relevant["namespace"] = (pod.get("metadata") or {}).get("namespace")
    relevant["name"] = (pod.get("metadata") or {}).get("name")
    return json.dumps(relevant, sort_keys=True, default=str)


_FINGERPRINT_FIELDS = tuple(
    dict.fromkeys(("volumes", "containers", "initContainers", *FIELDS, *CONTEXT_FIELDS))
)


@dataclass(frozen=True)
class Lesson:
    """What a pod about to be created may teach its shape's admission model: the shape, the
    pod as written and as sent, and the uid of the pod of that name the reflector held before
    (an earlier start's, not deleted yet), which is not it."""

    key: str
    written: JsonDict
    sent: JsonDict
    uid_before: str | None


def admission_lesson(
    api_client: Any,
    key: str,
    reuse: float,
    written: JsonDict,
    sent: JsonDict,
    before: JsonDict | None,
) -> Lesson | None:
    """The lesson of the pod ``sent`` (``written`` before the decision was applied) while its
    shape ``key`` has no model (``before``: the pod of that name the reflector holds now)."""
    if not HubWatches.of_running_loop(api_client).admission.wanted(key, reuse):
        return None
    return Lesson(key, written, sent, meta(before).get("uid") if before else None)


def learn_admission(
    api_client: Any,
    lesson: Lesson,
    created: Any,
    reuse: float,
    log: logging.Logger | logging.LoggerAdapter[Any],
    pod_name: str,
) -> None:
    """Learn the shape's model from the pod ``created`` as the watch brought it."""
    if not isinstance(created, dict) or meta(created).get("deletionTimestamp"):
        return
    if meta(created).get("uid") == lesson.uid_before:
        return  # the pod of an earlier start, not deleted yet: not the one sent
    model = model_from_created(created, lesson.written, lesson.sent)
    if model is None:
        log.debug(
            "colocate: admission changed the affinity of pod %s; its shape is not learnt",
            pod_name,
        )
        return
    models = HubWatches.of_running_loop(api_client).admission
    models.learn(lesson.key, model, reuse)
