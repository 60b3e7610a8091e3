"""Latency of the decision on large states.

For each size (pods x nodes) it builds a realistic state (users with RWO homes, pods spread over
nodes and namespaces, some finished, some terminating) and times, per spawn:

- ``decide``: ``placement.decide`` on a ClusterState whose pod index is built (once per snapshot),
  computing every pod's requests and the pinned node's usage afresh;
- ``check``: everything the pre-spawn check does with the pods in hand: build the ClusterState
  from the objects, index it, decide, and merge the affinity into the manifest.

With ``--spawner-check`` it also times the spawner's own pre-spawn check,
``ColocatingKubeSpawner.colocation_decide``, against a real kube-apiserver (tests/kube) holding
each state: the live view (nebari_colocate.view, warm: its watches hold every pod) gives the
user's pods, the pinned node with its pods, the claim and the PV; then decide, then the dry run of
the pinned pod, whose API round trip is timed and printed apart.  That is what a spawn waits for.
It also prints, per size, from a fresh hub-like process each for stock KubeSpawner and ours:

- ``hub-memory: stock=… MiB ours=… MiB (pods=…)``: the resident memory once the watches hold
  the state (stock: KubeSpawner's pod and event reflectors; ours: the event reflector and the
  live view, whose watch KubeSpawner's pod reflector shares), and the view's memory per 10,000
  pods;
- ``loop-block: stock=… ms ours=… ms (pods=…)``: the longest the event loop was blocked over
  ``--loop-seconds`` (30) of that process idling as a hub does between spawns, measured by a
  task that sleeps 5 ms and notes how late it wakes: KubeSpawner's reflectors list their
  collection again every 10 s, so their relists fall inside; and ours once more while its pod
  watch is listed again after a break (a forced relist).

Prints one line per size and per measure; the last line is the headline:
``decide p50=… p99=… ms (pods=10000 nodes=1000)``.

    python -m benchmarks.decide_latency [--spawns 2000] [--seed 1] [--spawner-check]
        [--sizes 50000x5000] [--loop-seconds 30]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import statistics
import sys
import time
from pathlib import Path

from nebari_colocate.affinity import apply_decision
from nebari_colocate.placement import Policy, decide
from nebari_colocate.state import ClusterState
from tests.support import builders


def build_objects(pods: int, nodes: int, rng: random.Random) -> list[dict]:
    objects: list[dict] = []
    for i in range(nodes):
        gpu = i % 10 == 0
        alloc = {"cpu": "32", "memory": "128Gi", "pods": "110"}
        if gpu:
            alloc["nvidia.com/gpu"] = "4"
        objects.append(
            builders.node(
                f"node-{i}",
                labels={"node-type": "gpu" if gpu else "cpu"},
                taints=[builders.taint("gpu")] if gpu else (),
                allocatable=alloc,
            )
        )
    users = max(1, pods // 4)
    for u in range(users):
        objects.append(builders.pvc(f"claim-user{u}", namespace="jhub", volume=f"pv-{u}"))
    for i in range(pods):
        user = i % users
        namespace = "jhub" if i % 3 else f"other-{i % 7}"
        phase = rng.choice(["Running"] * 8 + ["Succeeded", "Failed"])
        objects.append(
            builders.pod(
                f"pod-{i}",
                namespace=namespace,
                labels={"app": "x"},
                deleting=rng.random() < 0.02,
                node_name=f"node-{(user * 7) % nodes}",
                containers=[builders.container("c", requests={"cpu": "100m", "memory": "256Mi"})],
                claims=[f"claim-user{user}"],
                phase=phase,
            )
        )
    return objects


def new_pod(user: int) -> dict:
    return builders.pod(
        f"jupyter-user{user}--new",
        namespace="jhub",
        requests={"cpu": "1", "memory": "2Gi"},
        claims=[f"claim-user{user}"],
    )


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return statistics.median(ordered), p99


def run(pods: int, nodes: int, spawns: int, rng: random.Random) -> tuple[str, str]:
    objects = build_objects(pods, nodes, rng)
    policy = Policy()
    users = max(1, pods // 4)
    state = ClusterState.from_objects(objects, namespace="jhub")
    state.pods_on_node("node-0")  # the pod index, built once per snapshot of the cache
    decide_ms, check_ms = [], []
    for _ in range(spawns):
        pod = new_pod(rng.randrange(users))
        # Per-pod requests and per-node sums are computed afresh for every decision, as for a
        # spawn (they are memoised only within one decision's state).
        state._requests_memo.clear()
        state._usage_memo.clear()
        start = time.perf_counter()
        decide(pod, state, policy)
        decide_ms.append((time.perf_counter() - start) * 1000)
    for _ in range(max(20, spawns // 20)):
        pod = new_pod(rng.randrange(users))
        start = time.perf_counter()
        fresh = ClusterState.from_objects(objects, namespace="jhub")
        decision = decide(pod, fresh, policy)
        if decision.verdict != "refuse":
            apply_decision(pod, decision, "nebari.dev/colocate-user", "user")
        check_ms.append((time.perf_counter() - start) * 1000)
    d50, d99 = percentiles(decide_ms)
    c50, c99 = percentiles(check_ms)
    size = f"(pods={pods} nodes={nodes})"
    return (
        f"decide p50={d50:.3f} p99={d99:.3f} ms {size}",
        f"check (state build + index + decide + affinity) p50={c50:.2f} p99={c99:.2f} ms {size}",
    )


SIZES = ((1000, 100), (1000, 1000), (10000, 100), (10000, 1000))
#: users whose home claims exist (bound) in the spawner check; the other pods' claims need not
CHECKED_USERS = 20


async def _create_all(bodies, create, limit: int = 32) -> None:
    gate = asyncio.Semaphore(limit)

    async def one(body):
        async with gate:
            await create(body)

    await asyncio.gather(*(one(b) for b in bodies))


async def _load_cluster(cp, objects) -> None:
    """Create the state's namespaces, nodes, the checked users' claims and every pod."""
    from kubernetes_asyncio import client

    from benchmarks import _cluster

    admin = await _cluster.admin_client(cp)
    try:
        core = client.CoreV1Api(admin)
        namespaces = {o["metadata"]["namespace"] for o in objects if o["kind"] == "Pod"}
        for ns in sorted(namespaces):
            await core.create_namespace({"metadata": {"name": ns}})

        async def node(obj):
            await _cluster.helpers.create_node(
                admin,
                obj["metadata"]["name"],
                labels=obj["metadata"]["labels"],
                taints=obj["spec"].get("taints", []),
                cpu="32",
                memory="128Gi",
                extra={k: v for k, v in obj["status"]["allocatable"].items() if "/" in k},
            )

        async def pod(obj):
            meta = obj["metadata"]
            body = {
                "metadata": {
                    "name": meta["name"],
                    "labels": {"component": "singleuser-server", **meta["labels"]},
                },
                "spec": {
                    **obj["spec"],
                    "containers": [{**obj["spec"]["containers"][0], "image": "x"}],
                },
            }
            await core.create_namespaced_pod(meta["namespace"], body)

        await _create_all([o for o in objects if o["kind"] == "Node"], node)
        for user in range(CHECKED_USERS):
            await _cluster.helpers.create_bound_claim(admin, "jhub", f"claim-user{user}")
        await _create_all([o for o in objects if o["kind"] == "Pod"], pod)
    finally:
        await admin.close()


async def _checked_spawners(cls) -> list:
    from kubespawner import KubeSpawner

    from benchmarks import _cluster

    spawners = []
    for user in range(CHECKED_USERS):
        spawner = _cluster.make_spawner(cls, "jhub", f"user{user}", "new", cpu_guarantee=1)
        pod = await KubeSpawner.get_pod_manifest(spawner)
        spawners.append((spawner, spawner.api.api_client.sanitize_for_serialization(pod)))
    return spawners


async def spawner_check(
    pods: int, nodes: int, samples: int, loop_seconds: float = 30.0
) -> list[str]:
    """p50/p99 of ColocatingKubeSpawner.colocation_decide against a real apiserver (the dry
    run's round trip apart), and the hub's resident memory, stock and ours, with the state."""
    from benchmarks import _cluster
    from nebari_colocate import ColocatingKubeSpawner

    objects = build_objects(pods, nodes, random.Random(pods * 7 + nodes))
    with _cluster.control_plane(kubelet_stub=False) as cp:
        await _cluster.use_credentials(cp.kubeconfig)
        await _load_cluster(cp, objects)
        probes = {cls: _probe(cp.kubeconfig, cls, loop_seconds) for cls in ("stock", "colocate")}
        rss = {cls: probe["rss"] for cls, probe in probes.items()}

        spawners = await _checked_spawners(ColocatingKubeSpawner)
        first = spawners[0][0]
        await first._start_watching_pods()
        await first.colocation_decide(spawners[0][1])  # starts the live view
        view = first.colocation_view()
        await view.wait_live(120)
        cached = len(view.pods.items)
        checks, dry_runs, collected = [], [], []
        paused = _GcPauses()
        load = os.getloadavg()[0]
        for k in range(samples):
            spawner, manifest = spawners[k % len(spawners)]
            paused.reset()
            decision = await spawner.colocation_decide(manifest)
            checks.append(spawner.colocation_timings["check"] * 1000)
            dry_runs.append(spawner.colocation_timings["dry_run"] * 1000)
            collected.append(paused.total * 1000)
        paused.close()
        assert decision.verdict in ("colocate", "refuse"), decision
        assert decision.node is not None and decision.verified, decision
        await _cluster.stop_reflectors("jhub")
    p50, p99 = percentiles(checks)
    d50, d99 = percentiles(dry_runs)
    size = f"(pods={pods} nodes={nodes})"
    growth = 100 * (rss["colocate"] - rss["stock"]) / rss["stock"]
    slow = sorted(range(len(checks)), key=lambda i: checks[i])[-max(1, len(checks) // 100) :]
    ours, stock = probes["colocate"], probes["stock"]
    return [
        f"load average (/proc/loadavg) at the start of the samples: {_loadavg()}",
        f"hub-memory: stock={rss['stock']:.0f} MiB ours={rss['colocate']:.0f} MiB (pods={pods})",
        f"view memory: {ours['store'] * 10000 / max(ours['pods'], 1):.1f} MiB per 10,000 pods "
        f"(its pod store and indexes, object by object: {ours['store']:.1f} MiB for "
        f"{ours['pods']:.0f} pods; the whole view, as resident memory: {ours['view']:.0f} MiB "
        f"with {nodes} nodes)",
        f"loop-block: stock={stock['block']:.1f} ms ours={ours['block']:.1f} ms (pods={pods})",
        f"  (the most CPU time the loop spent between two wakes of a 5 ms sleeper over "
        f"{loop_seconds:g} s; KubeSpawner's pod reflector listed its {stock['pods']:.0f} pods "
        f"{stock['relists']:.0f} times, ours {ours['relists']:.0f} times; wall-clock lateness, "
        f"which counts waiting for a core: stock={stock['block_wall']:.1f} ms "
        f"ours={ours['block_wall']:.1f} ms)",
        f"loop-block of ours while its pod watch is listed again after a break: "
        f"{ours['relist_block']:.1f} ms (wall {ours['relist_wall']:.1f} ms; its longest garbage "
        f"collection {ours['relist_gc']:.1f} ms wall) (pods={pods})",
        f"machine load (1 min average) at the start of the samples: {load:.2f} on "
        f"{os.cpu_count()} cores; the slowest 1 % of checks spent "
        f"{', '.join(f'{collected[i]:.1f}' for i in slow)} ms in garbage collection "
        f"(of {', '.join(f'{checks[i]:.1f}' for i in slow)} ms)",
        f"hub resident memory with the state {size}: stock={rss['stock']:.0f} MiB "
        f"colocate={rss['colocate']:.0f} MiB ({growth:+.0f} %)",
        f"dry run of the pinned pod (one API round trip, apart) p50={d50:.2f} p99={d99:.2f} ms",
        f"spawner check (live view of {cached} pods + decide, dry run excluded) "
        f"p50={p50:.3f} p99={p99:.3f} ms {size}",
    ]


class _GcPauses:
    """Seconds the garbage collector ran since the last ``reset`` (via ``gc.callbacks``)."""

    def __init__(self) -> None:
        import gc

        self.total = 0.0
        #: the longest single collection (seconds) and its generation
        self.worst = 0.0
        self.worst_generation = -1
        self._started = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        elif self._started:
            pause = time.perf_counter() - self._started
            self.total += pause
            if pause > self.worst:
                self.worst, self.worst_generation = pause, info.get("generation", -1)

    def reset(self) -> None:
        self.total = 0.0

    def close(self) -> None:
        import gc

        gc.callbacks.remove(self._callback)


def _loadavg() -> str:
    return Path("/proc/loadavg").read_text().strip()


def _probe(kubeconfig: str, which: str, loop_seconds: float) -> dict[str, float]:
    """A fresh hub-like process (:func:`probe`) for ``which`` (stock or colocate): its resident
    memory (MiB) once the watches hold the state, the view's share of it, and the longest event
    loop block (ms) over ``loop_seconds``."""
    import subprocess

    result = subprocess.run(
        [
            sys.executable,
            __file__,
            "--probe",
            which,
            "--kubeconfig",
            kubeconfig,
            "--loop-seconds",
            str(loop_seconds),
        ],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise RuntimeError(f"the {which} probe failed:\n{result.stderr[-3000:]}")
    figures: dict[str, float] = {}
    for line in result.stdout.strip().splitlines():
        key, sep, value = line.partition("=")
        if sep and key.isidentifier():
            figures[key] = float(value)
        else:
            print(f"  {which} probe: {line}")
    return figures


class _LoopLag:
    """The longest the event loop was blocked while it ran, from a task sleeping 5 ms at a
    time: ``worst`` (ms) is the most CPU time the loop's thread spent between two of its wakes
    (other callbacks ran meanwhile: a JSON parse, a relist), ``worst_wall`` (ms) how late it
    woke at worst, which on a loaded machine also counts the time the process waited for a
    core."""

    def __init__(self, interval: float = 0.005) -> None:
        self.interval = interval
        self.worst = 0.0
        self.worst_wall = 0.0
        self._task: asyncio.Future[None] | None = None

    async def _sample(self) -> None:
        while True:
            wall, cpu = time.perf_counter(), time.thread_time()
            await asyncio.sleep(self.interval)
            self.worst = max(self.worst, (time.thread_time() - cpu) * 1000)
            late = (time.perf_counter() - wall - self.interval) * 1000
            self.worst_wall = max(self.worst_wall, late)

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._sample())

    async def stop(self) -> tuple[float, float]:
        """(worst CPU ms, worst wall ms)."""
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        return self.worst, self.worst_wall


def _deep_mib(roots: list) -> float:
    """MiB of the objects reachable from ``roots`` through dicts, lists and tuples, each object
    counted once (objects shared between pods, and interned strings, are counted once)."""
    seen: set[int] = set()
    total = 0
    stack = list(roots)
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        if isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple)):
            stack.extend(obj)
    return total / 2**20


def _rss_mib() -> float:

    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


async def probe(kubeconfig: str, which: str, loop_seconds: float) -> None:
    """Child process of :func:`_probe`: warm the watches of one class, print its figures."""
    import gc
    import logging

    from kubespawner import KubeSpawner

    from benchmarks import _cluster
    from nebari_colocate import ColocatingKubeSpawner
    from nebari_colocate.shared_reflector import SharedPodReflector

    logging.getLogger("traitlets").setLevel(logging.ERROR)
    logging.getLogger("nebari_colocate").setLevel(logging.ERROR)
    await _cluster.use_credentials(kubeconfig)
    cls = ColocatingKubeSpawner if which == "colocate" else KubeSpawner
    spawners = await _checked_spawners(cls)
    spawner, manifest = spawners[0]
    if which == "colocate":
        spawner.colocation_share_pod_watch = True  # the one watch (off by default)
    print(f"rss after imports: {_rss_mib():.0f} MiB")
    await spawner._start_watching_events()
    gc.collect()
    before_pods = _rss_mib()
    await spawner._start_watching_pods()
    reflector = spawner.pod_reflector
    shared = isinstance(reflector, SharedPodReflector)
    assert shared == (which == "colocate"), reflector
    if which == "colocate":
        await spawner.colocation_decide(manifest)
        await spawner.colocation_view().wait_live(300)
        await spawner.colocation_decide(manifest)
    gc.collect()
    await asyncio.sleep(2)
    gc.collect()
    rss = _rss_mib()
    print(f"rss with the pods watched ({type(reflector).__name__}): {rss:.0f} MiB")
    relists = 0
    if shared:
        source = reflector.source()
        resyncs = source.resyncs
        view_pods = len(source.items)
    else:
        original = reflector._list_and_update

        async def counted(*args, **kwargs):
            nonlocal relists
            relists += 1
            return await original(*args, **kwargs)

        reflector._list_and_update = counted
        view_pods = 0
    lag = _LoopLag()
    lag.start()
    await asyncio.sleep(loop_seconds)
    block, block_wall = await lag.stop()
    relist_block = relist_wall = gc_worst = 0.0
    store = 0.0
    if shared:
        hub = reflector.hub
        indexes = [hub.by_claim.entries, hub.by_node.entries, reflector.pods._pods]
        store = _deep_mib([source.items, *indexes])
        relists = source.resyncs - resyncs
        lag = _LoopLag()
        lag.start()
        collections = _GcPauses()
        if os.environ.get("DECIDE_LATENCY_DEBUG"):
            loop = asyncio.get_running_loop()
            loop.set_debug(True)
            loop.slow_callback_duration = 0.05
            logging.getLogger("asyncio").setLevel(logging.WARNING)
            logging.basicConfig(stream=sys.stdout)
        source.relist()  # as after a broken watch: LIST page by page, then WATCH
        while not source.live:
            await asyncio.sleep(0.05)
        await asyncio.sleep(1)
        relist_block, relist_wall = await lag.stop()
        collections.close()
        gc_worst = collections.worst * 1000
        print(f"the longest collection was of generation {collections.worst_generation}")
    print(f"rss={rss:.1f}")
    print(f"view={rss - before_pods:.1f}")
    print(f"pods={view_pods if shared else len(reflector.pods)}")
    print(f"store={store:.2f}")
    print(f"block={block:.2f}")
    print(f"block_wall={block_wall:.2f}")
    print(f"relists={relists}")
    print(f"relist_block={relist_block:.2f}")
    print(f"relist_wall={relist_wall:.2f}")
    print(f"relist_gc={gc_worst:.2f}")
    await _cluster.stop_reflectors("jhub")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spawns", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--spawner-check",
        action="store_true",
        help="also time ColocatingKubeSpawner.colocation_decide against a real apiserver",
    )
    parser.add_argument("--check-samples", type=int, default=200)
    parser.add_argument(
        "--sizes",
        default=",".join(f"{p}x{n}" for p, n in SIZES),
        help="PODSxNODES,... (default: all four)",
    )
    parser.add_argument(
        "--loop-seconds",
        type=float,
        default=30.0,
        help="seconds each hub-like process is watched for event loop blocks (default: 30)",
    )
    parser.add_argument("--probe", choices=("stock", "colocate"), help=argparse.SUPPRESS)
    parser.add_argument("--kubeconfig", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe:
        asyncio.run(probe(args.kubeconfig, args.probe, args.loop_seconds))
        return
    sizes = [tuple(int(x) for x in size.split("x")) for size in args.sizes.split(",")]
    rng = random.Random(args.seed)
    headline = ""
    for pods, nodes in sizes:
        decide_line, check_line = run(pods, nodes, args.spawns, rng)
        print(check_line)
        print(decide_line, flush=True)
        headline = decide_line
    if args.spawner_check:
        import logging

        logging.getLogger("traitlets").setLevel(logging.ERROR)
        for pods, nodes in sizes:
            lines = asyncio.run(spawner_check(pods, nodes, args.check_samples, args.loop_seconds))
            for line in lines:
                print(line, flush=True)
    print(headline)


if __name__ == "__main__":
    main()
