"""ColocatingKubeSpawner: KubeSpawner that knows about per-user volumes.

The imperative shell around the pure core: it reads the state through the live view
(:mod:`nebari_colocate.view`), calls :func:`nebari_colocate.placement.decide`, and either merges
the affinity into the pod manifest or refuses the spawn at once with a reason a person can act on.

Where it hooks in (KubeSpawner 7; docs/decisions.md and docs/surfaces.md):

- ``load_user_options()`` runs first in ``KubeSpawner._start``, after the pre_spawn_hook, and
  applies the profile's ``kubespawner_override``, *before* the home PVC is created.  The check
  runs here so a refused first spawn leaves no PVC behind.
- ``get_pod_manifest()`` applies the decision (re-deciding if the manifest changed since the
  check, e.g. a subclass changed it after ``load_user_options``).  The operator's
  ``modify_pod_hook`` still runs after it.
- A class-level per-user lock serialises the check from ``load_user_options`` until the pod exists
  in the pod reflector and the live view (or the spawn ends), so concurrent spawns of one user
  see each other.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any, ClassVar, NoReturn

from jupyterhub.utils import exponential_backoff, url_escape_path, url_path_join
from kubespawner import KubeSpawner
from kubespawner.slugs import is_valid_label, safe_slug
from traitlets import (
    Bool,
    CaselessStrEnum,
    Float,
    List,
    Unicode,
    default,
    validate,
)

from . import messages, metrics
from .admission import (
    CONTEXT_FIELDS,
    FIELDS,
    AdmissionModels,
    as_admitted,
    model_from_created,
    shape_key,
)
from .affinity import NODEPOOL_LABEL, apply_decision, avoid_nodes, user_colocation_keys
from .config import (
    ACCESS_MODES,
    API_FAULT_SWEEP_SECONDS,
    DEFAULT_ACCESS_MODE,
    DEFAULT_CHECK_TIMEOUT,
    DEFAULT_DETACH_GRACE_SECONDS,
    DEFAULT_DRY_RUN_REUSE_SECONDS,
    DEFAULT_FAIL_FAST_ON_EVENTS,
    DEFAULT_IMAGE_PULL_GRACE_SECONDS,
    DEFAULT_LABEL_KEY,
    DEFAULT_PREMIUM_NODE_POLICY,
    DEFAULT_PREMIUM_RESOURCES,
    DEFAULT_REFUSAL_HOLD_SECONDS,
    DEFAULT_SERVER_DISPLAY_NAME,
    DEFAULT_SHARE_POD_WATCH,
    DEFAULT_UNSCHEDULABLE_GRACE_SECONDS,
    DEFAULT_UNSCHEDULED_TIMEOUT_SECONDS,
    DEFAULT_WATCH_STALE_SECONDS,
    DEFAULT_WAY_OUT_RELEASE_TIMEOUT,
    EVENT_POLL_INTERVAL,
    POD_WATCH_FIRST_LIST_SECONDS,
    PREEMPTION_GRACE_SECONDS,
    PREMIUM_POLICIES,
    SETTINGS,
    check_mode_conflicts,
)
from .events import FAIL, EventVerdict, classify
from .faults import (
    REJECTED,
    TIMEOUT,
    UNREACHABLE,
    KubernetesApiFault,
    api_fault,
    connection_failed,
)
from .fit import offered, requests_any
from .informer import HubWatches
from .jupyterhub import (
    JUPYTERHUB_MAJOR,
    ColocationRefused,
    display_name,
    requested_through_rest_api,
    uncount_refusal,
)
from .known_modes import KnownModes
from .kubeapi import admitted_pod, sweep_late_pod
from .locks import UserLocks
from .objects import (
    HOSTNAME,
    SERVERNAME_ANNOTATION,
    USERNAME_ANNOTATION,
    JsonDict,
    attached_nodes,
    is_exclusive,
    is_server,
    meta,
    owned_by,
    pod_claims,
    pod_server,
)
from .placement import COLOCATE, REFUSE, SKIP, Decision, Policy, decide, safe_side
from .pod_scheduling import confirmed, read_pod, reflected_pod
from .refusal import Refusal, WayOutBlockers
from .shared_reflector import (
    PodWatchUnavailable,
    SharedPodReflector,
    awaiting,
    reflector_fields_ok,
)
from .state import ClusterState
from .view import ClusterView, DirectReader, ViewNotLive
from .wayout import PremiumRide, premium_rides

__all__ = ["JUPYTERHUB_MAJOR", "ColocatingKubeSpawner", "ColocationRefused", "KubernetesApiFault"]


def _placement_fingerprint(pod: JsonDict) -> str:
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


def _present(pod: JsonDict | None) -> bool:
    return pod is not None


@dataclass
class _LateCheck:
    """The rest of a check, sent and not yet awaited (``colocation_decide(admit_later=True)``):
    its task (the decision, the dry run's round trip, whether it took the safe side), and the
    seconds the check took till then."""

    task: asyncio.Future[tuple[Decision, float, bool]]
    check_seconds: float


@dataclass(frozen=True)
class _Lesson:
    """What a pod about to be created may teach its shape's admission model: the shape, the
    pod as written and as sent, and the uid of the pod of that name the reflector held before
    (an earlier start's, not deleted yet), which is not it."""

    key: str
    written: JsonDict
    sent: JsonDict
    uid_before: str | None


class ColocatingKubeSpawner(KubeSpawner):  # type: ignore[misc]  # KubeSpawner ships no types
    """A KubeSpawner that co-locates a user's servers on exclusive (ReadWriteOnce) volumes.

    Before a server pod is created it looks at the user's other running servers and the
    volumes the pod mounts, then adds the co-location affinity a ReadWriteOnce home needs, skips
    it for ReadWriteMany storage, or refuses the spawn at once with a reason the user can act on.
    """

    storage_access_mode = CaselessStrEnum(
        list(ACCESS_MODES),
        default_value=DEFAULT_ACCESS_MODE,
        config=True,
        help="""
        Access mode of the home volumes this hub creates: ``ReadWriteOnce`` or ``ReadWriteMany``
        (case-insensitive). Default: ``ReadWriteOnce``.

        It sets KubeSpawner's ``storage_access_modes`` for new PVCs, and it is how a claim that
        does not exist yet is judged.  With ``ReadWriteOnce`` a volume attaches to one node at a
        time, so every server of a user is co-located on one node; with ``ReadWriteMany`` (NFS,
        CephFS, EFS, Longhorn RWX) servers go wherever the scheduler likes, at a metadata-latency
        cost for small-file workloads.  Access modes of existing claims are immutable: claims
        created before a switch keep their mode, and are judged by it.  ``ReadWriteMany``
        requires ``storage_class`` when the hub creates the claims (``storage_pvc_ensure``, as
        zero-to-jupyterhub's dynamic storage sets it); a hub on claims made by others (Nebari's
        static storage) needs none.
        """,
    )

    colocation_label_key = Unicode(
        DEFAULT_LABEL_KEY,
        config=True,
        help="""
        Label put on every user pod; its value is KubeSpawner's safe slug of the username (the
        name itself when it is a valid label value, else a strip-and-hash form).  The required
        pod affinity selects on it.  Default: ``nebari.dev/colocate-user``.  Changing it on a
        running hub means pods started before the change are found only by their volumes.
        """,
    )

    premium_resources = List(
        Unicode(),
        default_value=list(DEFAULT_PREMIUM_RESOURCES),
        config=True,
        help="""
        Extended resources that make a node "premium" (expensive): a node whose allocatable has
        any of them above zero.  Used by ``premium_node_policy``.
        Default: ``["nvidia.com/gpu", "amd.com/gpu"]``.
        """,
    )

    premium_node_policy = CaselessStrEnum(
        list(PREMIUM_POLICIES),
        default_value=DEFAULT_PREMIUM_NODE_POLICY,
        config=True,
        help="""
        What to do when co-location would put a server that requests no premium resource on a
        premium node (a CPU app forced onto the node of a GPU lab keeps the GPU node from scaling
        down): ``allow`` it silently, ``warn`` (start it and log a warning; the default), or
        ``refuse`` it with a message telling the user to stop the GPU server first.
        """,
    )

    colocation_check_timeout = Float(
        DEFAULT_CHECK_TIMEOUT,
        config=True,
        help="""
        The most seconds the pre-spawn check may wait on the Kubernetes API.  Past it the spawn
        proceeds on the safe side: the co-location affinity is still emitted (pinned to a
        holder's node when one is known from the live view or the pod reflector), the hub log
        says why and ``nebari_colocate_safe_side_total`` counts it.  Default: 5.  At least 0.25
        (on the first check after hub start, or while the live view is not live, the check makes
        up to four rounds of API requests); less is refused at hub start.  Keep it well below
        ``start_timeout``: the check runs inside the start.
        """,
    )

    colocation_watch_stale_seconds = Float(
        DEFAULT_WATCH_STALE_SECONDS,
        config=True,
        help="""
        Seconds a watch of the live view may go without an event or a bookmark before it is no
        longer trusted and is listed again.  A watch whose network path died (a dropped NAT or
        load-balancer flow) stays open and silent, and would hide a pod that starts holding a
        user's home; kube-apiserver sends a bookmark on a quiet watch about every 60 s, so
        silence longer than that means the path is gone.  While a watch is untrusted the check
        reads the API directly.  Independently of this bound, every unpinned decision (no
        holder known) is confirmed by one namespaced LIST of pods, and a refusal by reading its
        holders by name.  Default: 75.  At least 65; less lists quiet watches again and
        again, more leaves a dead watch trusted longer.
        """,
    )

    fail_fast_on_events = Bool(
        DEFAULT_FAIL_FAST_ON_EVENTS,
        config=True,
        help="""
        While ``start()`` waits for the pod, read its events (KubeSpawner's event reflector) and
        end a spawn that cannot succeed at once, with a reason the user can act on, instead of
        waiting out ``start_timeout``: the scheduler cannot place a pod pinned to its volume's
        node, the autoscaler (cluster-autoscaler or Karpenter) says no node can be added, the
        volume is attached elsewhere (Multi-Attach), or the image name is invalid.  The pod is
        deleted.  Needs ``events_enabled`` (KubeSpawner's default).  Default: True.
        """,
    )

    colocation_share_pod_watch = Bool(
        DEFAULT_SHARE_POD_WATCH,
        config=True,
        help="""
        Let KubeSpawner's pod reflector read the live view's watch of the pods instead of
        watching the same pods a second time.  KubeSpawner's own reflector keeps every server
        pod whole and lists them all again every 10 s (one JSON parse of the whole list on the
        hub's event loop); the view keeps each pod slim, lists page by page, and lists again
        only after a broken watch.  While a start or a stop waits on its pod and the view's
        watch of the pods is quiet (5 s without an event or a bookmark) or broken, that pod is
        read by name (one GET, every 1 s at first, every 8 s at most), so a watch that goes
        silent on a dead network path does not hide a starting pod's Running; ``poll()`` reads
        its server's pod so too while the watch is quiet, so a pod deleted behind the hub's back
        is seen stopped.  Default: True.
        KubeSpawner's own reflector is used anyway
        when the view's pods may not be listed (RBAC), and when KubeSpawner or a hook reads
        more of a pod than the view keeps (``internal_ssl``, ``services_enabled``,
        ``after_pod_created_hook``, ``get_pod_url``).  False: always KubeSpawner's own.
        """,
    )

    colocation_dry_run_reuse_seconds = Float(
        DEFAULT_DRY_RUN_REUSE_SECONDS,
        config=True,
        help="""
        Seconds the server-side dry run of a pinned pod serves the pinned pods of the same
        shape: the same namespace, images, resources, node selector, tolerations, affinity,
        RuntimeClass, priority class and service account (names, labels, environment and
        claims may differ).  Their check is taken on the pod with the admitted fields of that
        dry run (resources, overhead, tolerations, affinity...) instead of a dry run of its own,
        and checks that ask at once share the one dry run in flight: a class whose 100 users
        each start an app makes one dry run, not 100.  A webhook that sets resources from the
        pod's user would be judged by another user's pod; the pod is then refused on
        kube-scheduler's FailedScheduling at once instead of before it is created.  A reused
        dry run never refuses a pod alone: a refusal on it is taken again on a dry run of the
        pod's own (what admission reads, a LimitRange, a RuntimeClass, may have changed since).
        0 or less: a dry run for every pinned pod.  Default: 600.
        """,
    )

    unschedulable_grace_seconds = Float(
        DEFAULT_UNSCHEDULABLE_GRACE_SECONDS,
        config=True,
        help="""
        Seconds an unpinned pod may stay unschedulable with no word from an autoscaler before the
        spawn is ended (a scale-up in progress keeps it waiting).  0 disables this rule: such a
        pod waits for ``start_timeout``.  Default: 60.
        """,
    )

    image_pull_grace_seconds = Float(
        DEFAULT_IMAGE_PULL_GRACE_SECONDS,
        config=True,
        help="""
        Seconds image pulls may keep failing (``ErrImagePull`` / ``ImagePullBackOff``, which can
        heal: a registry hiccup) before the spawn is ended.  0 disables this rule.  Invalid
        image names end the spawn at once regardless.  Default: 120.
        """,
    )

    detach_grace_seconds = Float(
        DEFAULT_DETACH_GRACE_SECONDS,
        config=True,
        help="""
        Seconds the pod's volume may stay attached to another node where no pod uses it any
        more (a detach under way: the old node's kubelet unmounts, then the attach/detach
        controller detaches, usually within seconds) before the spawn is ended
        (``multi-attach``: an unmount that hangs).  A volume another pod still uses ends the
        spawn at once.  0 disables this rule: such a pod waits for ``start_timeout``.
        Default: 60.
        """,
    )

    colocation_unscheduled_timeout = Float(
        DEFAULT_UNSCHEDULED_TIMEOUT_SECONDS,
        config=True,
        help="""
        Seconds a created pod may go with no word from any scheduler (not bound, no
        ``PodScheduled`` condition, not one event) before the spawn is ended with "No scheduler
        has picked up your server: the cluster's scheduler 'X' may not be running"; the hub log
        names the scheduler.  A pod whose ``schedulerName`` no running scheduler serves
        (zero-to-jupyterhub's user-scheduler Deployment down, a typo in ``scheduler_name``)
        stays Pending with no event at all, and would wait out ``start_timeout``.  A running
        kube-scheduler binds a pod or says why not within a second or two; a user-scheduler's
        leader failover takes about 15 s.  Default: 30.  Shorter ends such spawns sooner but
        risks ending one a busy scheduler had not reached yet (at least 5); 0 disables it.
        """,
    )

    refusal_hold_seconds = Float(
        DEFAULT_REFUSAL_HOLD_SECONDS,
        config=True,
        help="""
        Seconds a refused spawn that was requested through the REST API stays pending before it
        fails, with the reason already in its progress stream.  Under zero-to-jupyterhub
        (``slow_spawn_timeout`` 0) the REST API answers 202 before any refusal, and jhub-apps'
        pages learn how a start ended only by looking again: held this long, the refusal reaches
        JupyterHub's spawn-pending page that jhub-apps' "Create app" opens, and the home page
        nebari-colocate installs for jhub-apps.  Spawns from JupyterHub's own spawn form are
        never held (the form shows a quick refusal itself).  0 disables it.  Default: 3.
        """,
    )

    way_out_release_timeout = Float(
        DEFAULT_WAY_OUT_RELEASE_TIMEOUT,
        config=True,
        help="""
        The most seconds the way out (a refusal's "Stop 'Pandas App' and start 'JupyterLab'"
        button, ``docs/decisions.md``) waits, after stopping the servers that block a start,
        for the home volume to be released: their pods gone and, when every holder was
        stopped, no VolumeAttachment left attached on the old node (the attach/detach
        controller detaches within seconds to a minute).  Past it the way out ends with words
        and starts nothing.  Default: 120.  Longer waits on a slow storage driver; shorter
        gives up on a stuck detach sooner.
        """,
    )

    default_server_display_name = Unicode(
        DEFAULT_SERVER_DISPLAY_NAME,
        allow_none=True,
        config=True,
        help="""
        What messages call the user's default server.  ``None`` (the default): "JupyterLab" when
        jhub-apps built this spawner class (its home page shows the default server so), else
        "your default server".  Named servers are called by their display name (jhub-apps' app
        name) when they have one, else by their server name.
        """,
    )

    #: per-user locks; class level so all spawners of the hub share them
    _colocation_locks: ClassVar[UserLocks] = UserLocks()
    #: access modes of claims earlier checks read (they never change): the safe side never pins
    #: on a claim known to be shared; class level so all spawners of the hub share it
    _known_claim_modes: ClassVar[KnownModes] = KnownModes()
    #: running sweeps after API faults (strong references: the loop keeps only weak ones)
    _api_fault_sweeps: ClassVar[set[asyncio.Future[None]]] = set()

    # ------------------------------------------------------------------------------------------
    # configuration

    @default("storage_access_modes")
    def _default_storage_access_modes(self) -> list[str]:
        return [self.storage_access_mode]

    @validate(*SETTINGS)
    def _validate_setting(self, proposal: dict[str, Any]) -> Any:
        """Every setting of ours by its validator in :data:`nebari_colocate.config.SETTINGS`."""
        return SETTINGS[proposal["trait"].name].check(proposal["value"])

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.check_colocation_config()
        self._colocation_lock_held = False
        self._colocation_checked: tuple[str, Decision] | None = None
        self._late_check: _LateCheck | None = None
        self._dry_runs_made = 0
        #: the admission shape key the check of this spawn computed (``_admitted``), reused by
        #: the lesson of the pod it lets be created (``_admission_lesson``)
        self._colocation_shape_key: str | None = None
        self._colocation_release_task: asyncio.Future[None] | None = None
        self._colocation_decision: Decision | None = None
        self._requests_premium = False
        self._held_refusal: ColocationRefused | None = None
        self._api_fault_sweep: asyncio.Future[None] | None = None
        #: the last connection error a retried API call of this spawn met (None: none)
        self._connection_error: BaseException | None = None
        #: the last refusal of this server, until its next start (the home page nebari-colocate
        #: installs for jhub-apps shows its ``html``; the way out re-checks its ``blockers``)
        self.colocation_failure: Refusal | None = None
        #: seconds of the last check, the dry run's API round trip apart (benchmarks read it)
        self.colocation_timings: dict[str, float] = {}
        #: for the next start only, set by the move off a premium node (nebari_colocate.handlers):
        #: the nodes ((name, hostname label, Karpenter NodePool label)) an unpinned pod is kept
        #: off (nebari_colocate.affinity.avoid_nodes)
        self.colocation_move_off: tuple[tuple[str, str | None, str | None], ...] = ()

    def check_colocation_config(self) -> None:
        """Raise ColocationConfigError for settings that contradict each other."""
        explicit = (
            list(self.storage_access_modes)
            if self.trait_has_value("storage_access_modes")
            else None
        )
        check_mode_conflicts(
            self.storage_access_mode,
            self.storage_class,
            explicit,
            creates_claims=self.storage_pvc_ensure,
        )

    def server_display_names(self) -> dict[str, str]:
        """Server name -> the name this user knows it by, for the user's own servers only.

        JupyterHub 6 has ``Spawner.display_name``; on JupyterHub 5 jhub-apps keeps the app's name
        in ``user_options["display_name"]``, stored with every server of the user.
        """
        names: dict[str, str] = {}
        orm_user = getattr(self.user, "orm_user", None)
        stored = getattr(orm_user, "orm_spawners", None) or {}
        for name, orm_spawner in stored.items():
            shown = display_name(orm_spawner)
            if shown:
                names[name or ""] = shown
        current = display_name(self)
        if current:
            names[self.name or ""] = current
        if not names.get(""):
            default = self.default_server_display_name
            if default is None and _built_by_jhub_apps(type(self)):
                default = "JupyterLab"
            if default:
                names[""] = default
        return names

    @property
    def colocation_label_value(self) -> str:
        """KubeSpawner's safe slug of the username, valid as a label value."""
        return str(safe_slug(self.user.name, is_valid=is_valid_label))

    @property
    def colocation_locks(self) -> UserLocks:
        """The hub's per-user locks, shared by every spawner (the way out holds the user's)."""
        return type(self)._colocation_locks

    async def refusal_hold_ended(self) -> None:
        """Return once a refused spawn held pending (``refusal_hold_seconds``: the
        spawn-pending page shows the way out's button as soon as the reason arrives) has ended,
        and JupyterHub's callbacks on it have run; at once when none is held."""
        future = getattr(self, "_spawn_future", None)  # JupyterHub's, while a spawn runs
        if getattr(self, "_held_refusal", None) is None or future is None:
            return
        hold = float(getattr(self, "refusal_hold_seconds", 0) or 0)
        await asyncio.wait([asyncio.ensure_future(asyncio.shield(future))], timeout=hold + 5)
        await asyncio.sleep(0)  # JupyterHub's callbacks on the finished spawn run first

    def colocation_policy(self) -> Policy:
        return Policy(
            storage_access_mode=self.storage_access_mode,
            premium_resources=tuple(self.premium_resources),
            premium_node_policy=self.premium_node_policy,
        )

    # ------------------------------------------------------------------------------------------
    # the per-user lock

    async def _acquire_colocation_lock(self) -> None:
        if self._colocation_lock_held:
            return
        timeout = self.k8s_api_request_retry_timeout
        if not await self._colocation_locks.acquire(self.user.name, timeout):
            self.log.warning(
                "colocate: waited %ss for another spawn of %s; deciding without the lock",
                timeout,
                self.user.name,
            )
            return
        self._colocation_lock_held = True

    def _release_colocation_lock(self) -> None:
        if not self._colocation_lock_held:
            return
        self._colocation_lock_held = False
        self._colocation_locks.release(self.user.name)

    async def _once_pod_visible(self, lesson: _Lesson | None = None) -> None:
        """Once the new pod is in the reflector (or after the retry timeout): release the lock,
        so the next spawn of this user sees the pod, and learn its shape's admission from it
        (``lesson``: :meth:`_admission_lesson`)."""
        key = f"{self.namespace}/{self.pod_name}"
        deadline = time.monotonic() + self.k8s_api_request_retry_timeout
        try:
            reflector = self.pod_reflector
            if isinstance(reflector, SharedPodReflector) and self._start_future is not None:
                # the view's store is the reflector's: woken by the pod's ADDED, not polled
                await self._visible_in(reflector, key, self._start_future, lesson)
                return
            while time.monotonic() < deadline:
                reflector = self.pod_reflector
                view = self.colocation_view()
                seen = not view.live or view.has_pod(self.namespace, self.pod_name)
                if reflector is not None and key in reflector.pods and seen:
                    if lesson is not None:
                        self._learn_admission(lesson, reflector.pods.get(key))
                    return
                if self._start_future is not None and self._start_future.done():
                    return
                await asyncio.sleep(0.05)
        finally:
            self._release_colocation_lock()

    async def _visible_in(
        self,
        reflector: SharedPodReflector,
        key: str,
        start: asyncio.Future[Any],
        lesson: _Lesson | None,
    ) -> None:
        """Wait until the pod ``key`` is in the shared reflector (the start ends, or after the
        retry timeout: give up), then learn from it."""
        visible = asyncio.ensure_future(
            reflector.wait_for(key, _present, self.k8s_api_request_retry_timeout)
        )
        try:
            await asyncio.wait({visible, start}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not visible.done():
                visible.cancel()
        shown = visible.done() and not visible.cancelled() and visible.exception() is None
        if shown and visible.result() and lesson is not None:
            self._learn_admission(lesson, reflector.pods.get(key))

    def _admission_lesson(
        self, written: JsonDict, manifest: JsonDict, decision: Decision
    ) -> _Lesson | None:
        """What the pod about to be created may teach its shape (``nebari_colocate.admission``:
        no dry run for the user's next, pinned, server of the profile): only a pod with an
        exclusive claim (``colocate``), while its shape has no model, and no
        ``modify_pod_hook`` (what it changes after this manifest is not admission's doing)."""
        reuse = self.colocation_dry_run_reuse_seconds
        if reuse <= 0 or decision.verdict != COLOCATE or self.modify_pod_hook is not None:
            return None
        # The check's key when it computed one: its pod had this manifest's fingerprint, which
        # holds every field of the shape.
        key = self._colocation_shape_key or shape_key(written)
        if not HubWatches.of_running_loop(self.api.api_client).admission.wanted(key, reuse):
            return None
        reflector = self.pod_reflector
        before = reflector.pods.get(f"{self.namespace}/{self.pod_name}") if reflector else None
        return _Lesson(key, written, manifest, meta(before).get("uid") if before else None)

    def _learn_admission(self, lesson: _Lesson, created: Any) -> None:
        if not isinstance(created, dict) or meta(created).get("deletionTimestamp"):
            return
        if meta(created).get("uid") == lesson.uid_before:
            return  # the pod of an earlier start, not deleted yet: not the one sent
        model = model_from_created(created, lesson.written, lesson.sent)
        if model is None:
            self.log.debug(
                "colocate: admission changed the affinity of pod %s; its shape is not learnt",
                self.pod_name,
            )
            return
        models = HubWatches.of_running_loop(self.api.api_client).admission
        models.learn(lesson.key, model, self.colocation_dry_run_reuse_seconds)

    # ------------------------------------------------------------------------------------------
    # the pod reflector, on the live view's watch (nebari_colocate.shared_reflector)

    def _shares_pod_watch(self) -> bool:
        return bool(self.colocation_share_pod_watch) and reflector_fields_ok(self)

    async def _start_watching_pods(self, replace: bool = False) -> Any:
        """KubeSpawner's pod reflector, made of the live view's watch when it can be
        (``colocation_share_pod_watch``), else KubeSpawner's own."""
        if not self._shares_pod_watch():
            return await super()._start_watching_pods(replace=replace)
        key = self._get_reflector_key("pods")
        reflectors = type(self).reflectors  # KubeSpawner's class-level dict, never redefined
        current = reflectors.get(key)
        if isinstance(current, SharedPodReflector) and current.closed and not replace:
            # Its watches were stopped: it would never change again.  Its successor lists in
            # the background (a frozen API must not hold the spawn here: KubeSpawner's own
            # reflector would not); till then this one answers, and the pods a start or a
            # stop waits on are read by name (its watch counts as broken).
            self._replace_closed_reflector(key, current)
            return current
        if current is not None and not replace:
            if not current.first_load_future.done():
                await current.first_load_future
            return reflectors.get(key, current)
        return await self._new_shared_reflector(key, current, replace=replace)

    #: the background replacements of closed shared reflectors, by reflector key
    _closed_replacements: ClassVar[dict[Any, asyncio.Future[Any]]] = {}

    def _replace_closed_reflector(self, key: Any, closed: SharedPodReflector) -> None:
        running = ColocatingKubeSpawner._closed_replacements.get(key)
        if running is not None and not running.done():
            return
        task = asyncio.ensure_future(
            self._new_shared_reflector(key, closed, replace=True, background=True)
        )
        replacements = ColocatingKubeSpawner._closed_replacements
        replacements[key] = task

        def done(t: asyncio.Future[Any]) -> None:
            if replacements.get(key) is t:
                del replacements[key]  # (the next closed one starts its own)
            _ = t.cancelled() or t.exception()  # retrieved: logged where raised

        task.add_done_callback(done)

    async def _new_shared_reflector(
        self, key: Any, current: Any, *, replace: bool, background: bool = False
    ) -> Any:
        """A shared reflector in place of ``current``: registered at once (the spawners that
        ask meanwhile await its first LIST, as with KubeSpawner's), or with ``background``
        only once it has listed, and only if ``current`` is still the one in use."""
        reflectors = type(self).reflectors
        hub = HubWatches.of_running_loop(self.api.api_client)
        if self.namespace and not self.enable_user_namespaces:
            hub.namespace(self.namespace).stale_after = self.colocation_watch_stale_seconds
        reflector = SharedPodReflector(
            hub,
            None if self.enable_user_namespaces else self.namespace,
            {"component": self.component_label},
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
            self.log.info(
                "colocate: the live view may not watch the pods (%s); KubeSpawner watches them",
                exc,
            )
            return await self._stock_pod_reflector(reflector)
        except BaseException as exc:
            # as KubeSpawner's own: the first LIST failed; the next call tries again
            if reflectors.get(key) is reflector:
                del reflectors[key]
            await reflector.stop()
            reflector.failed(exc)
            if background and not isinstance(exc, asyncio.CancelledError):
                self.log.warning(
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

    @contextlib.contextmanager
    def _awaiting_pod(self) -> Iterator[None]:
        """While KubeSpawner waits on this server's pod (its start, its stop), the shared
        reflector reads the pod by name should the view's watch go quiet
        (:mod:`nebari_colocate.shared_reflector`)."""
        if not self._shares_pod_watch():
            yield
            return
        with awaiting(lambda: f"{self.namespace}/{self.pod_name}"):
            yield

    async def _stock_pod_reflector(self, shared: SharedPodReflector) -> Any:
        """KubeSpawner's own pod reflector in place of ``shared``; spawners awaiting
        ``shared``'s first load go on once it has loaded (or failed)."""
        try:
            stock = await super()._start_watching_pods(replace=True)
        except BaseException as exc:
            shared.failed(exc)
            raise
        await shared.stop()
        shared.loaded()
        return stock

    # ------------------------------------------------------------------------------------------
    # the check

    def _reflector_pods(self) -> list[JsonDict] | None:
        reflector = self.pod_reflector
        if reflector is None or not reflector.first_load_future.done():
            return None
        if reflector.first_load_future.exception() is not None:
            return None
        return list(reflector.pods.values())

    def _claim_modes(self, view: ClusterView, pod: JsonDict) -> dict[str, list[str]]:
        """What is known of the access modes of ``pod``'s claims without asking the API: the
        live view's last known claims, and what earlier checks read (which wins: it is what a
        completed read said)."""
        claims = pod_claims(pod)
        last_known = {
            c: list((pvc.get("spec") or {}).get("accessModes") or [])
            for c in claims
            if (pvc := view.pvcs.items.get(f"{self.namespace}/{c}")) is not None
        }
        return {**last_known, **self._known_claim_modes.of(self.namespace, claims)}

    def colocation_view(self) -> ClusterView:
        """The live view of this server's namespace, on the cluster-wide watches every spawner
        of the hub shares (started lazily)."""
        view = ClusterView.shared(self.api.api_client, self.namespace)
        view.stale_after = self.colocation_watch_stale_seconds
        return view

    async def _colocation_state(
        self, view: ClusterView, pod: JsonDict
    ) -> tuple[ClusterState, bool]:
        """The state from the live view, or from direct reads while it is not live; and whether
        it came from the view."""
        try:
            return await view.state_for(pod, first_sync=self.colocation_check_timeout / 2), True
        except ViewNotLive as exc:
            self.log.warning(
                "colocate: the live view of namespace %s is not live (%s); reading the API "
                "directly for %s",
                self.namespace,
                exc,
                self.pod_name,
            )
            metrics.observe_view_fallback()
            return await self._direct_state(pod), False

    async def _direct_state(self, pod: JsonDict) -> ClusterState:
        return await DirectReader(self.api.api_client, self.namespace).state_for(pod)

    @staticmethod
    def _needs_confirmation(view: ClusterView, decision: Decision) -> bool:
        """An unpinned decision on an exclusive claim: the view is only as new as the last event
        it applied, and a holder created a moment ago (or a watch gone silent) is not in it yet
        (docs/decisions.md, "As new as the API")."""
        return decision.verdict == COLOCATE and decision.node is None

    async def _confirmed_unpinned(
        self, view: ClusterView, pod: JsonDict, decision: Decision
    ) -> ClusterState | None:
        """An unpinned decision that needs it (:meth:`_needs_confirmation`) is confirmed by one
        namespaced LIST of pods, sent after the check began (shared by the checks that confirm
        at once), and of VolumeAttachments when the view had no event for a few seconds; None
        when they agree, else the state read directly."""
        if not self._needs_confirmation(view, decision):
            return None
        if await view.confirm_unpinned(pod, decision.claims, attachments=not view.fresh()):
            return None
        metrics.observe_view_fallback()
        return await self._direct_state(pod)

    async def _admitted(
        self, pod: JsonDict, deadline: float, *, fresh: bool = False
    ) -> tuple[JsonDict | None, bool]:
        """The pod after admission, or None (logged) when refused, and whether it came from a
        model (another pod's dry run, or a created pod: not this pod's own): as the last dry run
        of a pod of the same shape admitted it (``colocation_dry_run_reuse_seconds``), else (or
        ``fresh``) by a dry run of its own, which the checks of the same shape that ask
        meanwhile wait for."""
        reuse = self.colocation_dry_run_reuse_seconds
        if reuse <= 0:
            self._dry_runs_made += 1
            return await self._admitted_alone(pod, deadline), False
        models = HubWatches.of_running_loop(self.api.api_client).admission
        key = self._colocation_shape_key = shape_key(pod)
        if fresh:
            return await self._admitted_anew(models, key, pod, deadline), False
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
        return await self._admitted_anew(models, key, pod, deadline), False

    async def _admitted_anew(
        self, models: AdmissionModels, key: str, pod: JsonDict, deadline: float
    ) -> JsonDict | None:
        """A dry run of ``pod``'s own, kept as its shape's model."""
        future = models.begin(key)
        self._dry_runs_made += 1
        admitted: JsonDict | None = None
        try:
            admitted = await self._admitted_alone(pod, deadline)
        finally:
            models.end(key, future, admitted)
        return admitted

    async def _admitted_alone(self, pod: JsonDict, deadline: float) -> JsonDict | None:
        """The pod after admission (server-side dry run), or None (logged) when refused."""
        remaining = deadline - time.perf_counter()
        try:
            if remaining <= 0:
                raise asyncio.TimeoutError()
            admitted = await asyncio.wait_for(self._dry_run(pod, remaining), timeout=remaining)
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

    async def _dry_run(self, pod: JsonDict, seconds: float) -> JsonDict:
        """``admitted_pod``, tried again on a connection error (an API server restart) for up
        to ``seconds``."""

        async def attempt() -> JsonDict | None:
            answer: JsonDict | None = await self._unless_unreachable(
                admitted_pod(self.api.api_client, self.namespace, pod), "dry run", None
            )
            return answer

        admitted: JsonDict = await exponential_backoff(
            attempt,
            f"dry run of pod {self.pod_name}: the API server could not be reached",
            start_wait=0.05,
            max_wait=0.5,
            timeout=seconds,
        )
        return admitted

    async def _unless_unreachable(self, call: Any, what: str, failed: Any) -> Any:
        """Await ``call``; on a connection error (an API server restart) remember it, log it
        and return ``failed`` so that ``exponential_backoff`` tries again."""
        try:
            return await call
        except Exception as exc:
            if not connection_failed(exc):
                raise
            if failed is False:  # a create: its fault, should the retries run out, is this
                self._connection_error = exc
            self.log.info(
                "colocate: %s for %s: the API server could not be reached (%s: %s); trying again",
                what,
                self.pod_name,
                type(exc).__name__,
                exc,
            )
            return failed

    # KubeSpawner retries its creates on a timeout but lets a connection error end the spawn: an
    # API server restart shorter than k8s_api_request_retry_timeout must not.

    async def _make_create_pvc_request(self, pvc: Any, request_timeout: float) -> bool:
        return bool(
            await self._unless_unreachable(
                super()._make_create_pvc_request(pvc, request_timeout), "PVC create", False
            )
        )

    async def _make_create_pod_request(self, pod: Any, request_timeout: float) -> bool:
        created = bool(
            await self._unless_unreachable(
                super()._make_create_pod_request(pod, request_timeout), "pod create", False
            )
        )
        if created:
            self._pod_created_at = datetime.now(timezone.utc)
            await self._until_pod_settles(self._pod_started, "start")
        return created

    async def _make_delete_pod_request(
        self, pod_name: str, delete_options: Any, grace_seconds: int, request_timeout: float
    ) -> bool:
        deleted = bool(
            await super()._make_delete_pod_request(
                pod_name, delete_options, grace_seconds, request_timeout
            )
        )
        if deleted and pod_name == self.pod_name:
            await self._until_pod_settles(lambda pod: pod is None, "stop")
        return deleted

    async def _until_pod_settles(
        self, settled: Callable[[JsonDict | None], bool], what: str
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
        reflector = self.pod_reflector
        if not isinstance(reflector, SharedPodReflector):
            return
        key = f"{self.namespace}/{self.pod_name}"
        if await reflector.wait_for(key, settled, self.start_timeout):
            return
        if reflector.closed or reflector.stopped:
            # replaced meanwhile (another spawn's timeout, a fallback to KubeSpawner's own):
            # not this pod's timeout; KubeSpawner's wait goes on, on the reflector in use
            return
        if what == "start" and key not in reflector.pods:
            self.log.error("Pod %s never showed up in reflector, restarting pod reflector", key)
            await self._start_watching_pods(replace=True)
        elif what == "stop":
            self.log.error("Pod %s did not disappear, restarting pod reflector", key)
            await self._start_watching_pods(replace=True)
        done = "start" if what == "start" else "disappear"
        raise asyncio.TimeoutError(f"pod {key} did not {done} in {self.start_timeout} seconds!")

    def _pod_started(self, pod: JsonDict | None) -> bool:
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
            return bool(self.is_pod_running(pod))
        except (KeyError, TypeError):  # a pod without the status fields KubeSpawner reads yet
            return False

    async def _ensure_namespace(self) -> None:
        async def attempt() -> bool:
            ensure = KubeSpawner._ensure_namespace(self)
            return bool(
                await self._unless_unreachable(_true_after(ensure), "namespace create", False)
            )

        await exponential_backoff(
            attempt,
            f"Could not create namespace {self.namespace}",
            timeout=self.k8s_api_request_retry_timeout,
        )

    async def colocation_decide(self, pod: JsonDict, *, admit_later: bool = False) -> Decision:
        """Gather the state and decide; any error or timeout takes the safe side.

        An unpinned decision from a view that is not fresh is confirmed by the API
        (:meth:`_confirmed_unpinned`); a pinned decision is taken again on the pod as admitted
        (server-side dry run), so RuntimeClass overhead, LimitRange defaults and webhooks are
        judged as the scheduler will see them.  With ``admit_later`` these requests, for a
        decision that lets the pod start, are sent and not awaited: the decision returned is
        the one from memory, and :meth:`_settle_check` (called from ``get_pod_manifest``, after
        KubeSpawner started its reflectors and created the PVC meanwhile) awaits them and takes
        the decision again on their answers; it is logged and counted then.  A refusal is
        always taken on the answers before it is told.
        """
        view = self.colocation_view()
        started = time.perf_counter()
        deadline = started + self.colocation_check_timeout
        self._dry_runs_made = 0  # (a reused dry run makes none)
        self._colocation_shape_key = None
        policy = self.colocation_policy()
        try:
            # From memory when the view is live: no await, so no other task (a reflector's
            # re-list, say) runs inside the check and nothing changes the view meanwhile.
            remembered = view.state_now(pod)
            if remembered is not None:
                state, from_view = remembered, True
            else:
                state, from_view = await asyncio.wait_for(
                    self._colocation_state(view, pod), timeout=self.colocation_check_timeout
                )
            self._known_claim_modes.learn(self.namespace, pod_claims(pod), state)
            decision = decide(pod, state, policy)
        except Exception as exc:
            decision = self._safe_side(view, pod, exc)
            return self._decided(decision, time.perf_counter() - started, 0.0, 0.0, safe=True)
        confirm = from_view and self._needs_confirmation(view, decision)
        if admit_later and decision.verdict != REFUSE and (confirm or decision.node is not None):
            rest = self._finish_check(view, pod, state, policy, decision, deadline, confirm, True)
            self._late_check = _LateCheck(
                asyncio.ensure_future(rest), time.perf_counter() - started
            )
            return decision
        decision, round_trip, safe = await self._finish_check(
            view, pod, state, policy, decision, deadline, confirm, from_view
        )
        elapsed = time.perf_counter() - started
        return self._decided(decision, elapsed - round_trip, round_trip, round_trip, safe=safe)

    async def _finish_check(
        self,
        view: ClusterView,
        pod: JsonDict,
        state: ClusterState,
        policy: Policy,
        decision: Decision,
        deadline: float,
        confirm: bool,
        from_view: bool,
    ) -> tuple[Decision, float, bool]:
        """The rest of a check after the decision from memory: its confirmation (``confirm``),
        the dry run of a pinned pod, and a refusal's holders read by name (``from_view``),
        each deciding again; the decision, the dry run's round trip, and whether the safe side
        was taken."""
        round_trip = 0.0
        try:
            # (asked first: before Python 3.12 ``wait_for`` costs a trip through the loop's
            # queue even when nothing is confirmed, and in a burst that trip is long)
            if confirm:
                confirmed = await asyncio.wait_for(
                    self._confirmed_unpinned(view, pod, decision),
                    timeout=max(deadline - time.perf_counter(), 0.01),
                )
                if confirmed is not None:
                    state = confirmed
                    decision = decide(pod, state, policy)
            decision, round_trip = await self._as_admitted(pod, state, policy, decision, deadline)
            if decision.verdict == REFUSE and from_view:
                # Told only on a view as new as the API: its holders, read by name, are still
                # there; else (deleted a moment ago) the API is read directly and decides.
                current = await asyncio.wait_for(
                    view.holders_current(decision.holder_pods),
                    timeout=max(deadline - time.perf_counter(), 0.01),
                )
                if not current:
                    metrics.observe_view_fallback()
                    state = await asyncio.wait_for(
                        self._direct_state(pod), max(deadline - time.perf_counter(), 0.01)
                    )
                    decision = decide(pod, state, policy)
                    decision, more = await self._as_admitted(pod, state, policy, decision, deadline)
                    round_trip += more
        except Exception as exc:
            return self._safe_side(view, pod, exc), round_trip, True
        return decision, round_trip, False

    async def _as_admitted(
        self,
        pod: JsonDict,
        state: ClusterState,
        policy: Policy,
        decision: Decision,
        deadline: float,
    ) -> tuple[Decision, float]:
        """A pinned decision taken again on the pod as admitted, and the dry run's round trip.
        A model of the pod's shape is never the only ground of a refusal: what admission reads
        may have changed since (a LimitRange, a RuntimeClass's overhead), so a refusal on it is
        judged again on the pod's own dry run (docs/decisions.md, "One per shape")."""
        if decision.node is None:
            return decision, 0.0
        before = time.perf_counter()
        admitted, modelled = await self._admitted(pod, deadline)
        if admitted is not None:
            decision = decide(admitted, state, policy)
        if modelled and decision.verdict == REFUSE:
            admitted, _ = await self._admitted(pod, deadline, fresh=True)
            decision = decide(pod if admitted is None else admitted, state, policy)
        return decision, time.perf_counter() - before

    def _safe_side(self, view: ClusterView, pod: JsonDict, exc: Exception) -> Decision:
        why = (
            f"state not gathered within {self.colocation_check_timeout}s (colocation_check_timeout)"
            if isinstance(exc, asyncio.TimeoutError)
            else f"state not gathered: {type(exc).__name__}: {exc}"
        )
        # A timeout is expected under load; anything else is a bug or an API surprise.
        self.log.warning(
            "colocate: %s; taking the safe side",
            why,
            exc_info=not isinstance(exc, asyncio.TimeoutError),
        )
        known = [*view.known_pods(pod), *(self._reflector_pods() or [])]
        return safe_side(
            pod,
            known,
            why,
            namespace=self.namespace,
            known_modes=self._claim_modes(view, pod),
            exclusive_by_config=self._exclusive_by_config(),
        )

    def _exclusive_by_config(self) -> list[str]:
        """The claims the configuration says are exclusive: the one this hub creates itself
        (``storage_pvc_ensure``) with modes that are not shared.  A claim the hub does not
        create (Nebari's static share, a hook's workspace) has modes no setting here tells."""
        if not self.storage_pvc_ensure or not is_exclusive(self.storage_access_modes or []):
            return []
        return [self.pvc_name]

    def _decided(
        self, decision: Decision, check: float, waited: float, round_trip: float, *, safe: bool
    ) -> Decision:
        """Count and log a decision: ``check`` seconds gathering and deciding, and ``waited``
        more waiting for what was sent and not awaited (``round_trip``: the dry run's own
        duration, or the wait for another check's)."""
        self.colocation_timings = {
            "check": check,
            "dry_run": waited,
            "dry_run_round_trip": round_trip,
            "dry_runs_made": float(self._dry_runs_made),
        }
        elapsed = check + waited
        metrics.observe_decision(decision, elapsed, safe_side=safe)
        line = messages.operator_line(decision, username=self.user.name, server_name=self.name)
        log = self.log.warning if decision.verdict == REFUSE or decision.warnings else self.log.info
        log("%s seconds=%.3f dry_run_seconds=%.3f", line, elapsed, round_trip)
        return decision

    async def _settle_check(self, late: _LateCheck) -> Decision:
        """The decision of a check whose confirmation or dry run was sent and not awaited
        (``admit_later``), once they answered."""
        before = time.perf_counter()
        decision, round_trip, safe = await late.task
        waited = time.perf_counter() - before
        return self._decided(decision, late.check_seconds, waited, round_trip, safe=safe)

    def _cancel_late_check(self) -> None:
        late, self._late_check = self._late_check, None
        if late is not None and not late.task.done():
            late.task.cancel()

    def _refusal(self, decision: Decision, pod: JsonDict) -> ColocationRefused:
        args = {
            "username": self.user.name,
            "server_name": self.name,
            "user_label": safe_slug(self.user.name, is_valid=is_valid_label),
            "has_profiles": bool(self.profile_list),
            "display_names": self.server_display_names(),
        }
        shown = messages.user_html(decision, pod, **args)
        if decision.way_out is not None:
            form = messages.way_out_form_html(
                decision.way_out, action=self.way_out_url(), display_names=args["display_names"]
            )
            shown = shown.removesuffix("</div>") + form + "</div>"
        return ColocationRefused(
            messages.user_message(decision, pod, **args),
            shown,
            messages.operator_line(decision, username=self.user.name, server_name=self.name),
            decision=decision,
        )

    def way_out_url(self) -> str:
        """The way out's handler for this server (``nebari_colocate.handlers``), under the
        hub's base URL: where the button of a refusal with a way out posts."""
        base = getattr(getattr(self, "hub", None), "base_url", None) or "/hub/"
        path = url_path_join(base, "colocate/way-out", url_escape_path(self.user.name))
        return f"{path}/{url_escape_path(self.name or '')}"

    def _remember(self, refused: ColocationRefused) -> None:
        """Keep the refusal as ``colocation_failure``, with what the way out re-checks before it
        stops anything (nebari_colocate.handlers) when there is a way out."""
        refusal: Refusal = refused.refusal
        way_out, decision = refusal.way_out, refusal.decision
        blockers = None
        if way_out is not None and decision is not None:
            blockers = WayOutBlockers(
                claims=tuple(sorted(decision.claims)),
                node=decision.node,
                servers=tuple(sorted(pod_server(p) for p in decision.holder_pods)),
            )
        placed = self._colocation_decision if refusal.event_verdict is not None else None
        if way_out is not None and placed is not None:
            # A spawn ended by its pod's events: the holders are those servers, wherever the
            # volume is attached now (the node of their pods).
            claims = sorted(placed.claims)
            nodes = {
                ((p.get("spec") or {}).get("nodeName") or "")
                for p in self.home_pods(claims)
                if pod_server(p) in set(way_out.stop)
            }
            nodes.discard("")
            blockers = WayOutBlockers(
                claims=tuple(claims),
                node=nodes.pop() if len(nodes) == 1 else placed.node,
                servers=tuple(way_out.stop),
            )
        self.colocation_failure = replace(refusal, blockers=blockers)

    # ------------------------------------------------------------------------------------------
    # what the way out reads (nebari_colocate.handlers)

    def home_pods(self, claims: list[str]) -> list[JsonDict]:
        """The pods using ``claims`` in this namespace: from the live view when it is live, else
        the pod reflector's server pods."""
        view = self.colocation_view()
        if view.live:
            found = {
                (p.get("metadata") or {}).get("name"): p
                for c in claims
                for p in view.by_claim.get(f"{self.namespace}/{c}")
            }
            return list(found.values())
        wanted = set(claims)
        return [p for p in self._reflector_pods() or [] if wanted.intersection(pod_claims(p))]

    def home_attached_nodes(self, claims: list[str]) -> set[str] | None:
        """The nodes the volumes of ``claims`` are attached to (VolumeAttachments with
        ``status.attached``), from the live view; None when it cannot tell (not live, or no
        permission to read VolumeAttachments)."""
        view = self.colocation_view()
        if not view.live or view.attachments.forbidden:
            return None
        nodes: set[str] = set()
        for claim in claims:
            pvc = view.pvcs.items.get(f"{self.namespace}/{claim}")
            pv = ((pvc or {}).get("spec") or {}).get("volumeName")
            if pv:
                nodes |= attached_nodes(view.attachments_by_pv.get(pv), pv)
        return nodes

    def _live_view(self) -> ClusterView | None:
        view = self.colocation_view()
        view.start()  # a hub that has not spawned since it started: the watches begin here
        return view if view.live else None

    def premium_rides(self) -> tuple[PremiumRide, ...]:
        """This user's servers that keep a premium node running with none of the user's
        servers there needing it (:func:`nebari_colocate.wayout.premium_rides`), from the live
        view; empty while it is not live or the Nodes cannot be read (nothing can be told)."""
        view = self._live_view()
        if view is None or view.nodes.forbidden:
            return ()
        pods = [p for p in view.pods.items.values() if meta(p).get("namespace") == self.namespace]
        nodes = {meta(n).get("name", ""): n for n in view.nodes.items.values()}
        return premium_rides(
            pods,
            nodes,
            username=self.user.name,
            label_value=self.colocation_label_value,
            premium_resources=self.premium_resources,
        )

    def premium_nodes(self) -> tuple[tuple[str, str | None, str | None], ...]:
        """Every premium node of the live view, (name, ``kubernetes.io/hostname`` label,
        ``karpenter.sh/nodepool`` label): what a moved server is kept off
        (:func:`nebari_colocate.affinity.avoid_nodes`)."""
        view = self._live_view()
        if view is None or view.nodes.forbidden:
            return ()
        found = []
        for node in view.nodes.items.values():
            if offered(node, self.premium_resources):
                labels = meta(node).get("labels") or {}
                name = str(meta(node).get("name", ""))
                found.append((name, labels.get(HOSTNAME), labels.get(NODEPOOL_LABEL)))
        return tuple(sorted(found))

    def exclusive_claims_of(self, servers: Sequence[str]) -> list[str]:
        """The exclusive claims (by the live view's claims; a claim not known counts by
        ``storage_access_mode``) that this user's running ``servers`` mount."""
        view = self.colocation_view()
        wanted = set(servers)
        claims: set[str] = set()
        for pod in view.pods.items.values():
            if meta(pod).get("namespace") != self.namespace or not is_server(pod):
                continue
            mine = owned_by(pod, self.user.name, self.colocation_label_value)
            if mine and pod_server(pod) in wanted:
                claims.update(pod_claims(pod))
        found = []
        for claim in sorted(claims):
            pvc = view.pvcs.items.get(f"{self.namespace}/{claim}")
            modes = ((pvc or {}).get("spec") or {}).get("accessModes") or [self.storage_access_mode]
            if is_exclusive(modes):
                found.append(claim)
        return found

    async def _hold(self, refusal: ColocationRefused) -> None:
        """Keep a REST-requested refused spawn pending for ``refusal_hold_seconds``, with the
        reason in the progress stream, so pages that look again see how it ended."""
        self._remember(refusal)
        if self.refusal_hold_seconds <= 0 or not requested_through_rest_api(self):
            return
        self._held_refusal = refusal
        try:
            await asyncio.sleep(self.refusal_hold_seconds)
        finally:
            self._held_refusal = None

    def _serialize(self, pod: Any) -> JsonDict:
        serialized: JsonDict = self.api.api_client.sanitize_for_serialization(pod)
        return serialized

    async def _check(self, pod: JsonDict, *, admit_later: bool = False) -> Decision:
        decision = await self.colocation_decide(pod, admit_later=admit_later)
        return await self._unless_refused(decision, pod)

    async def _unless_refused(self, decision: Decision, pod: JsonDict) -> Decision:
        if decision.verdict == REFUSE:
            self._release_colocation_lock()
            refusal = self._refusal(decision, pod)
            await self._hold(refusal)
            uncount_refusal(self)
            raise refusal
        return decision

    async def load_user_options(self) -> None:
        """Apply the profile, then run the check before the PVC or the pod exists."""
        await super().load_user_options()
        self.colocation_failure = None
        self._colocation_checked = None
        self._cancel_late_check()
        await self._acquire_colocation_lock()
        task = asyncio.current_task()
        if task is not None:
            task.add_done_callback(lambda _: self._release_colocation_lock())
            task.add_done_callback(lambda _: self._cancel_late_check())
        pod = self._serialize(await super().get_pod_manifest())
        # A confirmation or a pinned pod's dry run goes on while KubeSpawner starts its
        # reflectors and creates the PVC; get_pod_manifest takes the decision again on it.
        decision = await self._check(pod, admit_later=True)
        self._colocation_checked = (_placement_fingerprint(pod), decision)

    async def get_pod_manifest(self) -> Any:
        """KubeSpawner's manifest with the co-location label and affinity merged in."""
        written = await super().get_pod_manifest()
        pod = self._serialize(written)
        checked = self._colocation_checked
        self._colocation_checked = None
        late, self._late_check = self._late_check, None
        if checked is not None and checked[0] == _placement_fingerprint(pod):
            decision = checked[1]
            if late is not None:
                decision = await self._unless_refused(await self._settle_check(late), pod)
        else:
            if late is not None:
                late.task.cancel()
            await self._acquire_colocation_lock()
            decision = await self._check(pod)
        self._colocation_decision = decision
        self._requests_premium = requests_any(pod, self.premium_resources)
        # A term that survived configure(c) (set by a pre_spawn_hook, user options, a config
        # not cleaned) is taken out by apply_decision; say so, once per manifest.
        hand_written = user_colocation_keys(
            pod, self.colocation_label_key, self.colocation_label_value
        )
        if hand_written:
            self.log.info(messages.dropped_manifest_terms_line(self.pod_name, hand_written))
        manifest = apply_decision(
            pod, decision, self.colocation_label_key, self.colocation_label_value
        )
        if self.colocation_move_off and decision.node is None:
            # the move off a premium node: not pinned (the home was released), so keep the pod
            # off every premium node, or the scheduler may put it back where it was
            manifest = avoid_nodes(manifest, self.colocation_move_off)
        lesson = self._admission_lesson(pod, manifest, decision)
        if self._colocation_lock_held or lesson is not None:
            self._colocation_release_task = asyncio.ensure_future(self._once_pod_visible(lesson))
        if decision.verdict == SKIP:
            self.log.debug("colocate: no exclusive claim for %s", self.pod_name)
        return self._placed(written, manifest)

    def _placed(self, written: Any, manifest: JsonDict) -> Any:
        """KubeSpawner's V1Pod ``written`` given the labels and the affinity of ``manifest``
        (what ``apply_decision`` and ``avoid_nodes`` change of it; the rest is ``written``'s
        own, serialised into ``manifest`` unchanged), in place: no JSON round trip of the whole
        pod per spawn."""
        written.metadata.labels = dict(meta(manifest).get("labels") or {})
        affinity = (manifest.get("spec") or {}).get("affinity")
        written.spec.affinity = (
            self.api.api_client.deserialize(
                SimpleNamespace(data=json.dumps(affinity)), "V1Affinity"
            )
            if affinity
            else None
        )
        return written

    # ------------------------------------------------------------------------------------------
    # fail fast after the pod exists

    def _own_servers(self) -> dict[str, str]:
        """Pod name -> the name the user knows for each of this user's pods (for Multi-Attach
        messages): the display name, else the server name ("" for the default server)."""
        own = {}
        names = self.server_display_names()
        for pod in self._reflector_pods() or []:
            annotations = (pod.get("metadata") or {}).get("annotations") or {}
            if annotations.get(USERNAME_ANNOTATION) == self.user.name:
                server = annotations.get(SERVERNAME_ANNOTATION, "")
                own[pod["metadata"]["name"]] = names.get(server) or server
        return own

    @property
    def events(self) -> list[JsonDict]:
        """This pod's events since the spawn began, oldest first: KubeSpawner's ``events``, the
        same list, for less.  KubeSpawner sorts every event of the namespace, then keeps this
        pod's; polled by every starting spawn twice a second (the fail fast) and by its progress
        stream, in a burst of 100 spawns that sort was the largest cost on the hub's loop.  Here
        this pod's events are picked first and only they are sorted (the same key; a stable sort
        of a subsequence keeps the order KubeSpawner gives), then cut at ``_last_event`` as
        KubeSpawner does."""
        reflector = self.event_reflector
        if not reflector:
            return []
        name = self.pod_name
        mine = [
            event
            for event in list(reflector.resources.values())
            if event["involvedObject"]["name"] == name
        ]
        mine.sort(key=lambda event: event["lastTimestamp"] or event["eventTime"])
        last = self._last_event
        if last:
            for i in range(len(mine) - 1, -1, -1):
                if mine[i]["metadata"]["uid"] == last:
                    return mine[i + 1 :]
        return mine

    def classify_events(self, pod: JsonDict | None = None) -> EventVerdict:
        """The verdict on this pod's events so far (KubeSpawner's ``events``) and on the pod
        itself (``pod``, else the pod reflector's: :mod:`nebari_colocate.pod_scheduling`).

        Whether it fails never depends on the user's other pods, only its words and its way out
        do: so the pod maps (three passes over the pod reflector) are built only for a verdict
        that fails, which is rare, and not on every poll of every starting spawn."""
        decision = self._colocation_decision
        events = self.events
        common: dict[str, Any] = {
            "pinned_node": decision.node if decision is not None else None,
            "now": datetime.now(timezone.utc),
            "unschedulable_grace_seconds": self.unschedulable_grace_seconds,
            "image_pull_grace_seconds": self.image_pull_grace_seconds,
            "detach_grace_seconds": self.detach_grace_seconds,
            "wants_gpu": self._requests_premium,
            "server_name": self.name or "",
            "pinned_holders": (
                decision.holders if decision is not None and decision.pinned_by == "holders" else ()
            ),
            "pod": pod or reflected_pod(self.pod_reflector, self.namespace, self.pod_name),
            "created": self._pod_created_at,
            "unscheduled_timeout_seconds": self.colocation_unscheduled_timeout,
            "preemption_grace_seconds": self.preemption_grace_seconds,
        }
        verdict = classify(events, **common)
        if verdict.action != FAIL:
            return verdict
        return classify(
            events,
            **common,
            own_servers=self._own_servers(),
            servers=self._server_pod_names(),
            own_server_names=self._own_server_names(),
        )

    def _own_server_names(self) -> dict[str, str]:
        """Pod name -> server name ("" the default server) of each of this user's server pods
        (what the way out of a spawn ended by pod events stops)."""
        own = {}
        for pod in self._reflector_pods() or []:
            annotations = (pod.get("metadata") or {}).get("annotations") or {}
            if annotations.get(USERNAME_ANNOTATION) == self.user.name:
                own[pod["metadata"]["name"]] = annotations.get(SERVERNAME_ANNOTATION, "")
        return own

    def _server_pod_names(self) -> set[str] | None:
        """The names of the namespace's JupyterHub server pods (the pod reflector's), or None
        while it is not synced."""
        pods = self._reflector_pods()
        if pods is None:
            return None
        return {(p.get("metadata") or {}).get("name", "") for p in pods}

    def _pod_names_for_browser(self) -> tuple[set[str], set[str]]:
        """(the user's own pod names, the other pod names this hub knows): what the progress
        stream may name, and what it must not (:func:`messages.browser_event`)."""
        own = {self.pod_name, *self._own_servers()}
        known = set(self._server_pod_names() or ())
        decision = self._colocation_decision
        if decision is not None:
            known.update(decision.holders)
        return own, known - own

    async def _watch_events(self, start_future: asyncio.Future[Any]) -> EventVerdict | None:
        """Poll the event reflector until the start finishes or a verdict says fail (one drawn
        from the pod's silence confirmed by a read of the pod by name)."""
        while not start_future.done():
            if self.event_reflector is not None and self._colocation_decision is not None:
                verdict = self.classify_events()
                if verdict.action == FAIL:
                    found = await confirmed(
                        verdict,
                        lambda: read_pod(
                            self.api, self.namespace, self.pod_name, self.k8s_api_request_timeout
                        ),
                        lambda pod: self.classify_events(pod),
                    )
                    if found is not None:
                        return found
            await asyncio.sleep(self.event_poll_interval)
        return None

    #: seconds between looks at the event reflector's cache while a pod starts
    event_poll_interval = EVENT_POLL_INTERVAL

    #: seconds a pod nominated by preemption may wait for its victims to be gone
    #: (:data:`nebari_colocate.config.PREEMPTION_GRACE_SECONDS`)
    preemption_grace_seconds = PREEMPTION_GRACE_SECONDS

    #: when this spawn's pod create request succeeded (the ``no-scheduler`` rule counts from it)
    _pod_created_at: datetime | None = None

    #: seconds a spawn the API failed keeps watching for its pod, to delete it
    #: (:data:`nebari_colocate.config.API_FAULT_SWEEP_SECONDS`)
    api_fault_sweep_seconds = API_FAULT_SWEEP_SECONDS

    async def start(self) -> Any:
        """KubeSpawner's start, ended early when the pod's events say it cannot succeed; a spawn
        the Kubernetes API fails ends with words (:class:`KubernetesApiFault`)."""
        self._stop_api_fault_sweep()
        self._connection_error = None
        started = time.time()
        try:
            with self._awaiting_pod():
                return await self._start_failing_fast()
        except Exception as exc:
            fault = api_fault(exc)
            if fault is None:
                raise
            if fault[0] == TIMEOUT and self._connection_error is not None:
                # The retries ran out on connection errors: say so, not "did not answer".
                error = self._connection_error
                fault = (UNREACHABLE, f"{type(error).__name__}: {error}")
            raise self._api_fault_error(exc, *fault, started=started) from exc
        finally:
            self.colocation_move_off = ()  # for one start only

    async def poll(self) -> int | None:
        """KubeSpawner's poll; with the shared reflector, this server's pod is read by name
        first while the view's pod watch is quiet or broken (a pod deleted behind the hub's
        back must not look running until the watch is listed again)."""
        if self._shares_pod_watch():
            reflector = await self._start_watching_pods()
            if isinstance(reflector, SharedPodReflector):
                # (at most one request's time: a poll of a hung API answers from the store)
                await reflector.read_if_quiet(
                    f"{self.namespace}/{self.pod_name}", timeout=self.k8s_api_request_timeout
                )
        status: int | None = await super().poll()
        return status

    async def stop(self, now: bool = False) -> None:
        """KubeSpawner's stop; its wait for the pod to be gone reads the pod by name should the
        shared reflector's watch go quiet."""
        with self._awaiting_pod():
            await super().stop(now=now)

    def _api_fault_error(
        self, exc: BaseException, fault: str, detail: str, *, started: float
    ) -> KubernetesApiFault:
        self._release_colocation_lock()
        log_message = messages.api_fault_operator_line(
            fault, exc, username=self.user.name, server_name=self.name, pod_name=self.pod_name
        )
        self.log.warning(log_message)
        metrics.observe_api_fault(fault)
        if fault != REJECTED:
            task = asyncio.ensure_future(self._sweep_after_api_fault(self.pod_name, started))
            ColocatingKubeSpawner._api_fault_sweeps.add(task)
            task.add_done_callback(ColocatingKubeSpawner._api_fault_sweeps.discard)
            self._api_fault_sweep = task
        return KubernetesApiFault(
            messages.api_fault_message(fault, server_name=self.name, detail=detail),
            messages.api_fault_html(fault, server_name=self.name, detail=detail),
            log_message,
            fault,
        )

    def _stop_api_fault_sweep(self) -> None:
        task = getattr(self, "_api_fault_sweep", None)
        if task is not None and not task.done():
            task.cancel()
        self._api_fault_sweep = None

    async def _sweep_after_api_fault(self, pod_name: str, started: float) -> None:
        await sweep_late_pod(
            self.api,
            self.namespace,
            pod_name,
            started=started,
            seconds=self.api_fault_sweep_seconds,
            request_timeout=self.k8s_api_request_timeout,
            grace_period=self.delete_grace_period,
            deleting=lambda created: self.log.warning(
                messages.late_pod_delete_line(pod_name, created, started)
            ),
            delete_failed=lambda exc: self.log.info(
                messages.late_pod_delete_failed_line(pod_name, exc)
            ),
        )

    async def _start_failing_fast(self) -> Any:
        # The decision belongs to one spawn: a previous spawn's, with the events of the previous
        # pod of this name (KubeSpawner's ``events`` shows them all until ``_start`` sets its
        # marker), would end the new spawn at once with a stale verdict, before its own check.
        self._colocation_decision = None
        self._pod_created_at = None
        start_future = super().start()
        if not (self.fail_fast_on_events and self.events_enabled):
            return await start_future
        watcher = asyncio.ensure_future(self._watch_events(start_future))
        try:
            await asyncio.wait({start_future, watcher}, return_when=asyncio.FIRST_COMPLETED)
            verdict = watcher.result() if watcher.done() else None
            if verdict is None:
                return await start_future
        finally:
            if not watcher.done():
                watcher.cancel()
        return await self._end_hopeless_spawn(start_future, verdict)

    async def _end_hopeless_spawn(
        self, start_future: asyncio.Future[Any], verdict: EventVerdict
    ) -> NoReturn:
        start_future.cancel()
        with contextlib.suppress(BaseException):
            await start_future
        self._release_colocation_lock()
        log_message = messages.event_operator_line(
            verdict, username=self.user.name, server_name=self.name, pod_name=self.pod_name
        )
        self.log.warning(log_message)
        metrics.observe_event_verdict(verdict.reason or "unknown")
        try:
            await self.stop(now=True)
        except Exception:
            self.log.exception("colocate: could not delete pod %s", self.pod_name)
        message, message_html = messages.event_refusal(
            verdict, self.name, self.server_display_names(), action=self.way_out_url()
        )
        refusal = ColocationRefused(message, message_html, log_message, event_verdict=verdict)
        self._remember(refusal)
        uncount_refusal(self)
        raise refusal

    async def progress(self) -> AsyncIterator[dict[str, Any]]:
        """Progress of the spawn for the spawn-pending page, in plain language.

        Like KubeSpawner's, it reports this pod's events until the start finishes, but it tracks
        events by uid (KubeSpawner's index into a time-sorted list skips an event that sorts
        before one already shown, e.g. an autoscaler event with a coarser timestamp than the
        scheduler's) and tells scheduling, autoscaler, attach and image events in words.
        """
        if not self.events_enabled:
            return
        await self._start_watching_events()
        seen: set[object] = set()  # uids, or ids of events without one
        progress = 0.0
        last_text = ""
        started = time.perf_counter()
        last_patience = 0.0
        while True:
            start_future = self._start_future
            finished = start_future is not None and start_future.done()
            elapsed = time.perf_counter() - started
            # The patience-message traits may be absent (a branch without them): then no message.
            threshold = getattr(self, "slow_spawn_message_threshold", 0) or 0
            if (
                0 < threshold <= elapsed
                and elapsed >= last_patience + self.slow_spawn_message_frequency
            ):
                last_patience = elapsed
                yield {"message": self.slow_spawn_message.format(seconds=int(elapsed)).strip()}
            held = self._held_refusal
            if held is not None and last_text != held.jupyterhub_message:
                last_text = held.jupyterhub_message
                yield {
                    "progress": 100,
                    "message": held.jupyterhub_message,
                    "html_message": held.jupyterhub_html_message,
                    # for front ends other than JupyterHub's pages (docs/surfaces.md)
                    "way_out": held.way_out,
                }
            verdict = self.classify_events() if self._colocation_decision is not None else None
            words = messages.event_text(verdict) if verdict is not None else ""
            own_pods, other_pods = self._pod_names_for_browser()
            for event in self.events:
                uid = (event.get("metadata") or {}).get("uid") or id(event)
                if uid in seen:
                    continue
                seen.add(uid)
                progress += (90 - progress) / 3
                # JupyterHub sends every field to the browser: never another user's pod names.
                shown = messages.browser_event(event, own_pods, other_pods)
                text = messages.progress_line(shown, words)
                if text == last_text:
                    continue
                last_text = text
                yield {"progress": int(progress), "raw_event": shown, "message": text}
            if words and words != last_text:
                last_text = words
                yield {"progress": int(progress), "message": last_text}
            if finished:
                break
            await asyncio.sleep(1)


async def _true_after(call: Any) -> bool:
    await call
    return True


def _built_by_jhub_apps(cls: type) -> bool:
    return any(base.__module__.startswith("jhub_apps") for base in cls.__mro__)
