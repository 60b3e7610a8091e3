"""Capacity with a ReadWriteOnce home: dead ends and node-hours, six ways, on the real Karpenter.

One control plane of tests/kube (etcd, kube-apiserver, kube-scheduler, kube-controller-manager
with the real attach/detach controller, kwok), zero-to-jupyterhub's user-scheduler (a second
kube-scheduler with the chart's profile: NodeResourcesFit ``MostAllocated``,
``tests/support/z2jh.py``) and Karpenter with its kwok cloud provider.  Six NodePools of the
same CPU machines (cpu-2x, cpu-4x, cpu-8x: 2, 4, 8 CPU at 4 GiB per CPU, price per CPU equal),
one per variant; every server of a variant selects its pool (``karpenter.sh/nodepool``), so the
six run side by side in one run on the same scheduler and the same Karpenter without sharing a
node.  The pools launch machines of at least ``--min-node-cpu`` CPU (4: cpu-4x and cpu-8x; user
node pools are seldom smaller, and on 2-CPU machines every lab gets a node of its own):

- **stock**: stock KubeSpawner with data-science-pack's hard pod affinity as its
  ``01-spawner.py`` writes it (the label ``nebari.dev/colocate-user: "{username}"`` and a
  required pod affinity on it in ``extra_pod_config``);
- **ours**: ColocatingKubeSpawner, defaults (a server that does not fit its user's node is
  refused at once, with a way out that stops servers);
- **move**: ours, and the user takes the move of the whole set the refusal offers, at once: the
  hub's own steps (``nebari_colocate.set_move_step.move_whole_set``, what the move's button
  runs after its scope checks) with the spawners' stop and start in place of JupyterHub's: the
  target chosen by ``setmove.choose_target`` on the live view, the set stopped, the home's
  release waited for (the real attach/detach controller), the set and the new server started on
  the target, or, where no node has room, on the node Karpenter adds for one pod holding the
  room of the whole set (``setmove.room_holder``);
- **headroom**: ours with ``colocation_headroom`` on, ``colocation_headroom_footprint``
  :data:`FOOTPRINT` (no user has history: each arrives once);
- **both**: headroom and move;
- **free**: the reference without the cap: stock KubeSpawner, no home to share (as with a
  ReadWriteMany home, or none): every server placed on its own, so every server runs; what the
  same servers cost without a ReadWriteOnce home.

Every user pod carries ``karpenter.sh/do-not-disrupt`` (a server has no controller: evicted, it
is gone), so Karpenter's consolidation removes empty nodes only, in every variant alike.

The workload (``--seed``; the run prints it): ``--users`` users arrive uniformly at random over
``--arrive-hours`` simulated hours; each starts a lab at once (0.5 / 1 / 1.5 CPU with
probability 0.3 / 0.5 / 0.2) and 0-3 apps later (0 / 1 / 2 / 3 with probability 0.25 / 0.35 /
0.25 / 0.15; each 0.25 / 0.5 / 1 CPU with 0.4 / 0.4 / 0.2; at 0.25-2.5 h after the lab), memory
:data:`MEMORY_PER_CPU` per CPU; all of the user's servers stop 3-5 h after the lab started.  One
simulated hour is ``--hour-seconds`` real seconds: the schedule is compressed, scheduling,
attaching and provisioning are the real components' in real time.

A **dead end** is a server the user wanted and could not run without stopping another: ours
refused it (without a move, or the move failed); stock's pod stayed Pending behind its hard
affinity (read from the pod's events: Karpenter's ``Failed to schedule pod ... pod affinity``,
it adds no node for it), or did not run within ``--stock-window`` seconds.
**Node-hours**: the Karpenter nodes of each pool, sampled every second from the first arrival
until the pools are empty again (or ``--tail`` seconds after the last session), in simulated
hours.  **Wait-to-running**: real seconds from a server's request to its running (a moved set:
to the new server running), over the servers that ran.

    python -m benchmarks.capacity [--users 100] [--seed 1] [--hour-seconds 120]

Last line: ``capacity: users=N dead-ends stock=… ours=… move=… headroom=… both=…; node-hours
stock=… ours=… move=… headroom=… both=…; p99 wait-to-running stock=…s ours=…s move=…s
headroom=…s both=…s``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import random
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from benchmarks import _cluster
from nebari_colocate import quantity
from tests.support.autoscaler import DO_NOT_DISRUPT, NODEPOOL_LABEL, Autoscaler, nodepool
from tests.support.helpers import create_bound_claim
from tests.support.z2jh import USER_SCHEDULER, USER_SCHEDULER_PROFILE

VARIANTS = ("stock", "ours", "move", "headroom", "both", "free")
#: the variants of stock KubeSpawner (no check of ours)
STOCK_LIKE = {"stock", "free"}
HEADROOM = {"headroom", "both"}
MOVES = {"move", "both"}
#: the headroom variants' ``colocation_headroom_footprint``: a lab and two small apps
FOOTPRINT = {"cpu": "2", "memory": "4Gi"}
MEMORY_PER_CPU = 2  # GiB
#: the kwok provider's label of a machine's CPU count (a NodePool requirement may select on it)
INSTANCE_CPU = "karpenter.kwok.sh/instance-cpu"
LAB_CPU = ((0.5, 0.3), (1.0, 0.5), (1.5, 0.2))
APP_COUNT = ((0, 0.25), (1, 0.35), (2, 0.25), (3, 0.15))
APP_CPU = ((0.25, 0.4), (0.5, 0.4), (1.0, 0.2))
APP_AFTER_HOURS = (0.25, 2.5)
SESSION_HOURS = (3.0, 5.0)
#: the fail fast's verdict on a pod pinned to its user's node that the scheduler cannot place
#: there (the node filled between the check and the pod's creation): a refusal, told late
LATE_REFUSAL = "unschedulable-pinned"
#: data-science-pack's hand-written co-location, as its 01-spawner.py writes it
DSP_LABEL = "nebari.dev/colocate-user"
DSP_AFFINITY = {
    "affinity": {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {
                        "matchExpressions": [
                            {"key": DSP_LABEL, "operator": "In", "values": ["{username}"]}
                        ]
                    },
                    "topologyKey": "kubernetes.io/hostname",
                }
            ]
        }
    }
}


# --------------------------------------------------------------------------------------------------
# the workload (pure)


@dataclass(frozen=True)
class Server:
    name: str  # "" is the lab (the default server)
    cpu: float
    at: float  # simulated hours after the run began


@dataclass(frozen=True)
class User:
    name: str
    servers: tuple[Server, ...]
    end: float

    @property
    def arrive(self) -> float:
        return self.servers[0].at


def _draw(rng: random.Random, table: tuple[tuple[Any, float], ...]) -> Any:
    values, weights = zip(*table, strict=True)
    return rng.choices(values, weights)[0]


def workload(users: int, seed: int, arrive_hours: float) -> list[User]:
    """``users`` users drawn from ``random.Random(f"capacity:{seed}")`` (the module's
    distributions), by arrival."""
    rng = random.Random(f"capacity:{seed}")
    drawn = []
    for index in range(users):
        arrive = rng.uniform(0, arrive_hours)
        end = arrive + rng.uniform(*SESSION_HOURS)
        servers = [Server("", _draw(rng, LAB_CPU), arrive)]
        for app in range(_draw(rng, APP_COUNT)):
            servers.append(
                Server(
                    f"app-{app + 1}", _draw(rng, APP_CPU), arrive + rng.uniform(*APP_AFTER_HOURS)
                )
            )
        servers.sort(key=lambda s: s.at)
        drawn.append(User(f"user-{index:03}", tuple(servers), end))
    return sorted(drawn, key=lambda u: u.arrive)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


# --------------------------------------------------------------------------------------------------
# one variant's figures


@dataclass
class Record:
    variant: str
    wanted: int = 0
    started: int = 0
    dead_ends: int = 0
    refused: int = 0
    moves_existing: int = 0
    moves_new: int = 0
    moves_failed: int = 0
    unfinished: int = 0
    #: neither started nor refused: an error or a timeout (a slow cluster), not a dead end
    failed: int = 0
    #: the check's refusals by their reason codes
    reasons: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    waits: list[float] = field(default_factory=list)
    node_hours: float = 0.0
    core_hours: float = 0.0
    #: the CPU the servers that ran asked for, times the simulated hours they ran
    served_cpu_hours: float = 0.0
    peak_nodes: int = 0


class Clock:
    """Simulated hours on the real clock."""

    def __init__(self, hour_seconds: float) -> None:
        self.hour_seconds = hour_seconds
        self.t0 = time.perf_counter()

    def hours(self) -> float:
        return (time.perf_counter() - self.t0) / self.hour_seconds

    async def until(self, hours: float) -> None:
        await asyncio.sleep(max(0.0, hours * self.hour_seconds - (time.perf_counter() - self.t0)))


# --------------------------------------------------------------------------------------------------
# spawners


def traits(variant: str, server: Server, start_timeout: float) -> dict[str, Any]:
    common: dict[str, Any] = {
        "cpu_guarantee": server.cpu,
        "mem_guarantee": int(server.cpu * MEMORY_PER_CPU * 2**30),
        "scheduler_name": USER_SCHEDULER,
        "node_selector": {NODEPOOL_LABEL: variant},
        "extra_annotations": {DO_NOT_DISRUPT: "true"},
        "start_timeout": start_timeout,
        # z2jh's 30 s is too short for an API server on a shared 2-core machine in a burst
        "k8s_api_request_retry_timeout": 60,
    }
    if variant == "free":
        return {**common, "volumes": [], "volume_mounts": [], "storage_pvc_ensure": False}
    if variant == "stock":
        return {
            **common,
            "extra_labels": {DSP_LABEL: "{username}"},
            "extra_pod_config": DSP_AFFINITY,
        }
    if variant in HEADROOM:
        common.update(colocation_headroom=True, colocation_headroom_footprint=dict(FOOTPRINT))
    return common


def username(variant: str, user: User) -> str:
    """The user's name in one variant: each variant's users are others (a hub's per-user lock,
    held through a move, must not hold the same user of another variant)."""
    return f"{variant}-{user.name}"


def make_spawner(variant: str, user: User, server: Server, start_timeout: float) -> Any:
    from kubespawner import KubeSpawner

    from nebari_colocate import ColocatingKubeSpawner

    cls = KubeSpawner if variant in STOCK_LIKE else ColocatingKubeSpawner
    spawner = _cluster.make_spawner(
        cls,
        f"cap-{variant}",
        username(variant, user),
        server.name,
        **traits(variant, server, start_timeout),
    )
    spawner.log.setLevel(logging.CRITICAL)
    return spawner


class Session:
    """One user's servers in one variant: the starts at their times, the move, the stop."""

    def __init__(self, run: Run, variant: str, user: User) -> None:
        self.run = run
        self.variant = variant
        self.user = user
        self.record = run.records[variant]
        timeout = run.args.stock_window if variant in STOCK_LIKE else run.args.start_timeout
        self.spawners = {s.name: make_spawner(variant, user, s, timeout) for s in user.servers}
        self.running: set[str] = set()
        #: server name -> the simulated hour it began to run (for the CPU-hours served)
        self.since: dict[str, float] = {}
        self.lock = asyncio.Lock()  # one action per user at a time, as the hub's way out

    def up(self, name: str) -> None:
        self.running.add(name)
        self.since.setdefault(name, self.run.clock.hours())

    def down(self, name: str) -> None:
        self.running.discard(name)
        began = self.since.pop(name, None)
        if began is not None:
            cpu = next(s.cpu for s in self.user.servers if s.name == name)
            self.record.served_cpu_hours += cpu * (self.run.clock.hours() - began)

    async def live(self) -> None:
        tasks = [asyncio.ensure_future(self.start_at(s)) for s in self.user.servers]
        await self.run.clock.until(self.user.end)
        for task in tasks:
            if not task.done():
                task.cancel()
        for outcome in await asyncio.gather(*tasks, return_exceptions=True):
            if isinstance(outcome, asyncio.CancelledError):
                self.record.unfinished += 1
        for name in list(self.running):
            self.down(name)
        await asyncio.gather(
            *(s.stop(now=True) for s in self.spawners.values()), return_exceptions=True
        )

    async def start_at(self, server: Server) -> None:
        await self.run.clock.until(server.at)
        self.record.wanted += 1
        requested = time.perf_counter()
        spawner = self.spawners[server.name]
        if self.variant in STOCK_LIKE:
            ran = await self.stock_start(spawner)
        else:
            async with self.lock:
                ran = await self.our_start(spawner, server)
        if ran:
            self.record.started += 1
            self.record.waits.append(time.perf_counter() - requested)
        elif ran is False:
            self.record.dead_ends += 1
        else:  # neither started nor refused: an error or a timeout, not a dead end
            self.record.failed += 1

    async def stock_start(self, spawner: Any) -> bool | None:
        start = asyncio.ensure_future(spawner.start())
        verdict = asyncio.ensure_future(self.run.karpenter_gives_up(spawner))
        done, _ = await asyncio.wait({start, verdict}, return_when=asyncio.FIRST_COMPLETED)
        for task in (start, verdict):
            if task not in done:
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        if start in done and start.exception() is None:
            self.up(spawner.name)
            return True
        with contextlib.suppress(Exception):
            await spawner.stop(now=True)  # KubeSpawner deletes its pod after a timeout anyway
        if verdict in done:
            return False
        exc = start.exception()
        self.record.errors.append(f"{self.user.name}/{spawner.name}: {type(exc).__name__}: {exc}")
        return None

    async def our_start(self, spawner: Any, server: Server) -> bool | None:
        from nebari_colocate.spawner import ColocationRefused

        try:
            await spawner.start()
        except ColocationRefused as refused:
            verdict = getattr(refused, "event_verdict", None)
            code = getattr(verdict, "code", None) if verdict is not None else None
            if verdict is not None and code != LATE_REFUSAL:
                # ended on the pod's events for another cause (a slow cluster): no dead end
                self.record.errors.append(f"{self.user.name}/{server.name}: ended on {code}")
                return None
            self.record.refused += 1
            decision = getattr(refused, "decision", None)
            why = code or ",".join(getattr(decision, "reasons", None) or ["?"])
            self.record.reasons[why] = self.record.reasons.get(why, 0) + 1
            if self.variant in MOVES and self.running:
                return await self.move(spawner, server)
            return False
        except Exception as exc:  # an error or a timeout: no dead end
            self.record.errors.append(
                f"{self.user.name}/{server.name}: {type(exc).__name__}: {exc}"
            )
            return None
        self.up(server.name)
        return True

    async def move(self, spawner: Any, server: Server) -> bool:
        """The move of the whole set the refusal offers, taken at once: the hub's own steps
        (``nebari_colocate.set_move_step.move_whole_set``, what ``POST /hub/colocate/move/...``
        runs after its scope checks), with the spawners' stop and start in place of JupyterHub's.
        """
        from nebari_colocate.set_move_step import move_whole_set

        failure = getattr(spawner, "colocation_failure", None)
        offer = (failure.way_out_json() or {}).get("move") if failure is not None else None
        if not offer:
            return False
        restart = tuple(offer["restart"])

        async def stop_server(name: str) -> None:
            await self.spawners[name].stop(now=True)
            self.down(name)

        async def start_server(name: str, options: dict) -> None:
            await self.spawners[name].start()
            self.up(name)

        began = time.time()
        try:
            await move_whole_set(
                spawner,
                restart,
                offer.get("node") or "",
                spawner_of=self.spawners.__getitem__,
                is_running=lambda name: name in self.running,
                stop_server=stop_server,
                start_server=start_server,
                words={"start": server.name, "restart": restart},
            )
        except Exception as exc:
            self.record.moves_failed += 1
            outcome = getattr(exc, "outcome", type(exc).__name__)
            detail = getattr(exc, "jupyterhub_message", None) or ""
            others = await self.run.created_since(self.variant, began, self.user)
            self.record.errors.append(
                f"move: {self.user.name}/{server.name}: {outcome} {str(detail)[:200]}".rstrip()
                + (f" [others' pods created during the move: {others}]" if others else "")
            )
            # a server of the set that did not come back is lost too
            self.record.dead_ends += sum(1 for name in restart if name not in self.running)
            return server.name in self.running
        if offer.get("node"):
            self.record.moves_existing += 1
        else:
            self.record.moves_new += 1
        return True


