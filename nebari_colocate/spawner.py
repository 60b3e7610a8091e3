"""ColocatingKubeSpawner: KubeSpawner that knows about per-user volumes.

The imperative shell around the pure core: it reads the state through the live view
(:mod:`nebari_colocate.view`), calls :func:`nebari_colocate.placement.decide`, and either merges
the affinity into the pod manifest or refuses the spawn at once with a reason a person can act on.
The class keeps the traits and thin overrides of KubeSpawner's hooks; the work is done by a
per-spawn :class:`nebari_colocate.check.SpawnCheck`, :mod:`nebari_colocate.pod_watch` (the pod
reflector on the live view's watch), :mod:`nebari_colocate.fail_fast` (events, fail fast,
progress) and :mod:`nebari_colocate.api_faults`.

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
import dataclasses
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from datetime import datetime, timezone
from typing import Any, ClassVar

from jupyterhub.utils import exponential_backoff
from kubespawner import KubeSpawner
from kubespawner.slugs import is_valid_label, safe_slug
from traitlets import (
    default,
    validate,
)

from . import api_faults, fail_fast, messages, observe_mode, pod_watch, refusing
from .admission import shape_key
from .affinity import apply_decision, avoid_nodes, user_colocation_keys
from .check import (
    CheckSettings,
    LateCheck,
    Lesson,
    SpawnCheck,
    admission_lesson,
    learn_admission,
    placement_fingerprint,
    told,
)
from .config import (
    API_FAULT_SWEEP_SECONDS,
    EVENT_POLL_INTERVAL,
    MODE_OBSERVE,
    PREEMPTION_GRACE_SECONDS,
    SETTINGS,
    check_mode_conflicts,
)
from .events import EventVerdict
from .faults import KubernetesApiFault
from .fit import requests_any
from .headroom_spawner import HeadroomSpawner
from .history import record_refused
from .jupyterhub import (
    JUPYTERHUB_MAJOR,
    ColocationRefused,
    before_raising,
    server_display_names,
)
from .known_modes import KnownModes
from .kubeapi import with_placement
from .locks import UserLocks
from .objects import JsonDict, is_exclusive, pod_claims
from .placement import COLOCATE, REFUSE, SKIP, Decision, Policy
from .refusal import Refusal, kept
from .shared_reflector import SharedPodReflector, awaiting, reflector_fields_ok
from .spawner_settings import ColocationSettings
from .state import ClusterState
from .view import ClusterView
from .wayout import PremiumRide, premium_rides

__all__ = ["JUPYTERHUB_MAJOR", "ColocatingKubeSpawner", "ColocationRefused", "KubernetesApiFault"]


class ColocatingKubeSpawner(HeadroomSpawner, ColocationSettings, KubeSpawner):  # type: ignore[misc]  # KubeSpawner ships no types
    """A KubeSpawner that co-locates a user's servers on exclusive (ReadWriteOnce) volumes.

    Before a server pod is created it looks at the user's other running servers and the
    volumes the pod mounts, then adds the co-location affinity a ReadWriteOnce home needs, skips
    it for ReadWriteMany storage, or refuses the spawn at once with a reason the user can act on.
    """

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
        self._late_check: LateCheck | None = None
        #: the last check of this spawn: its dry runs (``colocation_timings``) and the admission
        #: shape key it computed, reused by the lesson of the pod it lets be created
        #: (``_admission_lesson``)
        self._colocation_check: SpawnCheck | None = None
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
        #: for the next start only, set by the move of the whole set (set_move_step): the node
        #: an unpinned pod is pinned to, the one chosen for the set (setmove.choose_target)
        self.colocation_move_to: str | None = None

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
        """Server name -> the name this user knows it by, for the user's own servers only
        (:func:`nebari_colocate.jupyterhub.server_display_names`)."""
        return server_display_names(self)

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

    async def _once_pod_visible(self, lesson: Lesson | None = None) -> None:
        """Once the new pod is in the reflector (or after the retry timeout): release the lock,
        so the next spawn of this user sees the pod, and learn its shape's admission from it
        (``lesson``: :meth:`_admission_lesson`)."""

        def learn(created: Any) -> None:
            if lesson is not None:
                self._learn_admission(lesson, created)

        try:
            await pod_watch.once_visible(self, learn)
        finally:
            self._release_colocation_lock()

    def _admission_lesson(
        self, written: JsonDict, manifest: JsonDict, decision: Decision
    ) -> Lesson | None:
        """What the pod about to be created may teach its shape (``nebari_colocate.admission``:
        no dry run for the user's next, pinned, server of the profile): only a pod with an
        exclusive claim (``colocate``), while its shape has no model, and no
        ``modify_pod_hook`` (what it changes after this manifest is not admission's doing)."""
        reuse = self.colocation_dry_run_reuse_seconds
        if reuse <= 0 or decision.verdict != COLOCATE or self.modify_pod_hook is not None:
            return None
        # The check's key when it computed one: its pod had this manifest's fingerprint, which
        # holds every field of the shape.
        check = self._colocation_check
        key = (check.shape_key if check is not None else None) or shape_key(written)
        reflector = self.pod_reflector
        before = reflector.pods.get(f"{self.namespace}/{self.pod_name}") if reflector else None
        return admission_lesson(self.api.api_client, key, reuse, written, manifest, before)

    def _learn_admission(self, lesson: Lesson, created: Any) -> None:
        reuse = self.colocation_dry_run_reuse_seconds
        learn_admission(self.api.api_client, lesson, created, reuse, self.log, self.pod_name)

    # ------------------------------------------------------------------------------------------
    # the pod reflector, on the live view's watch (nebari_colocate.shared_reflector)

    def _shares_pod_watch(self) -> bool:
        return bool(self.colocation_share_pod_watch) and reflector_fields_ok(self)

    async def _start_watching_pods(self, replace: bool = False) -> Any:
        """KubeSpawner's pod reflector, made of the live view's watch when it can be
        (``colocation_share_pod_watch``: :func:`nebari_colocate.pod_watch.start_watching_pods`),
        else KubeSpawner's own."""
        stock = super()._start_watching_pods
        if not self._shares_pod_watch():
            return await stock(replace=replace)
        return await pod_watch.start_watching_pods(self, stock, replace=replace)

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

    # ------------------------------------------------------------------------------------------
    # the check

    def _reflector_pods(self) -> list[JsonDict] | None:
        reflector = self.pod_reflector
        if reflector is None or not reflector.first_load_future.done():
            return None
        if reflector.first_load_future.exception() is not None:
            return None
        return list(reflector.pods.values())

    def colocation_view(self) -> ClusterView:
        """The live view of this server's namespace, on the cluster-wide watches every spawner
        of the hub shares (started lazily)."""
        view = ClusterView.shared(self.api.api_client, self.namespace)
        view.stale_after = self.colocation_watch_stale_seconds
        return view

    # KubeSpawner retries its creates on a timeout but lets a connection error end the spawn: an
    # API server restart shorter than k8s_api_request_retry_timeout must not.

    async def _make_create_pvc_request(self, pvc: Any, request_timeout: float) -> bool:
        return bool(
            await api_faults.unless_unreachable(
                self, super()._make_create_pvc_request(pvc, request_timeout), "PVC create", False
            )
        )

    async def _make_create_pod_request(self, pod: Any, request_timeout: float) -> bool:
        created = bool(
            await api_faults.unless_unreachable(
                self, super()._make_create_pod_request(pod, request_timeout), "pod create", False
            )
        )
        if created:
            self._pod_created_at = datetime.now(timezone.utc)
            await pod_watch.until_pod_settles(self, self._pod_started, "start")
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
            await pod_watch.until_pod_settles(self, lambda pod: pod is None, "stop")
        return deleted

    def _pod_started(self, pod: JsonDict | None) -> bool:
        return pod_watch.pod_started(self, pod)

    async def _ensure_namespace(self) -> None:
        async def attempt() -> bool:
            ensure = KubeSpawner._ensure_namespace(self)
            return bool(
                await api_faults.unless_unreachable(
                    self, _true_after(ensure), "namespace create", False
                )
            )

        await exponential_backoff(
            attempt,
            f"Could not create namespace {self.namespace}",
            timeout=self.k8s_api_request_retry_timeout,
        )

    def colocation_check(self) -> SpawnCheck:
        """A new check of this spawn's pod (:class:`nebari_colocate.check.SpawnCheck`), with the
        view, the API client, the settings and the logger it needs."""
        return SpawnCheck(
            self.colocation_view(),
            self.api.api_client,
            self.namespace,
            self.pod_name,
            policy=self.colocation_policy(),
            settings=CheckSettings(
                check_timeout=self.colocation_check_timeout,
                dry_run_reuse_seconds=self.colocation_dry_run_reuse_seconds,
                exclusive_by_config=tuple(self._exclusive_by_config()),
            ),
            known_modes=self._known_claim_modes,
            log=self.log,
            reflector_pods=self._reflector_pods,
        )

    async def colocation_decide(self, pod: JsonDict, *, admit_later: bool = False) -> Decision:
        """Gather the state and decide; any error or timeout takes the safe side
        (:meth:`nebari_colocate.check.SpawnCheck.decide`).  With ``admit_later`` the decision
        that lets the pod start is the one from memory, logged and counted once
        :meth:`_settle_check` (from ``get_pod_manifest``) took it again on the answers."""
        check = self._colocation_check = self.colocation_check()
        decision, seconds, round_trip, safe, late = await check.decide(pod, admit_later=admit_later)
        if late is not None:
            self._late_check = late
            return decision
        return self._decided(decision, seconds, round_trip, round_trip, safe=safe)

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
        spawn_check = self._colocation_check
        dry_runs = spawn_check.dry_runs_made if spawn_check is not None else 0
        who = {"username": self.user.name, "server_name": self.name, "mode": self.colocation_mode}
        self.colocation_timings = told(
            decision, check, waited, round_trip, dry_runs, safe=safe, log=self.log, **who
        )
        return decision

    async def _settle_check(self, late: LateCheck) -> Decision:
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
        return refusing.refused(self, decision, pod)

    def way_out_url(self) -> str:
        """The way out's handler for this server (``nebari_colocate.handlers``), under the
        hub's base URL: where the button of a refusal with a way out posts."""
        return refusing.way_out_url(self)

    def _remember(self, refused: ColocationRefused) -> None:
        """Keep the refusal as ``colocation_failure``, with what the way out re-checks before it
        stops anything (nebari_colocate.handlers) when there is a way out."""
        refusal: Refusal = refused.refusal
        placed = self._colocation_decision if refusal.event_verdict is not None else None
        self.colocation_failure = kept(refusal, placed, lambda claims: self.home_pods(claims))
        record_refused(self.user.name, self.name, refusal)

    # ------------------------------------------------------------------------------------------
    # what the way out reads (nebari_colocate.handlers)

    def home_pods(self, claims: list[str]) -> list[JsonDict]:
        """The pods using ``claims`` in this namespace: from the live view when it is live, else
        the pod reflector's server pods."""
        view = self.colocation_view()
        if view.live:
            return view.claim_pods(claims)
        wanted = set(claims)
        return [p for p in self._reflector_pods() or [] if wanted.intersection(pod_claims(p))]

    def home_attached_nodes(self, claims: list[str]) -> set[str] | None:
        """The nodes the volumes of ``claims`` are attached to (VolumeAttachments with
        ``status.attached``), from the live view; None when it cannot tell (not live, or no
        permission to read VolumeAttachments)."""
        return self.colocation_view().claims_attached_nodes(claims)

    def _live_view(self) -> ClusterView | None:
        view = self.colocation_view()
        view.start()  # a hub that has not spawned since it started: the watches begin here
        return view if view.live else None

    def premium_rides(self) -> tuple[PremiumRide, ...]:
        """This user's servers that keep a premium node running with none of the user's
        servers there needing it (:func:`nebari_colocate.wayout.premium_rides`), from the live
        view; empty while it is not live or the Nodes cannot be read (nothing can be told), and
        in observe mode (no move is offered: observe changes nothing)."""
        if self.colocation_mode == MODE_OBSERVE:
            return ()
        view = self._live_view()
        nodes = view.nodes_by_name() if view is not None else None
        if view is None or nodes is None:
            return ()
        return premium_rides(
            view.namespace_pods(),
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
        return (view.premium_nodes(self.premium_resources) if view is not None else None) or ()

    def whole_set_state(self, pod: JsonDict) -> ClusterState | None:
        """Every node and the pods on them, from the live view: what the move of the whole set
        chooses from (:meth:`ClusterView.whole_set_state`)."""
        return self.colocation_view().whole_set_state(pod)

    def exclusive_claims_of(self, servers: Sequence[str]) -> list[str]:
        """The exclusive claims (by the live view's claims; a claim not known counts by
        ``storage_access_mode``) that this user's running ``servers`` mount."""
        view = self.colocation_view()
        claims = view.servers_claims(self.user.name, self.colocation_label_value, servers)
        default = [self.storage_access_mode]
        return [c for c in sorted(claims) if is_exclusive(view.claim_access_modes(c) or default)]

    async def _hold(self, refusal: ColocationRefused) -> None:
        """Keep a REST-requested refused spawn pending for ``refusal_hold_seconds``
        (:func:`nebari_colocate.refusing.hold`)."""
        await refusing.hold(self, refusal)

    def _serialize(self, pod: Any) -> JsonDict:
        serialized: JsonDict = self.api.api_client.sanitize_for_serialization(pod)
        return serialized

    async def _check(self, pod: JsonDict, *, admit_later: bool = False) -> Decision:
        decision = await self.colocation_decide(pod, admit_later=admit_later)
        return await self._unless_refused(decision, pod)

    async def _unless_refused(self, decision: Decision, pod: JsonDict) -> Decision:
        if decision.verdict == REFUSE and self.colocation_mode != MODE_OBSERVE:
            refusing.offer_move(self, decision, pod)
            self._release_colocation_lock()
            refusal = self._refusal(decision, pod)
            await self._hold(refusal)
            before_raising(self, refusal)
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
        self._colocation_checked = (placement_fingerprint(pod), decision)

    async def get_pod_manifest(self) -> Any:
        """KubeSpawner's manifest with the co-location label and affinity merged in."""
        written = await super().get_pod_manifest()
        pod = self._serialize(written)
        checked = self._colocation_checked
        self._colocation_checked = None
        late, self._late_check = self._late_check, None
        if checked is not None and checked[0] == placement_fingerprint(pod):
            decision = checked[1]
            if late is not None:
                decision = await self._unless_refused(await self._settle_check(late), pod)
        else:
            if late is not None:
                late.task.cancel()
            await self._acquire_colocation_lock()
            decision = await self._check(pod)
        if self.colocation_move_to and decision.verdict == COLOCATE and decision.node is None:
            # the move of the whole set: the home was released; pinned (and judged by fail fast
            # as pinned) to the node chosen for the set
            decision = dataclasses.replace(decision, node=self.colocation_move_to)
        self._colocation_decision = decision
        self._requests_premium = requests_any(pod, self.premium_resources)
        if self.colocation_mode == MODE_OBSERVE:  # record what enforce would do, change nothing
            observe_mode.decided(self, decision, pod)
            if self._colocation_lock_held:
                self._colocation_release_task = asyncio.ensure_future(self._once_pod_visible())
            return written
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
        manifest = self.headroom_manifest(manifest, decision)  # a first server: room for the rest
        lesson = self._admission_lesson(pod, manifest, decision)
        if self._colocation_lock_held or lesson is not None:
            self._colocation_release_task = asyncio.ensure_future(self._once_pod_visible(lesson))
        if decision.verdict == SKIP:
            self.log.debug("colocate: no exclusive claim for %s", self.pod_name)
        return self._placed(written, manifest)

    def _placed(self, written: Any, manifest: JsonDict) -> Any:
        """KubeSpawner's V1Pod ``written`` with ``manifest``'s labels and affinity, in place
        (:func:`nebari_colocate.kubeapi.with_placement`)."""
        return with_placement(self.api.api_client, written, manifest)

    # ------------------------------------------------------------------------------------------
    # fail fast after the pod exists (nebari_colocate.fail_fast)

    @property
    def events(self) -> list[JsonDict]:
        """This pod's events since the spawn began, oldest first: KubeSpawner's ``events``, the
        same list, for less (:func:`nebari_colocate.fail_fast.events_of`)."""
        return fail_fast.events_of(self.event_reflector, self.pod_name, self._last_event)

    def classify_events(self, pod: JsonDict | None = None) -> EventVerdict:
        """The verdict on this pod's events so far and on the pod itself (``pod``, else the pod
        reflector's): :func:`nebari_colocate.fail_fast.classify_events`."""
        return fail_fast.classify_events(self, pod)

    def _pod_names_for_browser(self) -> tuple[set[str], set[str]]:
        """(the user's own pod names, the other pod names this hub knows): what the progress
        stream may name, and what it must not (:func:`messages.browser_event`)."""
        return fail_fast.pod_names_for_browser(self)

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
        api_faults.stop_sweep(self)
        self._connection_error = None
        started = time.time()
        try:
            with self._awaiting_pod():
                started = await self._start_failing_fast()
            self.remember_set()  # the set it runs in: the user's footprint (headroom_spawner)
            return started
        except Exception as exc:
            error = api_faults.fault_error(self, exc, started=started)
            if error is None:
                raise
            raise error from exc
        finally:
            self.colocation_move_off = ()  # for one start only
            self.colocation_move_to = None

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

    async def _start_failing_fast(self) -> Any:
        # The decision belongs to one spawn: a previous spawn's, with the events of the previous
        # pod of this name (KubeSpawner's ``events`` shows them all until ``_start`` sets its
        # marker), would end the new spawn at once with a stale verdict, before its own check.
        self._colocation_decision = None
        self._pod_created_at = None
        if self.colocation_mode == MODE_OBSERVE:
            return await observe_mode.start(self, super().start())
        return await fail_fast.start_failing_fast(self, super().start())

    async def progress(self) -> AsyncIterator[dict[str, Any]]:
        """Progress of the spawn for the spawn-pending page, in plain language
        (:func:`nebari_colocate.fail_fast.progress`); KubeSpawner's own in observe mode."""
        observing = self.colocation_mode == MODE_OBSERVE
        words = super().progress() if observing else fail_fast.progress(self)
        async with contextlib.aclosing(words) as stream:
            async for event in stream:
                yield event


async def _true_after(call: Any) -> bool:
    await call
    return True
