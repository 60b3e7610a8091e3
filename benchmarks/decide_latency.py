"""Latency of the decision on large states.

For each size (pods x nodes) it builds a realistic state (users with RWO homes, pods spread over
nodes and namespaces, some finished, some terminating) and times, per spawn:

- ``decide``: ``placement.decide`` on a ClusterState whose pod index is built (once per snapshot),
  computing every pod's requests and the pinned node's usage afresh;
- ``check``: everything the pre-spawn check does with the pods in hand: build the ClusterState
  from the objects, index it, decide, and merge the affinity into the manifest.

With ``--spawner-check`` it also times the spawner's own pre-spawn check,
``ColocatingKubeSpawner.colocation_decide``, against a real kube-apiserver (tests/kube) holding
each state: pods from KubeSpawner's pod reflector cache, the claim, node, PV and the node's pods
read from the API (loopback), then decide.  That is what a spawn waits for.

Prints one line per size and per measure; the last line is the headline:
``decide p50=… p99=… ms (pods=10000 nodes=1000)``.

    python benchmarks/decide_latency.py [--spawns 2000] [--seed 1] [--spawner-check]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time

from nebari_colocate.affinity import apply_decision
from nebari_colocate.placement import Policy, decide
from nebari_colocate.state import ClusterState


def build_objects(pods: int, nodes: int, rng: random.Random) -> list[dict]:
    objects: list[dict] = []
    for i in range(nodes):
        gpu = i % 10 == 0
        alloc = {"cpu": "32", "memory": "128Gi", "pods": "110"}
        if gpu:
            alloc["nvidia.com/gpu"] = "4"
        objects.append(
            {
                "kind": "Node",
                "metadata": {
                    "name": f"node-{i}",
                    "labels": {
                        "kubernetes.io/hostname": f"node-{i}",
                        "node-type": "gpu" if gpu else "cpu",
                    },
                },
                "spec": {"taints": [{"key": "gpu", "effect": "NoSchedule"}] if gpu else []},
                "status": {"allocatable": alloc},
            }
        )
    users = max(1, pods // 4)
    for u in range(users):
        objects.append(
            {
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": f"claim-user{u}", "namespace": "jhub"},
                "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": f"pv-{u}"},
            }
        )
    for i in range(pods):
        user = i % users
        namespace = "jhub" if i % 3 else f"other-{i % 7}"
        phase = rng.choice(["Running"] * 8 + ["Succeeded", "Failed"])
        meta = {"name": f"pod-{i}", "namespace": namespace, "labels": {"app": "x"}}
        if rng.random() < 0.02:
            meta["deletionTimestamp"] = "2026-11-30T00:00:00Z"
        objects.append(
            {
                "kind": "Pod",
                "metadata": meta,
                "spec": {
                    "nodeName": f"node-{(user * 7) % nodes}",
                    "containers": [
                        {"name": "c", "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}}}
                    ],
                    "volumes": [
                        {
                            "name": "home",
                            "persistentVolumeClaim": {"claimName": f"claim-user{user}"},
                        }
                    ],
                },
                "status": {"phase": phase},
            }
        )
    return objects


def new_pod(user: int) -> dict:
    return {
        "metadata": {"name": f"jupyter-user{user}--new", "namespace": "jhub"},
        "spec": {
            "containers": [
                {"name": "notebook", "resources": {"requests": {"cpu": "1", "memory": "2Gi"}}}
            ],
            "volumes": [
                {"name": "home", "persistentVolumeClaim": {"claimName": f"claim-user{user}"}}
            ],
        },
    }


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
        state.__dict__.pop("_requests_memo", None)
        state.__dict__.pop("_usage_memo", None)
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


async def spawner_check(pods: int, nodes: int, samples: int) -> str:
    """p50/p99 of ColocatingKubeSpawner.colocation_decide against a real apiserver."""
    import _cluster
    from kubernetes_asyncio import client
    from kubespawner import KubeSpawner

    from nebari_colocate import ColocatingKubeSpawner

    objects = build_objects(pods, nodes, random.Random(pods * 7 + nodes))
    with _cluster.control_plane(kubelet_stub=False) as cp:
        await _cluster.use_credentials(cp.kubeconfig)
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
                    taints=obj["spec"]["taints"],
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

        spawners = []
        for user in range(CHECKED_USERS):
            spawner = _cluster.make_spawner(
                ColocatingKubeSpawner, "jhub", f"user{user}", "new", cpu_guarantee=1
            )
            manifest = spawner._serialize(await KubeSpawner.get_pod_manifest(spawner))
            spawners.append((spawner, manifest))
        await spawners[0][0]._start_watching_pods()
        cached = len(spawners[0][0].pod_reflector.pods)
        timings = []
        for k in range(samples):
            spawner, manifest = spawners[k % len(spawners)]
            start = time.perf_counter()
            decision = await spawner.colocation_decide(manifest)
            timings.append((time.perf_counter() - start) * 1000)
        assert decision.verdict in ("colocate", "refuse"), decision
        await _cluster.stop_reflectors("jhub")
    p50, p99 = percentiles(timings)
    return (
        f"spawner check (reflector cache of {cached} pods + API reads + decide) "
        f"p50={p50:.2f} p99={p99:.2f} ms (pods={pods} nodes={nodes})"
    )


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
    args = parser.parse_args()
    rng = random.Random(args.seed)
    headline = ""
    for pods, nodes in SIZES:
        decide_line, check_line = run(pods, nodes, args.spawns, rng)
        print(check_line)
        print(decide_line, flush=True)
        headline = decide_line
    if args.spawner_check:
        import logging

        logging.getLogger("traitlets").setLevel(logging.ERROR)
        for pods, nodes in SIZES:
            print(asyncio.run(spawner_check(pods, nodes, args.check_samples)), flush=True)
    print(headline)


if __name__ == "__main__":
    main()