# --------------------------------------------------------------------------------------------------
# the run


class Run:
    def __init__(self, args: argparse.Namespace, users: list[User]) -> None:
        self.args = args
        self.users = users
        self.records = {v: Record(v) for v in args.variants}
        self.clock = Clock(args.hour_seconds)
        self.api: Any = None
        #: stock pods Karpenter said it adds no node for (their hard pod affinity)
        self.gave_up: set[str] = set()

    async def setup(self) -> None:
        from kubernetes_asyncio import client

        core = client.CoreV1Api(self.api)
        limit = asyncio.Semaphore(32)

        async def claim(variant: str, user: str) -> None:
            async with limit:
                await create_bound_claim(self.api, f"cap-{variant}", f"claim-{user}")

        for variant in self.args.variants:
            await core.create_namespace({"metadata": {"name": f"cap-{variant}"}})
        await asyncio.gather(
            *(
                claim(v, username(v, u))
                for v in self.args.variants
                if v != "free"
                for u in self.users
            )
        )

    async def created_since(self, variant: str, began: float, user: User) -> str:
        """Other users' pods of ``variant`` created since ``began`` (epoch seconds), with their
        nodes: the pods that may have taken a failed move's room."""
        from kubernetes_asyncio import client

        with contextlib.suppress(Exception):
            pods = await client.CoreV1Api(self.api).list_namespaced_pod(f"cap-{variant}")
            mine = username(variant, user)
            found = [
                f"{p.metadata.name}@{p.spec.node_name or 'pending'}"
                for p in pods.items
                if p.metadata.creation_timestamp.timestamp() >= began - 1
                and mine not in p.metadata.name
            ]
            return ", ".join(found[:6])
        return ""

    async def karpenter_gives_up(self, spawner: Any) -> None:
        """Return once Karpenter has said it adds no node for this stock pod (its hard pod
        affinity pins it to a node without room: :meth:`watch_karpenter`); never otherwise."""
        while spawner.pod_name not in self.gave_up:
            await asyncio.sleep(1.0)

    async def watch_karpenter(self, stop: asyncio.Event) -> None:
        """Every 2 s, the stock pods Karpenter gave up on (``FailedScheduling`` from Karpenter
        naming pod affinity), from one LIST of the namespace's FailedScheduling events."""
        from kubernetes_asyncio import client

        core = client.CoreV1Api(self.api)
        while not stop.is_set():
            with contextlib.suppress(Exception):
                events = await core.list_namespaced_event(
                    "cap-stock", field_selector="reason=FailedScheduling"
                )
                for event in events.items:
                    source = event.reporting_component or (
                        event.source.component if event.source else ""
                    )
                    if "karpenter" in (source or "") and "pod affinity" in (event.message or ""):
                        self.gave_up.add(event.involved_object.name)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), 2.0)

    async def sample(self, stop: asyncio.Event) -> None:
        """Node-hours and core-hours per pool, every second, in simulated hours."""
        from kubernetes_asyncio import client

        core = client.CoreV1Api(self.api)
        last = shown = time.perf_counter()
        while not stop.is_set():
            nodes = (await core.list_node(label_selector=NODEPOOL_LABEL)).items
            now = time.perf_counter()
            hours = (now - last) / self.args.hour_seconds
            last = now
            counts: dict[str, int] = {}
            cores: dict[str, float] = {}
            for node in nodes:
                pool = node.metadata.labels.get(NODEPOOL_LABEL)
                counts[pool] = counts.get(pool, 0) + 1
                cpu = (node.status.allocatable or {}).get("cpu", "0")
                cores[pool] = cores.get(pool, 0.0) + float(quantity.parse(cpu))
            for variant, record in self.records.items():
                record.node_hours += counts.get(variant, 0) * hours
                record.core_hours += cores.get(variant, 0.0) * hours
                record.peak_nodes = max(record.peak_nodes, counts.get(variant, 0))
            if now - shown > 30:
                shown = now
                print(
                    f"  @{self.clock.hours():.2f}h "
                    + " ".join(
                        f"{v}: nodes={counts.get(v, 0)} ran={r.started}/{r.wanted} "
                        f"dead={r.dead_ends}"
                        for v, r in self.records.items()
                    ),
                    flush=True,
                )
            if self.all_done and not counts:
                return
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)

    all_done = False

    async def go(self) -> None:
        sessions = [Session(self, v, u) for u in self.users for v in self.args.variants]
        stop = asyncio.Event()
        self.clock = Clock(self.args.hour_seconds)
        sampler = asyncio.ensure_future(self.sample(stop))
        watcher = asyncio.ensure_future(self.watch_karpenter(stop))
        await asyncio.gather(*(s.live() for s in sessions))
        self.all_done = True
        print(
            f"  sessions over at {self.clock.hours():.2f} h; waiting for the pools to empty",
            flush=True,
        )
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(sampler), self.args.tail)
        stop.set()
        await sampler
        await watcher
        for variant in self.args.variants:
            await _cluster.stop_reflectors(f"cap-{variant}")


