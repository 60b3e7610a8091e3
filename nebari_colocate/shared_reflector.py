"""KubeSpawner's pod reflector on the live view's watch: one watch of the pods, not two
(``docs/decisions.md``, "One watch of the pods").

KubeSpawner keeps every server pod of the namespace in memory with a reflector of its own (LIST,
then a WATCH that ends every 10 s and a whole LIST again, parsed in one piece on the event loop),
while the live view (:mod:`nebari_colocate.informer`) already watches every pod of the namespace
(or of the cluster), with bookmarks, listed again only after a break.  :class:`SharedPodReflector`
is what KubeSpawner's ``poll()``, ``start()`` and ``stop()`` read (``pods``, a read-only mapping
``"namespace/name"`` -> pod; ``first_load_future``; ``start()``; ``stop()``), made of the view's
pod store: :class:`PodSelection`, the pods the reflector's label selector selects, kept up to date
from the store's changes.  The pods are the view's slim pods (:mod:`nebari_colocate.slim`), which
keep every field KubeSpawner reads of them.

When the view's pods may not be listed (RBAC), the spawner falls back to KubeSpawner's own
reflector (:meth:`nebari_colocate.spawner.ColocatingKubeSpawner._start_watching_pods`).

A watch that goes quiet must not hide a start or a stop: KubeSpawner's own reflector lists its pods
again every 10 s, while the view's watch is long and may look open on a dead network path for
``stale_after`` seconds.  So while a spawn has waited on its pod for 5 s (:func:`awaiting`: the
spawner's ``start`` and ``stop``), and the view's pods are not live or were quiet for
:data:`CLOSE_QUIET_SECONDS`, the reflector reads that one pod by name (a namespaced GET, which the
z2jh hub Role allows), every second at first and then less often (up to
:data:`CLOSE_MAX_INTERVAL` seconds), and keeps what it read unless the watch brings a newer
version.  A busy watch costs nothing more; a quiet one costs one GET per waiting spawn now and
then, where KubeSpawner's reflector would list every server pod every 10 s.  ``poll()`` reads
its server's pod by name the same way while the watch is quiet
(:meth:`SharedPodReflector.read_if_quiet`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from asyncio import Future
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from .informer import Collection, HubWatches, cache_key
from .kubeapi import read_json_or_none
from .objects import JsonDict, Obj

log = logging.getLogger(__name__)

#: seconds the view's pod watch may be quiet (no event, no bookmark) before a pod a spawn waits on
#: is read by name
CLOSE_QUIET_SECONDS = 5.0
#: the first and the longest pause between two such reads of one pod
CLOSE_MIN_INTERVAL = 1.0
CLOSE_MAX_INTERVAL = 8.0
#: seconds one such read may take
CLOSE_READ_TIMEOUT = 10.0


#: the pods the spawns of each event loop wait on now, by a token of the waiter's: what gives
#: ``"namespace/name"`` when called (the namespace may change with a profile), and since when
_AWAITED: dict[int, dict[object, tuple[Callable[[], str], float]]] = {}


@contextlib.contextmanager
def awaiting(pod_key: Callable[[], str]) -> Iterator[None]:
    """While the block runs, the pod ``pod_key()`` is read by name should the watch of the
    reflector that selects it go quiet (module docstring).  Per event loop."""
    loop = id(asyncio.get_running_loop())
    token = object()
    _AWAITED.setdefault(loop, {})[token] = (pod_key, time.monotonic())
    try:
        yield
    finally:
        waiting = _AWAITED.get(loop, {})
        waiting.pop(token, None)
        if not waiting:
            _AWAITED.pop(loop, None)


def awaited_keys(for_seconds: float = 0.0) -> set[str]:
    """The pods the running event loop's spawns have waited on for ``for_seconds`` or more
    (``"namespace/name"``)."""
    waiting = _AWAITED.get(id(asyncio.get_running_loop()), {})
    now = time.monotonic()
    return {key() for key, since in list(waiting.values()) if now - since >= for_seconds}


def selects(obj: Obj, namespace: str | None, labels: Mapping[str, str]) -> bool:
    """Whether a reflector of ``namespace`` (None: every namespace) with label selector
    ``labels`` (``key=value``, ANDed, as KubeSpawner builds it) reflects ``obj``.  (pure)"""
    meta = obj.get("metadata") or {}
    if namespace is not None and meta.get("namespace") != namespace:
        return False
    have = meta.get("labels") or {}
    return all(have.get(key) == value for key, value in labels.items())


def older(obj: Obj, than: Obj) -> bool:
    """Whether ``obj`` is an older version of the object ``than`` is: both resourceVersions are
    whole numbers (etcd's revisions, as kube-apiserver gives them) and ``obj``'s is smaller.
    Unknown (not numbers): False.  (pure)"""
    mine = (obj.get("metadata") or {}).get("resourceVersion")
    theirs = (than.get("metadata") or {}).get("resourceVersion")
    if not (isinstance(mine, str) and isinstance(theirs, str)):
        return False
    if not (mine.isdigit() and theirs.isdigit()):
        return False
    return int(mine) < int(theirs)


class PodSelection(Mapping[str, JsonDict]):
    """The pods a label selector selects in one namespace (or every namespace), as a read-only
    mapping ``"namespace/name"`` -> pod, kept up to date by :meth:`change` (a pod collection's
    changes).  ``get`` and ``in`` cost one dict lookup; iterating costs the selected pods only."""

    def __init__(self, namespace: str | None, labels: Mapping[str, str]) -> None:
        self.namespace = namespace
        self.labels = dict(labels)
        self._pods: dict[str, JsonDict] = {}
        #: key -> the waiters on that pod (:meth:`until`): what each waits for, and its future
        self._waiters: dict[str, list[tuple[Callable[[JsonDict | None], bool], Future[bool]]]] = {}

    def change(self, old: JsonDict | None, new: JsonDict | None) -> None:
        if new is not None:
            have = self._pods.get(cache_key(new))
            if have is not None and older(new, have):
                return  # a read by name already showed a newer version (a quiet watch catching up)
        if old is not None:
            self._pods.pop(cache_key(old), None)
        if new is not None and selects(new, self.namespace, self.labels):
            self._pods[cache_key(new)] = new
        changed = new if new is not None else old  # (one pod's change: one key)
        if self._waiters and changed is not None:
            self._wake(cache_key(changed))

    def until(self, key: str, done: Callable[[JsonDict | None], bool]) -> Future[bool]:
        """A future set to True once ``done(pod)`` is true of the pod ``key`` as this selection
        holds it (None: not held), looked at now and on each change of that pod (the watch's,
        a read by name's), or to False by :meth:`wake_all`; the caller cancels it to stop
        waiting.  Costs nothing per change of other pods but one dict lookup while anyone
        waits."""
        future: Future[bool] = asyncio.get_running_loop().create_future()
        if done(self._pods.get(key)):
            future.set_result(True)
            return future
        entry = (done, future)
        self._waiters.setdefault(key, []).append(entry)
        future.add_done_callback(lambda _: self._forget(key, entry))
        return future

    def _wake(self, key: str) -> None:
        waiters = self._waiters.get(key)
        if not waiters:
            return
        pod = self._pods.get(key)
        for done, future in list(waiters):
            if future.done():
                continue
            try:
                if done(pod):
                    future.set_result(True)
            except Exception as exc:  # a waiter's own error is its waiter's, not the watch's
                future.set_exception(exc)

    def _forget(
        self, key: str, entry: tuple[Callable[[JsonDict | None], bool], Future[bool]]
    ) -> None:
        waiters = self._waiters.get(key)
        if waiters is None:
            return
        with contextlib.suppress(ValueError):
            waiters.remove(entry)
        if not waiters:
            del self._waiters[key]

    def wake_all(self) -> None:
        """End every wait, not met (False): the reflector stops, its pods will not change
        again."""
        for waiters in list(self._waiters.values()):
            for _, future in list(waiters):
                if not future.done():
                    future.set_result(False)

    def read(self, key: str, pod: JsonDict | None) -> None:
        """What a read of the pod ``key`` by name answered (None: not found), unless the store
        holds a newer version already."""
        have = self._pods.get(key)
        if pod is None:
            self._pods.pop(key, None)
        elif have is None or not older(pod, have):
            if selects(pod, self.namespace, self.labels):
                self._pods[key] = pod
            else:
                self._pods.pop(key, None)
        self._wake(key)

    def selects_key(self, key: str) -> bool:
        """Whether a pod of this key may be one of this selection's (its namespace)."""
        return self.namespace is None or key.startswith(f"{self.namespace}/")

    def fill(self, pods: Iterable[JsonDict]) -> None:
        for pod in pods:
            self.change(None, pod)

    def __getitem__(self, key: str) -> JsonDict:
        return self._pods[key]

    def __contains__(self, key: object) -> bool:
        return key in self._pods

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._pods))  # a copy: the watch may change it between two reads

    def __len__(self) -> int:
        return len(self._pods)


