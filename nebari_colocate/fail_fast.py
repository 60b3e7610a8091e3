"""A spawn once its pod exists: this pod's events, their verdict, the fail fast and the progress
stream (docs/decisions.md, "Fail fast"; docs/surfaces.md).

The spawner's hooks (``start``, ``progress``, ``events``, ``classify_events``) call these with
the spawner itself: they read its settings, its pod reflector and event reflector, and the
decision of its check; the verdict is :func:`nebari_colocate.events.classify`'s and the words
are :mod:`nebari_colocate.messages`'.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator
from datetime import datetime, timezone
from typing import Any, NoReturn

from . import messages, metrics
from .event_format import formatted
from .events import FAIL, UNSCHEDULABLE_PINNED, EventVerdict, classify, told_in_words
from .jupyterhub import ColocationRefused, before_raising
from .late_move import late_move
from .objects import SERVERNAME_ANNOTATION, USERNAME_ANNOTATION, JsonDict
from .pod_scheduling import confirmed, read_pod, reflected_pod
from .refusing import buttons
from .seam import LateMoveSpawner

__all__ = [
    "classify_events",
    "events_of",
    "offer_late_move",
    "progress",
    "refusal_words",
    "start_failing_fast",
]

# ``spawner`` below is a ColocatingKubeSpawner (KubeSpawner ships no types: Any).


def events_of(reflector: Any, pod_name: str, last_event: Any) -> list[JsonDict]:
    """This pod's events since the spawn began, oldest first: KubeSpawner's ``events``, the
    same list, for less.  KubeSpawner sorts every event of the namespace, then keeps this
    pod's; polled by every starting spawn twice a second (the fail fast) and by its progress
    stream, in a burst of 100 spawns that sort was the largest cost on the hub's loop.  Here
    this pod's events are picked first and only they are sorted (the same key; a stable sort
    of a subsequence keeps the order KubeSpawner gives), then cut at ``last_event`` (the uid
    KubeSpawner's ``_last_event`` holds) as KubeSpawner does."""
    if not reflector:
        return []
    mine = [
        event
        for event in list(reflector.resources.values())
        if event["involvedObject"]["name"] == pod_name
    ]
    mine.sort(key=lambda event: event["lastTimestamp"] or event["eventTime"])
    if last_event:
        for i in range(len(mine) - 1, -1, -1):
            if mine[i]["metadata"]["uid"] == last_event:
                return mine[i + 1 :]
    return mine


def own_servers(spawner: Any) -> dict[str, str]:
    """Pod name -> the name the user knows for each of this user's pods (for Multi-Attach
    messages): the display name, else the server name ("" for the default server)."""
    own = {}
    names = spawner.server_display_names()
    for pod in spawner._reflector_pods() or []:
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        if annotations.get(USERNAME_ANNOTATION) == spawner.user.name:
            server = annotations.get(SERVERNAME_ANNOTATION, "")
            own[pod["metadata"]["name"]] = names.get(server) or server
    return own


def own_server_names(spawner: Any) -> dict[str, str]:
    """Pod name -> server name ("" the default server) of each of this user's server pods
    (what the way out of a spawn ended by pod events stops)."""
    own = {}
    for pod in spawner._reflector_pods() or []:
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        if annotations.get(USERNAME_ANNOTATION) == spawner.user.name:
            own[pod["metadata"]["name"]] = annotations.get(SERVERNAME_ANNOTATION, "")
    return own


def server_pod_names(spawner: Any) -> set[str] | None:
    """The names of the namespace's JupyterHub server pods (the pod reflector's), or None
    while it is not synced."""
    pods = spawner._reflector_pods()
    if pods is None:
        return None
    return {(p.get("metadata") or {}).get("name", "") for p in pods}


def pod_names_for_browser(spawner: Any) -> tuple[set[str], set[str]]:
    """(the user's own pod names, the other pod names this hub knows): what the progress
    stream may name, and what it must not (:func:`messages.browser_event`)."""
    own = {spawner.pod_name, *own_servers(spawner)}
    known = set(server_pod_names(spawner) or ())
    decision = spawner._colocation_decision
    if decision is not None:
        known.update(decision.holders)
    return own, known - own


def classify_events(spawner: Any, pod: JsonDict | None = None) -> EventVerdict:
    """The verdict on this pod's events so far (KubeSpawner's ``events``) and on the pod
    itself (``pod``, else the pod reflector's: :mod:`nebari_colocate.pod_scheduling`).

    Whether it fails never depends on the user's other pods, only its words and its way out
    do: so the pod maps (three passes over the pod reflector) are built only for a verdict
    that fails, which is rare, and not on every poll of every starting spawn."""
    decision = spawner._colocation_decision
    events = spawner.events
    common: dict[str, Any] = {
        "pinned_node": decision.node if decision is not None else None,
        "now": datetime.now(timezone.utc),
        "unschedulable_grace_seconds": spawner.unschedulable_grace_seconds,
        "image_pull_grace_seconds": spawner.image_pull_grace_seconds,
        "detach_grace_seconds": spawner.detach_grace_seconds,
        "wants_gpu": spawner._requests_premium,
        "server_name": spawner.name or "",
        "pinned_holders": (
            decision.holders if decision is not None and decision.pinned_by == "holders" else ()
        ),
        "pod": pod or reflected_pod(spawner.pod_reflector, spawner.namespace, spawner.pod_name),
        "created": spawner._pod_created_at,
        "unscheduled_timeout_seconds": spawner.colocation_unscheduled_timeout,
        "preemption_grace_seconds": spawner.preemption_grace_seconds,
    }
    verdict = classify(events, **common)
    if verdict.action != FAIL:
        return verdict
    verdict = classify(
        events,
        **common,
        own_servers=own_servers(spawner),
        servers=server_pod_names(spawner),
        own_server_names=own_server_names(spawner),
    )
    if decision is None or common["pod"] is None:
        return verdict
    return offer_late_move(spawner, verdict, common["pod"], decision.claims)


def offer_late_move(
    spawner: LateMoveSpawner, verdict: EventVerdict, pod: JsonDict, claims: list[str]
) -> EventVerdict:
    """``verdict`` with the move of the whole set beside its way out when it ends the spawn of
    ``pod`` (mounting ``claims``) as ``unschedulable-pinned`` for lack of room only
    (:func:`nebari_colocate.late_move.late_move`), judged on every node the live view knows, as
    the check's refusal is (:func:`nebari_colocate.refusing.offer_move`); ``verdict`` as it is
    when the view cannot tell the room on every node."""
    if verdict.code != UNSCHEDULABLE_PINNED or verdict.way_out is None:
        return verdict
    try:
        state = spawner.whole_set_state(pod)
        if state is None:
            return verdict
        return late_move(
            verdict,
            pod,
            state,
            claims=claims,
            policy=spawner.colocation_policy(),
            username=spawner.user.name,
            label_value=spawner.colocation_label_value,
        )
    except Exception:  # the refusal stands without its second way out
        spawner.log.exception("colocate: the move of the whole set could not be judged")
        return verdict


async def watch_events(spawner: Any, start_future: asyncio.Future[Any]) -> EventVerdict | None:
    """Poll the event reflector until the start finishes or a verdict says fail (one drawn
    from the pod's silence confirmed by a read of the pod by name)."""
    while not start_future.done():
        if spawner.event_reflector is not None and spawner._colocation_decision is not None:
            verdict = spawner.classify_events()
            if verdict.action == FAIL:
                found = await confirmed(
                    verdict,
                    lambda: read_pod(
                        spawner.api,
                        spawner.namespace,
                        spawner.pod_name,
                        spawner.k8s_api_request_timeout,
                    ),
                    lambda pod: spawner.classify_events(pod),
                )
                if found is not None:
                    return found
        await asyncio.sleep(spawner.event_poll_interval)
    return None


async def start_failing_fast(spawner: Any, start_future: asyncio.Future[Any]) -> Any:
    """KubeSpawner's start (``start_future``), ended early when the pod's events say it cannot
    succeed (``fail_fast_on_events``)."""
    if not (spawner.fail_fast_on_events and spawner.events_enabled):
        return await start_future
    watcher = asyncio.ensure_future(watch_events(spawner, start_future))
    try:
        await asyncio.wait({start_future, watcher}, return_when=asyncio.FIRST_COMPLETED)
        verdict = watcher.result() if watcher.done() else None
        if verdict is None:
            return await start_future
    finally:
        if not watcher.done():
            watcher.cancel()
    return await end_hopeless_spawn(spawner, start_future, verdict)


async def end_hopeless_spawn(
    spawner: Any, start_future: asyncio.Future[Any], verdict: EventVerdict
) -> NoReturn:
    start_future.cancel()
    with contextlib.suppress(BaseException):
        await start_future
    spawner._release_colocation_lock()
    log_message = messages.event_operator_line(
        verdict, username=spawner.user.name, server_name=spawner.name, pod_name=spawner.pod_name
    )
    spawner.log.warning(log_message)
    metrics.observe_event_verdict(verdict.reason or "unknown")
    try:
        await spawner.stop(now=True)
    except Exception:
        spawner.log.exception("colocate: could not delete pod %s", spawner.pod_name)
    message, message_html = refusal_words(spawner, verdict)
    refusal = ColocationRefused(message, message_html, log_message, event_verdict=verdict)
    spawner._remember(refusal)
    before_raising(spawner, refusal)
    raise refusal


def refusal_words(spawner: Any, verdict: EventVerdict) -> tuple[str, str]:
    """(text, html) of the refusal that ends ``spawner``'s spawn on ``verdict``: its words, the
    way out's button and, when the verdict carries one, the move's (as the check's refusal
    shows them: :func:`nebari_colocate.refusing.buttons`)."""
    names = spawner.server_display_names()
    button = buttons(spawner, verdict.way_out, names)
    return messages.event_failure(verdict, spawner.name, names, button=button)


def verdict_said(spawner: Any, verdict: EventVerdict | None) -> tuple[str, str, JsonDict | None]:
    """(text, html, the refusal's fields) the progress stream says of ``verdict``: for a
    verdict that ends the spawn, the very words and HTML the refusal carries (the page keeps
    one of them) and its ``way_out`` (the refusal's own once the fail fast has ended the spawn:
    its move was judged while the pod still was there); while the spawn waits, the plain words
    and the technical ones under Details; ("", "", None) when there is nothing to say."""
    if verdict is None:
        return "", "", None
    if verdict.action != FAIL:
        return messages.event_text(verdict), messages.event_progress_html(verdict), None
    kept = spawner.colocation_failure
    if kept is not None and kept.event_verdict is not None:
        return kept.message, kept.html, {"way_out": kept.way_out_json()}
    text, shown = refusal_words(spawner, verdict)
    return text, shown, {"way_out": verdict.way_out.as_json() if verdict.way_out else None}


async def progress(spawner: Any) -> AsyncGenerator[dict[str, Any], None]:
    """Progress of the spawn for the spawn-pending page, in plain language.

    Like KubeSpawner's, it reports this pod's events until the start finishes, but it tracks
    events by uid (KubeSpawner's index into a time-sorted list skips an event that sorts
    before one already shown, e.g. an autoscaler event with a coarser timestamp than the
    scheduler's) and tells scheduling, autoscaler, attach and image events in words.  The
    refusal is said once; from it on, every event carries its ``way_out`` (docs/surfaces.md,
    "The progress stream, for other front ends").
    """
    if not spawner.events_enabled:
        return
    await spawner._start_watching_events()
    seen: set[object] = set()  # uids, or ids of events without one
    progress = 0.0
    last_text = ""
    started = time.perf_counter()
    last_patience = 0.0
    refused: JsonDict = {}  # from the refusal on: the fields every event carries (way_out)

    def said(event: dict[str, Any]) -> dict[str, Any]:
        return {**event, **refused}

    while True:
        start_future = spawner._start_future
        finished = start_future is not None and start_future.done()
        elapsed = time.perf_counter() - started
        # The patience-message traits may be absent (a branch without them): then no message.
        threshold = getattr(spawner, "slow_spawn_message_threshold", 0) or 0
        if (
            0 < threshold <= elapsed
            and elapsed >= last_patience + spawner.slow_spawn_message_frequency
        ):
            last_patience = elapsed
            text = spawner.slow_spawn_message.format(seconds=int(elapsed)).strip()
            yield said({"message": text})
        held = spawner._held_refusal
        if held is not None and not refused:
            # for front ends other than JupyterHub's pages (docs/surfaces.md)
            refused = {"way_out": held.way_out}
            last_text = held.jupyterhub_message
            yield said(
                {
                    "progress": 100,
                    "message": held.jupyterhub_message,
                    "html_message": held.jupyterhub_html_message,
                }
            )
        verdict = spawner.classify_events() if spawner._colocation_decision is not None else None
        words, words_html, ends = verdict_said(spawner, verdict)
        if ends is not None and not refused:
            refused = ends
        own_pods, other_pods = spawner._pod_names_for_browser()
        for event in spawner.events:
            uid = (event.get("metadata") or {}).get("uid") or id(event)
            if uid in seen:
                continue
            seen.add(uid)
            progress += (90 - progress) / 3
            # JupyterHub sends every field to the browser: never another user's pod names.
            shown = messages.browser_event(event, own_pods, other_pods)
            text = messages.progress_line(shown, words)
            # an event not told in our words: the operator's formatter, where KubeSpawner has one
            own = None if words and told_in_words(shown) else await formatted(spawner, shown)
            if own is not None:
                text = own["message"]
            if text == last_text:
                continue
            last_text = text
            line = {"progress": int(progress), "raw_event": shown, "message": text, **(own or {})}
            if own is None and text == words and words_html:
                line["html_message"] = words_html
            yield said(line)
        if words and words != last_text:
            last_text = words
            line = {"progress": int(progress), "message": words}
            if words_html:
                line["html_message"] = words_html
            yield said(line)
        if finished:
            break
        await asyncio.sleep(1)