def pool(variant: str, min_cpu: int) -> dict:
    """The variant's NodePool: the kwok provider's CPU machines of at least ``min_cpu`` CPU."""
    found = nodepool(variant, "cpu", limits={"cpu": "1000"})
    requirement = {"key": INSTANCE_CPU, "operator": "Gt", "values": [str(min_cpu - 1)]}
    found["spec"]["template"]["spec"]["requirements"].append(requirement)
    return found


@contextlib.asynccontextmanager
async def cluster(variants: tuple[str, ...], min_cpu: int):
    """The control plane, the user-scheduler, and Karpenter with one NodePool per variant."""
    pools = [pool(v, min_cpu) for v in variants]
    with _cluster.control_plane(kubelet_stub=True) as cp:
        cp.start_scheduler("user", [USER_SCHEDULER_PROFILE])
        karpenter = Autoscaler(_cluster.bin_dir(), cp, nodepools=pools).start()
        try:
            await _cluster.use_credentials(cp.kubeconfig)
            yield cp
        finally:
            karpenter.stop()


def print_workload(users: list[User], args: argparse.Namespace) -> None:
    servers = [s for u in users for s in u.servers]
    apps = [s for s in servers if s.name]
    print(
        f"workload: seed={args.seed} users={len(users)} arriving over {args.arrive_hours:g} h, "
        f"{len(servers)} servers ({len(apps)} apps), {sum(s.cpu for s in servers):g} CPU in all; "
        f"1 h = {args.hour_seconds:g} s; footprint (headroom) {FOOTPRINT}"
    )
    for user in users:
        shown = ", ".join(f"{s.name or 'lab'} {s.cpu:g} CPU @{s.at:.2f}h" for s in user.servers)
        print(f"  {user.name}: {shown}; stop @{user.end:.2f}h")


