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
It also prints the resident memory of a hub-like process holding the state, once with stock
KubeSpawner's reflectors and once with ours (reflectors + live view), each in a fresh process.

Prints one line per size and per measure; the last line is the headline:
``decide p50=… p99=… ms (pods=10000 nodes=1000)``.

    python -m benchmarks.decide_latency [--spawns 2000] [--seed 1] [--spawner-check]
"""

from __future__ import annotations

import argparse
import asyncio
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


async def spawner_check(pods: int, nodes: int, samples: int) -> list[str]:
    """p50/p99 of ColocatingKubeSpawner.colocation_decide against a real apiserver (the dry
    run's round trip apart), and the hub's resident memory, stock and ours, with the state."""
    from benchmarks import _cluster
    from nebari_colocate import ColocatingKubeSpawner

    objects = build_objects(pods, nodes, random.Random(pods * 7 + nodes))
    with _cluster.control_plane(kubelet_stub=False) as cp:
        await _cluster.use_credentials(cp.kubeconfig)
        await _load_cluster(cp, objects)
        rss = {cls: _rss_probe(cp.kubeconfig, cls) for cls in ("stock", "colocate")}

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
    return [
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
        self._started = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        elif self._started:
            self.total += time.perf_counter() - self._started

    def reset(self) -> None:
        self.total = 0.0

    def close(self) -> None:
        import gc

        gc.callbacks.remove(self._callback)


def _rss_probe(kubeconfig: str, which: str) -> float:
    """The resident memory (MiB) of a fresh hub-like process once KubeSpawner's reflectors (and,
    for ``colocate``, the live view) hold the state: a child process per measurement."""
    import subprocess

    result = subprocess.run(
        [sys.executable, __file__, "--rss-probe", which, "--kubeconfig", kubeconfig],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise RuntimeError(f"the {which} memory probe failed:\n{result.stderr[-3000:]}")
    for line in result.stdout.strip().splitlines()[:-1]:
        print(f"  {which} probe: {line}")
    return float(result.stdout.strip().splitlines()[-1])


def _rss_mib() -> float:

    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


async def rss_probe(kubeconfig: str, which: str) -> None:
    """Child process of :func:`_rss_probe`: warm the watches of one class, print RSS (MiB)."""
    import gc
    import logging

    from kubespawner import KubeSpawner

    from benchmarks import _cluster
    from nebari_colocate import ColocatingKubeSpawner

    logging.getLogger("traitlets").setLevel(logging.ERROR)
    await _cluster.use_credentials(kubeconfig)
    cls = ColocatingKubeSpawner if which == "colocate" else KubeSpawner
    spawners = await _checked_spawners(cls)
    spawner, manifest = spawners[0]
    print(f"rss after imports: {_rss_mib():.0f} MiB")
    await spawner._start_watching_pods()
    await spawner._start_watching_events()
    gc.collect()
    print(f"rss with KubeSpawner's reflectors warm: {_rss_mib():.0f} MiB")
    if which == "colocate":
        await spawner.colocation_decide(manifest)
        await spawner.colocation_view().wait_live(120)
        await spawner.colocation_decide(manifest)
    await asyncio.sleep(2)
    gc.collect()
    print(f"{_rss_mib():.1f}")
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
    parser.add_argument("--rss-probe", choices=("stock", "colocate"), help=argparse.SUPPRESS)
    parser.add_argument("--kubeconfig", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rss_probe:
        asyncio.run(rss_probe(args.kubeconfig, args.rss_probe))
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
            for line in asyncio.run(spawner_check(pods, nodes, args.check_samples)):
                print(line, flush=True)
    print(headline)


if __name__ == "__main__":
    main()
