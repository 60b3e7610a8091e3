"""API requests per spawn: stock KubeSpawner against ColocatingKubeSpawner, in one run.

Counted by kube-apiserver itself: ``apiserver_request_total`` from its ``/metrics`` (read with the
admin client certificate) before and after K spawns of each class, against the real control plane
of tests/kube (kube-apiserver, kube-scheduler, kube-controller-manager, kwok running the pods).
Each class gets its own namespace, its own users and so its own KubeSpawner reflectors; every user
starts a lab (first server: nothing pinned yet) and then an app (second server: pinned to the
lab's node, the pre-spawn check reads the node, its pods and the PV).  Users' home claims exist
and are bound beforehand (a hub's claims outlive its servers).

What is counted: every resource request the spawns cause, the spawner's own and the scheduler's
controllers' and kwok's (a binding, events, status updates, the volume's attachment: the same for
both classes, up to the controllers' own timing), plus the
LIST and WATCH of KubeSpawner's pod and event reflectors (one per namespace, counted when they
stop, shared by all spawns of the namespace).  Not counted: leases and non-resource requests
(kube-apiserver's own heartbeat and discovery, and the /metrics reads).

Measured twice, with the two permission sets a hub has: zero-to-jupyterhub's hub Role plus the
optional ClusterRole of examples/rbac.yaml, and the hub Role alone.  The spawners talk to the API
as a user bound to exactly those roles.

    python -m benchmarks.api_cost [--spawns 20] [--no-share-pod-watch]

``--no-share-pod-watch`` sets ``colocation_share_pod_watch = False`` on ours (on by default):
KubeSpawner's pod reflector then lists and watches the pods itself instead of reading the live
view's watch.

Last line: ``api requests per spawn: clusterrole stock=X colocate=Y (+D); z2jh-role ...``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from benchmarks import _cluster
from nebari_colocate.config import DEFAULT_SHARE_POD_WATCH

EXCLUDED_RESOURCES = {"", "leases"}


def _relevant(delta: dict) -> dict:
    return {k: v for k, v in delta.items() if k[1] not in EXCLUDED_RESOURCES}


def _total(delta: dict) -> float:
    return sum(_relevant(delta).values())


def _label(key: tuple) -> str:
    verb, resource, subresource, scope = key
    return f"{verb} {resource}{'/' + subresource if subresource else ''} ({scope})"


Z2JH_HUB_RULES = [
    {
        "apiGroups": [""],
        "resources": ["pods", "persistentvolumeclaims", "secrets", "services"],
        "verbs": ["get", "watch", "list", "create", "delete"],
    },
    {"apiGroups": [""], "resources": ["events"], "verbs": ["get", "watch", "list"]},
]
RBAC_FILE = _cluster.ROOT / "examples" / "rbac.yaml"
#: the two permission sets measured: zero-to-jupyterhub's hub Role, with and without the
#: optional ClusterRole of examples/rbac.yaml
RBAC_MODES = ("clusterrole", "z2jh-role")


async def grant(admin, namespace: str, user: str, mode: str) -> None:
    """The z2jh hub Role in ``namespace`` for ``user``; with ``clusterrole`` also the ClusterRole
    of examples/rbac.yaml (bound to ``user`` instead of the hub's service account)."""
    import yaml
    from kubernetes_asyncio import client

    rbac = client.RbacAuthorizationV1Api(admin)
    subject = [{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}]
    await rbac.create_namespaced_role(
        namespace, {"metadata": {"name": "hub"}, "rules": Z2JH_HUB_RULES}
    )
    await rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "hub"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "hub"},
            "subjects": subject,
        },
    )
    if mode != "clusterrole":
        return
    role = next(d for d in yaml.safe_load_all(RBAC_FILE.read_text()) if d["kind"] == "ClusterRole")
    name = f"nebari-colocate-reader-{user}"
    await rbac.create_cluster_role({"metadata": {"name": name}, "rules": role["rules"]})
    await rbac.create_cluster_role_binding(
        {
            "metadata": {"name": name},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": name,
            },
            "subjects": subject,
        }
    )


async def prepare(cp, namespace: str, users: int, user: str, mode: str) -> None:
    from kubernetes_asyncio import client

    admin = await _cluster.admin_client(cp)
    try:
        await client.CoreV1Api(admin).create_namespace({"metadata": {"name": namespace}})
        for i in range(users):
            await _cluster.helpers.create_bound_claim(admin, namespace, f"claim-u{i}")
        await grant(admin, namespace, user, mode)
    finally:
        await admin.close()