def packing(record: Record) -> float:
    """The share of the nodes' CPU that servers asked for: CPU-hours served / core-hours."""
    return record.served_cpu_hours / record.core_hours if record.core_hours else 0.0


def summary(run: Run) -> list[str]:
    lines = []
    stock = run.records.get("stock")
    for variant, r in run.records.items():
        ratio = (
            f" ({r.node_hours / stock.node_hours:.2f} x stock)"
            if stock and stock.node_hours
            else ""
        )
        free = run.records.get("free")
        if free and free.node_hours and variant != "free":
            ratio += f" ({r.node_hours / free.node_hours:.2f} x free)"
        lines.append(
            f"  {variant:9} wanted={r.wanted} ran={r.started} dead-ends={r.dead_ends} "
            f"refused={r.refused} moves={r.moves_existing}+{r.moves_new}new "
            f"(failed {r.moves_failed}) unfinished={r.unfinished} failed={r.failed} "
            f"node-hours={r.node_hours:.1f}{ratio} core-hours={r.core_hours:.1f} "
            f"served-cpu-hours={r.served_cpu_hours:.1f} packing={packing(r):.0%} "
            f"peak-nodes={r.peak_nodes} wait p50={percentile(r.waits, 0.5):.1f}s "
            f"p99={percentile(r.waits, 0.99):.1f}s"
        )
        if r.reasons:
            lines.append(
                "    refused for: " + ", ".join(f"{k} {v}" for k, v in sorted(r.reasons.items()))
            )
        lines += [f"    error: {e}" for e in r.errors[:40]]
    records = run.records.values()
    lines.append(
        f"capacity: users={len(run.users)} dead-ends "
        + " ".join(f"{r.variant}={r.dead_ends}" for r in records)
        + "; node-hours "
        + " ".join(f"{r.variant}={r.node_hours:.1f}" for r in records)
        + "; p99 wait-to-running "
        + " ".join(f"{r.variant}={percentile(r.waits, 0.99):.1f}s" for r in records)
    )
    return lines


