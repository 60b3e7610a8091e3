"""API requests per spawn: stock KubeSpawner against ColocatingKubeSpawner, in one run.

Counted by kube-apiserver itself: ``apiserver_request_total`` from its ``/metrics`` (read with the
admin client certificate) before and after K spawns of each class, against the real control plane
of tests/kube (kube-apiserver, kube-scheduler, the kubelet stub that marks bound pods Running).
Each class gets its own namespace, its own users and so its own KubeSpawner reflectors; every user
starts a lab (first server: nothing pinned yet) and then an app (second server: pinned to the
lab's node, the pre-spawn check reads the node, its pods and the PV).  Users' home claims exist
and are bound beforehand (a hub's claims outlive its servers).

What is counted: every resource request the spawns cause, the spawner's own and the scheduler's
and kubelet stub's (a binding, an event, a status update: the same for both classes), plus the
LIST and WATCH of KubeSpawner's pod and event reflectors (one per namespace, counted when they
stop, shared by all spawns of the namespace).  Not counted: leases and non-resource requests
(kube-apiserver's own heartbeat and discovery, and the /metrics reads).

    python benchmarks/api_cost.py [--spawns 20]

Last line: ``api requests per spawn: stock=X colocate=Y``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent))

import _cluster

EXCLUDED_RESOURCES = {"", "leases"}


def _relevant(delta: dict) -> dict:
    return {k: v for k, v in delta.items() if k[1] not in EXCLUDED_RESOURCES}


def _total(delta: dict) -> float:
    return sum(_relevant(delta).values())


def _label(key: tuple) -> str:
    verb, resource, subresource, scope = key
    return f"{verb} {resource}{'/' + subresource if subresource else ''} ({scope})"


async def measure(cp, cls, namespace: str, users: int) -> dict:
    """Spawn a lab and an app for each user; the request deltas per stage."""
    admin = await _cluster.admin_client(cp)
    try:
        from kubernetes_asyncio import client

        await client.CoreV1Api(admin).create_namespace({"metadata": {"name": namespace}})
        for i in range(users):
            await _cluster.helpers.create_bound_claim(admin, namespace, f"claim-u{i}")
    finally:
        await admin.close()
    await asyncio.sleep(1)

    stages = {}
    before = _cluster.apiserver_request_totals(cp)
    labs = [_cluster.make_spawner(cls, namespace, f"u{i}") for i in range(users)]
    for spawner in labs:
        await spawner.start()
    after_labs = _cluster.apiserver_request_totals(cp)
    apps = [_cluster.make_spawner(cls, namespace, f"u{i}", "app") for i in range(users)]
    for spawner in apps:
        await spawner.start()
    await asyncio.sleep(1)  # the scheduler's events and the stub's status updates land
    after_apps = _cluster.apiserver_request_totals(cp)
    await _cluster.stop_reflectors(namespace)
    await asyncio.sleep(1)  # a WATCH is counted when it ends
    after_all = _cluster.apiserver_request_totals(cp)

    stages["labs"] = _relevant(_cluster.diff_totals(after_labs, before))
    stages["apps"] = _relevant(_cluster.diff_totals(after_apps, after_labs))
    stages["reflectors"] = _relevant(_cluster.diff_totals(after_all, after_apps))
    stages["all"] = _relevant(_cluster.diff_totals(after_all, before))
    return stages


async def main_async(spawns: int) -> None:
    from kubespawner import KubeSpawner

    from nebari_colocate import ColocatingKubeSpawner

    users = max(1, spawns // 2)
    spawns = users * 2
    with _cluster.control_plane(kubelet_stub=True) as cp:
        await _cluster.use_credentials(cp.kubeconfig)
        admin = await _cluster.admin_client(cp)
        try:
            for name in ("node-a", "node-b", "node-c"):
                await _cluster.helpers.create_node(admin, name, cpu="32", memory="64Gi")
        finally:
            await admin.close()
        stock = await measure(cp, KubeSpawner, "cost-stock", users)
        ours = await measure(cp, ColocatingKubeSpawner, "cost-colocate", users)
        # Let the per-loop API clients of KubeSpawner close before the loop does.
        await asyncio.sleep(0.1)

    print(f"machine: {_cluster.machine()}")
    print(f"{spawns} spawns per class ({users} users x lab + app), requests per spawn:")
    keys = sorted(set(stock["all"]) | set(ours["all"]), key=_label)
    print(f"  {'request':58} {'stock':>7} {'colocate':>9}")
    for key in keys:
        s, o = stock["all"].get(key, 0) / spawns, ours["all"].get(key, 0) / spawns
        print(f"  {_label(key):58} {s:7.2f} {o:9.2f}")
    for stage, count in (("labs", users), ("apps", users)):
        s, o = _total(stock[stage]) / count, _total(ours[stage]) / count
        print(f"  per {stage[:-1]} spawn: stock={s:.2f} colocate={o:.2f}")
    s, o = _total(stock["reflectors"]), _total(ours["reflectors"])
    print(f"  reflector LIST+WATCH (once per namespace): stock={s:.0f} colocate={o:.0f}")
    s, o = _total(stock["all"]) / spawns, _total(ours["all"]) / spawns
    print(f"api requests per spawn: stock={s:.2f} colocate={o:.2f}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spawns", type=int, default=20, help="spawns per class (even)")
    args = parser.parse_args(argv)
    asyncio.run(main_async(args.spawns))
    return 0


if __name__ == "__main__":
    sys.exit(main())
