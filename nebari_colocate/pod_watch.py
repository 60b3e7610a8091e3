"""KubeSpawner's pod reflector on the live view's watch, for the spawner's hooks: made (or
KubeSpawner's own when the view may not watch the pods), replaced, and waited on after a create
or a delete (docs/decisions.md, "One pod watch" and "Told when the pod runs").

The reflector itself is :class:`nebari_colocate.shared_reflector.SharedPodReflector`; these
functions do what ``ColocatingKubeSpawner._start_watching_pods`` and its create and delete
overrides ask, with the spawner itself (KubeSpawner ships no types: ``Any``) and KubeSpawner's
own ``_start_watching_pods`` (``stock``) passed in.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from .config import POD_WATCH_FIRST_LIST_SECONDS
from .informer import HubWatches
from .objects import JsonDict, meta
from .shared_reflector import PodWatchUnavailable, SharedPodReflector

__all__ = ["pod_started", "start_watching_pods", "until_pod_settles"]

#: KubeSpawner's own ``_start_watching_pods`` of the spawner asking (``super()``'s)
Stock = Callable[..., Awaitable[Any]]

#: the background replacements of closed shared reflectors, by reflector key
_closed_replacements: dict[Any, asyncio.Future[Any]] = {}


async def start_watching_pods(spawner: Any, stock: Stock, *, replace: bool = False) -> Any:
    """The shared pod reflector of ``spawner``'s namespace: the one in use (awaiting its first
    LIST), or a new one (``replace``, or none yet)."""
    key = spawner._get_reflector_key("pods")
    reflectors = type(spawner).reflectors  # KubeSpawner's class-level dict, never redefined
    current = reflectors.get(key)
    if isinstance(current, SharedPodReflector) and current.closed and not replace:
        # Its watches were stopped: it would never change again.  Its successor lists in
        # the background (a frozen API must not hold the spawn here: KubeSpawner's own
        # reflector would not); till then this one answers, and the pods a start or a
        # stop waits on are read by name (its watch counts as broken).
        _replace_closed_reflector(spawner, stock, key, current)
        return current
    if current is not None and not replace:
        if not current.first_load_future.done():
            await current.first_load_future
        return reflectors.get(key, current)
    return await _new_shared_reflector(spawner, stock, key, current, replace=replace)


def _replace_closed_reflector(
    spawner: Any, stock: Stock, key: Any, closed: SharedPodReflector
) -> None:
    running = _closed_replacements.get(key)
    if running is not None and not running.done():
        return
    task = asyncio.ensure_future(
        _new_shared_reflector(spawner, stock, key, closed, replace=True, background=True)
    )
    replacements = _closed_replacements
    replacements[key] = task

    def done(t: asyncio.Future[Any]) -> None:
        if replacements.get(key) is t:
            del replacements[key]  # (the next closed one starts its own)
        _ = t.cancelled() or t.exception()  # retrieved: logged where raised

    task.add_done_callback(done)


async def _new_shared_reflector(
    spawner: Any, stock: Stock, key: Any, current: Any, *, replace: bool, background: bool = False
) -> Any:
    """A shared reflector in place of ``current``: registered at once (the spawners that
    ask meanwhile await its first LIST, as with KubeSpawner's), or with ``background``
    only once it has listed, and only if ``current`` is still the one in use."""
    reflectors = type(spawner).reflectors
    hub = HubWatches.of_running_loop(spawner.api.api_client)
    if spawner.namespace and not spawner.enable_user_namespaces:
        hub.namespace(spawner.namespace).stale_after = spawner.colocation_watch_stale_seconds
    reflector = SharedPodReflector(
        hub,
        None if spawner.enable_user_namespaces else spawner.namespace,
        {"component": spawner.component_label},
    )
    if not background:
        reflectors[key] = reflector
    if replace and isinstance(current, SharedPodReflector):
        current.relist()  # KubeSpawner replaces a reflector that seems disconnected
    try:
        await reflector.start(timeout=POD_WATCH_FIRST_LIST_SECONDS)
        if background:
            if reflectors.get(key) is not current:
                await reflector.stop()  # replaced meanwhile by another way
                return reflectors.get(key)
            reflectors[key] = reflector
    except PodWatchUnavailable as exc:
        spawner.log.info(
            "colocate: the live view may not watch the pods (%s); KubeSpawner watches them",
            exc,
        )
        return await _stock_pod_reflector(stock, reflector)
    except BaseException as exc:
        # as KubeSpawner's own: the first LIST failed; the next call tries again
        if reflectors.get(key) is reflector:
            del reflectors[key]
        await reflector.stop()
        reflector.failed(exc)
        if background and not isinstance(exc, asyncio.CancelledError):
            spawner.log.warning(
                "colocate: the pod reflector on the live view could not list again (%s: "
                "%s); the next start, poll or stop tries again",
                type(exc).__name__,
                exc,
            )
            return current
        raise
    reflector.loaded()
    if current is not None and current is not reflector:
        await current.stop()
    return reflector


async def _stock_pod_reflector(stock: Stock, shared: SharedPodReflector) -> Any:
    """KubeSpawner's own pod reflector in place of ``shared``; spawners awaiting
    ``shared``'s first load go on once it has loaded (or failed)."""
    try:
        own = await stock(replace=True)
    except BaseException as exc:
        shared.failed(exc)
        raise
    await shared.stop()
    shared.loaded()
    return own


async def until_pod_settles(
    spawner: Any, settled: Callable[[JsonDict | None], bool], what: str
) -> None:
    """After the create (or the delete) of this server's pod, wait until the shared pod
    reflector shows it ``settled`` (started: running, or failed, or ended, or being deleted;
    gone), woken by the pod's own changes; KubeSpawner's wait for the same, next, finds it
    at its first look.  KubeSpawner's wait alone looks with a backoff of full jitter, up to
    5 s apart: the server was told running a second or more after its pod ran, on average
    (docs/decisions.md, "Told when the pod runs").  After ``start_timeout`` it ends as
    KubeSpawner's own wait ends (the reflector replaced when the pod never showed up, then
    ``TimeoutError`` with KubeSpawner's words).  With KubeSpawner's own reflector
    (``colocation_share_pod_watch`` off, or not possible) nothing changes."""
    reflector = spawner.pod_reflector
    if not isinstance(reflector, SharedPodReflector):
        return
    key = f"{spawner.namespace}/{spawner.pod_name}"
    if await reflector.wait_for(key, settled, spawner.start_timeout):
        return
    if reflector.closed or reflector.stopped:
        # replaced meanwhile (another spawn's timeout, a fallback to KubeSpawner's own):
        # not this pod's timeout; KubeSpawner's wait goes on, on the reflector in use
        return
    if what == "start" and key not in reflector.pods:
        spawner.log.error("Pod %s never showed up in reflector, restarting pod reflector", key)
        await spawner._start_watching_pods(replace=True)
    elif what == "stop":
        spawner.log.error("Pod %s did not disappear, restarting pod reflector", key)
        await spawner._start_watching_pods(replace=True)
    done = "start" if what == "start" else "disappear"
    raise asyncio.TimeoutError(f"pod {key} did not {done} in {spawner.start_timeout} seconds!")


def pod_started(spawner: Any, pod: JsonDict | None) -> bool:
    """Whether KubeSpawner's wait for a started pod would end on ``pod`` (it runs), or never
    will (it failed, it ended, it is being deleted)."""
    if pod is None:
        return False
    if meta(pod).get("deletionTimestamp"):
        return True
    phase = (pod.get("status") or {}).get("phase")
    if phase in ("Failed", "Succeeded"):
        return True
    try:
        return bool(spawner.is_pod_running(pod))
    except (KeyError, TypeError):  # a pod without the status fields KubeSpawner reads yet
        return False


def _present(pod: JsonDict | None) -> bool:
    return pod is not None


async def visible_in(
    reflector: SharedPodReflector, key: str, start: asyncio.Future[Any], seconds: float
) -> bool:
    """Whether the pod ``key`` showed up in the shared reflector before the start ``start``
    ended and within ``seconds``."""
    visible = asyncio.ensure_future(reflector.wait_for(key, _present, seconds))
    try:
        await asyncio.wait({visible, start}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not visible.done():
            visible.cancel()
    shown = visible.done() and not visible.cancelled() and visible.exception() is None
    return bool(shown and visible.result())


async def once_visible(spawner: Any, learn: Callable[[Any], None]) -> None:
    """Return once ``spawner``'s new pod is in its pod reflector (and in the live view while it
    is live), or its start ended, or after the retry timeout; ``learn`` is given the pod as the
    reflector shows it, when it showed."""
    key = f"{spawner.namespace}/{spawner.pod_name}"
    deadline = time.monotonic() + spawner.k8s_api_request_retry_timeout
    reflector = spawner.pod_reflector
    if isinstance(reflector, SharedPodReflector) and spawner._start_future is not None:
        # the view's store is the reflector's: woken by the pod's ADDED, not polled
        seconds = spawner.k8s_api_request_retry_timeout
        if await visible_in(reflector, key, spawner._start_future, seconds):
            learn(reflector.pods.get(key))
        return
    while time.monotonic() < deadline:
        reflector = spawner.pod_reflector
        view = spawner.colocation_view()
        seen = not view.live or view.has_pod(spawner.namespace, spawner.pod_name)
        if reflector is not None and key in reflector.pods and seen:
            learn(reflector.pods.get(key))
            return
        if spawner._start_future is not None and spawner._start_future.done():
            return
        await asyncio.sleep(0.05)