async def main_async(args: argparse.Namespace) -> int:
    users = workload(args.users, args.seed, args.arrive_hours)
    print_workload(users, args)
    print(f"  NodePools: one per variant, machines of at least {args.min_node_cpu} CPU")
    print(f"machine: {_cluster.machine()}", flush=True)
    run = Run(args, users)
    async with cluster(args.variants, args.min_node_cpu) as cp, _cluster.admin(cp) as api:
        run.api = api
        began = time.perf_counter()
        await run.setup()
        homes = len(users) * len(args.variants)
        print(f"  {homes} homes bound in {time.perf_counter() - began:.0f} s", flush=True)
        await run.go()
    for line in summary(run):
        print(line)
    return 0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.capacity", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--users", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--arrive-hours", type=float, default=4.0)
    parser.add_argument(
        "--hour-seconds", type=float, default=120.0, help="real seconds per simulated hour"
    )
    parser.add_argument(
        "--start-timeout", type=float, default=300.0, help="ours: start_timeout (s)"
    )
    parser.add_argument(
        "--stock-window", type=float, default=300.0, help="stock: start_timeout (s)"
    )
    parser.add_argument(
        "--min-node-cpu", type=int, default=4, help="the smallest machine the pools may launch"
    )
    parser.add_argument("--tail", type=float, default=120.0, help="seconds to wait for empty pools")
    parser.add_argument("--variants", type=lambda text: tuple(text.split(",")), default=VARIANTS)
    args = parser.parse_args(argv)
    unknown = set(args.variants) - set(VARIANTS)
    if unknown:
        parser.error(f"--variants: unknown {sorted(unknown)}; choose from {','.join(VARIANTS)}")
    return args


def main(argv: list[str] | None = None) -> int:
    return asyncio.run(main_async(parse(argv)))


if __name__ == "__main__":
    sys.exit(main())