class PodWatchUnavailable(Exception):
    """The view's pods may not be listed or watched here (RBAC): use KubeSpawner's reflector."""


class SharedPodReflector:
    """KubeSpawner's pod reflector on the view's watch (module docstring).  ``namespace`` None:
    every namespace (``enable_user_namespaces``)."""

    kind = "pods"

    def __init__(self, hub: HubWatches, namespace: str | None, labels: Mapping[str, str]) -> None:
        self.hub = hub
        self.namespace = namespace
        self.labels = dict(labels)
        # as KubeSpawner's reflectors name them (logs and operators' hooks read them)
        self.label_selector = ",".join(f"{k}={v}" for k, v in self.labels.items())
        self.field_selector = ""
        self.omit_namespace = namespace is None
        self.first_load_future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._selection = PodSelection(namespace, labels)
        self._listening = False
        self._close_task: asyncio.Task[None] | None = None
        #: reads by name of awaited pods while the watch was quiet (tests and benchmarks count)
        self.close_reads = 0
        #: waits of :meth:`wait_for` that came true, and that ran out of time (tests count)
        self.waits_met = 0
        self.waits_timed_out = 0

    @property
    def pods(self) -> Mapping[str, JsonDict]:
        """The selected pods, ``"namespace/name"`` -> pod (read-only)."""
        return self._selection

    async def wait_for(
        self, key: str, done: Callable[[JsonDict | None], bool], timeout: float
    ) -> bool:
        """Wait up to ``timeout`` seconds until ``done(pod)`` is true of the pod ``key`` as
        :attr:`pods` holds it (None: not held), woken by its changes, not by polling
        (:meth:`PodSelection.until`); whether it came true.  A reflector that stops ends the
        wait (False, and :attr:`stopped` says why)."""
        if not self._listening:
            return bool(done(self._selection.get(key)))
        future = self._selection.until(key, done)
        try:
            met = await asyncio.wait_for(future, timeout)
        except asyncio.TimeoutError:
            self.waits_timed_out += 1
            return False
        finally:
            future.cancel()
        self.waits_met += met
        return met

    @property
    def stopped(self) -> bool:
        """:meth:`stop` was called (replaced, or the hub shuts down): its pods no longer
        change."""
        return not self._listening

    #: KubeSpawner's ResourceReflector name for the same store
    resources = pods

    def source(self) -> Collection:
        """The pod collection in use: the cluster-wide one, or the namespace's own where RBAC
        forbids the cluster-wide LIST."""
        if self.namespace is None:
            return self.hub.all_pods
        return self.hub.namespace(self.namespace).pods

    async def start(self, timeout: float) -> None:
        """Read the view's pods from now on, and wait (up to ``timeout`` seconds) for their
        first LIST.  Raises PodWatchUnavailable when RBAC forbids them, TimeoutError when the
        API does not answer in time; ``first_load_future`` is left to the caller then."""
        if self.namespace is None:
            self.hub.start()
        else:
            self.hub.namespace(self.namespace).start()
        self.hub.pod_listeners[id(self)] = self._selection.change
        self._listening = True
        await asyncio.wait_for(self._settled(), timeout)
        source = self.source()
        if source.forbidden:
            raise PodWatchUnavailable(source.error or f"{source.name}: forbidden")
        self._selection.fill(source.items.values())
        self._close_task = asyncio.ensure_future(self._watch_awaited_pods())

    @property
    def closed(self) -> bool:
        """The view's watches this reflector reads were stopped (``ClusterView.stop_all``, a
        hub's shutdown): it must be replaced, it will never change again."""
        return self.hub.closed

    def _awaited_keys(self) -> list[str]:
        # (a pod awaited for less than the quiet time is left to the watch: a burst's pods,
        # created at once after a quiet while, are not read by name all at once)
        keys = awaited_keys(for_seconds=CLOSE_QUIET_SECONDS)
        return sorted(k for k in keys if self._selection.selects_key(k))

    async def _watch_awaited_pods(self) -> None:
        """The module docstring's close watch: read by name the pods spawns wait on while the
        view's pods are not live or quiet."""
        interval = CLOSE_MIN_INTERVAL
        while self._listening:
            await asyncio.sleep(interval)
            source = self.source()
            keys = self._awaited_keys()
            if not keys or (source.live and source.quiet_seconds() < CLOSE_QUIET_SECONDS):
                interval = CLOSE_MIN_INTERVAL
                continue
            await asyncio.gather(*(self._read(key) for key in keys))
            interval = min(interval * 2, CLOSE_MAX_INTERVAL)

    def quiet(self) -> bool:
        """Whether the view's pod watch is broken or had no event or bookmark for
        :data:`CLOSE_QUIET_SECONDS`: what it holds of a pod may be old."""
        source = self.source()
        return not source.live or source.quiet_seconds() >= CLOSE_QUIET_SECONDS

    async def read_if_quiet(self, key: str, timeout: float = CLOSE_READ_TIMEOUT) -> None:
        """Read the pod ``key`` by name (one GET) while the watch is :meth:`quiet`, as
        ``poll()`` asks about its server: a pod deleted behind the hub's back (an eviction, a
        drain) is then seen gone at the next poll, as KubeSpawner's own reflector, which lists
        its pods every 10 s, would see it."""
        if self._listening and self._selection.selects_key(key) and self.quiet():
            await self._read(key, timeout)

    async def _read(self, key: str, timeout: float = CLOSE_READ_TIMEOUT) -> None:
        namespace, _, name = key.partition("/")
        try:
            pod = await read_json_or_none(
                self.hub.core.read_namespaced_pod,
                name,
                namespace,
                _request_timeout=timeout,
            )
        except Exception as exc:  # the next turn tries again; the watch may come back first
            log.info("colocate: could not read pod %s while its watch is quiet: %s", key, exc)
            return
        self.close_reads += 1
        if self._listening:
            self._selection.read(key, None if pod is None else self.hub.slim(pod))

    async def _settled(self) -> None:
        await self.hub.all_pods.settled.wait()
        if self.namespace is not None and self.hub.all_pods.forbidden:
            await self.hub.namespace(self.namespace).own_pods.settled.wait()

    def loaded(self) -> None:
        if not self.first_load_future.done():
            self.first_load_future.set_result(None)

    def failed(self, exc: BaseException) -> None:
        if not self.first_load_future.done():
            self.first_load_future.set_exception(exc)
            # nobody may await it: do not let asyncio log "exception was never retrieved"
            with contextlib.suppress(BaseException):
                self.first_load_future.exception()

    def relist(self) -> None:
        """List the pods again (KubeSpawner replaces a reflector that seems disconnected)."""
        self.source().relist()

    async def stop(self) -> None:
        """Stop reading the view (its watches go on: the view and other spawners use them)."""
        if self._listening:
            self._listening = False
            self.hub.pod_listeners.pop(id(self), None)
            self._selection.wake_all()
        task, self._close_task = self._close_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task

    def __repr__(self) -> str:
        where = self.namespace or "all namespaces"
        return f"<SharedPodReflector {self.label_selector!r} in {where}: {len(self.pods)} pods>"


def reflector_fields_ok(spawner: Any) -> bool:
    """Whether KubeSpawner reads nothing of its reflector's pods beyond what the view keeps:
    ``internal_ssl`` and ``services_enabled`` read the containers' ports, an
    ``after_pod_created_hook`` or a ``get_pod_url`` hook gets the whole pod."""
    return not (
        getattr(spawner, "internal_ssl", False)
        or getattr(spawner, "services_enabled", False)
        or getattr(spawner, "after_pod_created_hook", None)
        or getattr(spawner, "get_pod_url", None)
    )