async def measure(cp, cls, namespace: str, users: int, kubeconfig: str, **traits) -> dict:
    """Spawn a lab and an app for each user as ``kubeconfig``'s user; the request deltas per
    stage.  Runs in its own event loop: KubeSpawner keeps one API client per loop."""
    await _cluster.use_credentials(kubeconfig)
    await asyncio.sleep(1)

    stages = {}
    before = _cluster.apiserver_request_totals(cp)
    labs = [_cluster.make_spawner(cls, namespace, f"u{i}", **traits) for i in range(users)]
    for spawner in labs:
        await spawner.start()
    after_labs = _cluster.apiserver_request_totals(cp)
    apps = [_cluster.make_spawner(cls, namespace, f"u{i}", "app", **traits) for i in range(users)]
    for spawner in apps:
        await spawner.start()
    await asyncio.sleep(1)  # the scheduler's events and the stub's status updates land
    after_apps = _cluster.apiserver_request_totals(cp)
    # The same spawns again on the warm hub (its reflectors and view running): what one more
    # spawn costs, the once-per-hub LISTs and WATCHes left out.
    for spawner in [*apps, *labs]:
        await spawner.stop(now=True)
    await asyncio.sleep(1)
    before_warm = _cluster.apiserver_request_totals(cp)
    for spawner in labs:
        await spawner.start()
    after_warm_labs = _cluster.apiserver_request_totals(cp)
    for spawner in apps:
        await spawner.start()
    await asyncio.sleep(1)
    after_warm_apps = _cluster.apiserver_request_totals(cp)
    await _cluster.stop_reflectors(namespace)  # KubeSpawner's reflectors and our live view
    await asyncio.sleep(1)  # a WATCH is counted when it ends
    after_all = _cluster.apiserver_request_totals(cp)
    await asyncio.sleep(0.1)  # let the per-loop API clients close before the loop does

    stages["labs"] = _relevant(_cluster.diff_totals(after_labs, before))
    stages["apps"] = _relevant(_cluster.diff_totals(after_apps, after_labs))
    stages["warm labs"] = _relevant(_cluster.diff_totals(after_warm_labs, before_warm))
    stages["warm apps"] = _relevant(_cluster.diff_totals(after_warm_apps, after_warm_labs))
    stages["reflectors"] = _relevant(_cluster.diff_totals(after_all, after_warm_apps))
    # the first round, and the WATCHes that ended at shutdown (a WATCH is counted when it ends:
    # a WATCH ended during the warm round is counted there, so this average may miss a few)
    first_round = _cluster.diff_totals(after_apps, before)
    for key, value in stages["reflectors"].items():
        first_round[key] = first_round.get(key, 0) + value
    stages["all"] = _relevant(first_round)
    return stages


def report(mode: str, stock: dict, ours: dict, users: int) -> tuple[float, float]:
    spawns = users * 2
    print(f"[{mode}] {spawns} spawns per class ({users} users x lab + app), requests per spawn:")
    keys = sorted(set(stock["all"]) | set(ours["all"]), key=_label)
    print(f"  {'request':58} {'stock':>7} {'colocate':>9}")
    for key in keys:
        s, o = stock["all"].get(key, 0) / spawns, ours["all"].get(key, 0) / spawns
        print(f"  {_label(key):58} {s:7.2f} {o:9.2f}")
    for stage, label in (
        ("labs", "first server"),
        ("apps", "pinned server"),
        ("warm labs", "first server, warm hub"),
        ("warm apps", "pinned server, warm hub"),
    ):
        s, o = _total(stock[stage]) / users, _total(ours[stage]) / users
        print(
            f"  per {label} spawn (reflector starts included): stock={s:.2f} colocate={o:.2f} "
            f"({o - s:+.2f})"
        )
        differ = sorted(set(stock[stage]) | set(ours[stage]), key=_label)
        for key in differ:
            s_n, o_n = stock[stage].get(key, 0), ours[stage].get(key, 0)
            if s_n != o_n:
                print(f"      {_label(key)}: stock {s_n:.0f}, colocate {o_n:.0f} (in {users})")
    s, o = _total(stock["reflectors"]), _total(ours["reflectors"])
    print(f"  WATCHes ended at shutdown (once per hub): stock={s:.0f} colocate={o:.0f}")
    s, o = _total(stock["all"]) / spawns, _total(ours["all"]) / spawns
    print(
        f"  [{mode}] average over first and pinned servers: stock={s:.2f} colocate={o:.2f} "
        f"difference={o - s:+.2f}"
    )
    return s, o


def main_run(spawns: int, share_pod_watch: bool = DEFAULT_SHARE_POD_WATCH) -> None:
    from kubespawner import KubeSpawner

    from nebari_colocate import ColocatingKubeSpawner

    users = max(1, spawns // 2)
    ours_traits = {"colocation_share_pod_watch": share_pod_watch}
    results = {}
    with _cluster.control_plane(kubelet_stub=True) as cp:

        async def nodes():
            admin = await _cluster.admin_client(cp)
            try:
                # One node: stock KubeSpawner's two servers of a user then share it (as with the
                # hard pod affinity deployments add), so its app can start at all; on two nodes
                # the attach/detach controller refuses the second attachment (Multi-Attach).
                # Request counts do not depend on the node a pod lands on.
                await _cluster.helpers.create_node(admin, "node-a", cpu="32", memory="64Gi")
            finally:
                await admin.close()

        asyncio.run(nodes())
        for mode in RBAC_MODES:
            per_class = {}
            for cls, tag in ((KubeSpawner, "stock"), (ColocatingKubeSpawner, "colocate")):
                namespace, user = f"cost-{mode}-{tag}", f"hub-{mode}-{tag}"
                asyncio.run(prepare(cp, namespace, users, user, mode))
                kubeconfig = cp.user_kubeconfig(user)
                traits = ours_traits if cls is ColocatingKubeSpawner else {}
                per_class[tag] = asyncio.run(
                    measure(cp, cls, namespace, users, kubeconfig, **traits)
                )
            results[mode] = per_class

    print(f"machine: {_cluster.machine()}")
    print(f"colocation_share_pod_watch: {share_pod_watch}")
    summary = []
    for mode in RBAC_MODES:
        s, o = report(mode, results[mode]["stock"], results[mode]["colocate"], users)
        summary.append(f"{mode} stock={s:.2f} colocate={o:.2f} ({o - s:+.2f})")
    print("api requests per spawn: " + "; ".join(summary))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spawns", type=int, default=20, help="spawns per class (even)")
    parser.add_argument(
        "--share-pod-watch",
        action=argparse.BooleanOptionalAction,
        default=DEFAULT_SHARE_POD_WATCH,
        help="ours with colocation_share_pod_watch on or off (default: the library's, on)",
    )
    args = parser.parse_args(argv)
    main_run(args.spawns, args.share_pod_watch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
