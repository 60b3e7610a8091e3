"""Seconds from a spawn request to the reason the user sees, for each failure mode of
docs/failure-modes.md: stock KubeSpawner (with the hard pod affinity deployments use today) against
ColocatingKubeSpawner, in one run against the real control plane of tests/kube.

- GPU lab blocked: an app runs on the CPU node; the user starts a GPU profile.
- Capacity cap: a lab takes most of its node; the next server does not fit there although
  another node has room.
- GPU node kept alive (``premium_node_policy=refuse``): a GPU lab runs; the user starts a CPU app.

Stock KubeSpawner waits out its ``start_timeout`` (run here with a short one, ``--stock-timeout``,
and reported against zero-to-jupyterhub's 300 s) and then says "Spawn failed: " with a timeout;
in the third mode it starts the app on the GPU node instead and there is no verdict at all (the
node is kept alive).  ColocatingKubeSpawner refuses in its pre-spawn check, before the PVC or the
pod is created.  The spawn request is ``spawner.start()``; the reason is the exception it raises.

    python -m benchmarks.time_to_verdict [--stock-timeout 10] [--repeat 3]

Last line: ``time-to-verdict: colocate=… s stock=start_timeout (300 s) ratio=…x`` (colocate: the
slowest refusal over all modes and repeats).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import time

from benchmarks import _cluster
from tests.support.spawning import legacy_affinity

Z2JH_START_TIMEOUT = 300
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
GPU_PROFILE = {
    "node_selector": {"node-type": "gpu"},
    "tolerations": [GPU_TOLERATION],
    "extra_resource_limits": {"nvidia.com/gpu": "1"},
}


# Each mode: (nodes, the first server's traits, the second server's traits).
MODES = {
    "gpu-lab-blocked": (
        [
            ("cpu-1", {"labels": {"node-type": "cpu"}, "cpu": "8"}),
            (
                "gpu-1",
                {
                    "labels": {"node-type": "gpu"},
                    "taints": [GPU_TAINT],
                    "cpu": "8",
                    "extra": {"nvidia.com/gpu": "1"},
                },
            ),
        ],
        {"node_selector": {"node-type": "cpu"}},
        GPU_PROFILE,
    ),
    "capacity-cap": (
        [("cpu-1", {"cpu": "4"}), ("cpu-2", {"cpu": "4"})],
        {"cpu_guarantee": 3},
        {"cpu_guarantee": 2},
    ),
    "gpu-node-kept-alive": (
        [
            ("cpu-1", {"labels": {"node-type": "cpu"}, "cpu": "8"}),
            (
                "gpu-1",
                {"labels": {"node-type": "gpu"}, "cpu": "8", "extra": {"nvidia.com/gpu": "1"}},
            ),
        ],
        {"node_selector": {"node-type": "gpu"}, "extra_resource_limits": {"nvidia.com/gpu": "1"}},
        {"premium_node_policy": "refuse"},
    ),
}


async def one(cp, mode: str, which: str, run: int, stock_timeout: float) -> tuple[str, float, str]:
    """(outcome, seconds, what the user is told) of the second server's spawn."""
    from kubespawner import KubeSpawner

    from nebari_colocate import ColocatingKubeSpawner

    nodes, first, second = MODES[mode]
    namespace = f"ttv-{mode}-{which}-{run}"
    prefix = f"{which[0]}{run}-"
    admin = await _cluster.admin_client(cp)
    try:
        from kubernetes_asyncio import client

        await client.CoreV1Api(admin).create_namespace({"metadata": {"name": namespace}})
        for name, kwargs in nodes:
            await _cluster.helpers.create_node(admin, prefix + name, **kwargs)
        await _cluster.helpers.create_bound_claim(admin, namespace, "claim-alice")
    finally:
        await admin.close()

    cls = ColocatingKubeSpawner if which == "colocate" else KubeSpawner
    extra = {} if which == "colocate" else legacy_affinity("alice")
    second_traits = dict(second)
    if which == "stock":
        second_traits.pop("premium_node_policy", None)
    started_servers = []
    try:
        lab = _cluster.make_spawner(cls, namespace, "alice", "first", **first, **extra)
        started_servers.append(lab)
        await lab.start()
        app = _cluster.make_spawner(
            cls,
            namespace,
            "alice",
            "second",
            start_timeout=stock_timeout if which == "stock" else 30,
            **second_traits,
            **extra,
        )
        started_servers.append(app)
        t0 = time.perf_counter()
        try:
            await app.start()
        except Exception as exc:
            elapsed = time.perf_counter() - t0
            message = getattr(exc, "jupyterhub_message", None) or f"{type(exc).__name__}: {exc}"
            kind = "refused" if hasattr(exc, "jupyterhub_message") else "timed out"
            return kind, elapsed, message
        elapsed = time.perf_counter() - t0
        node = app.pod_reflector.pods[f"{namespace}/{app.pod_name}"]["spec"]["nodeName"]
        return "started", elapsed, f"no verdict: the server started on {node.removeprefix(prefix)}"
    finally:
        for spawner in started_servers:
            with contextlib.suppress(Exception):
                await spawner.stop(now=True)
        await _cluster.stop_reflectors(namespace)
        admin = await _cluster.admin_client(cp)
        try:
            await _cluster.helpers.cleanup(admin, namespace, [prefix + n for n, _ in nodes])
            await _cluster.helpers.delete_namespace(admin, namespace)
        finally:
            await admin.close()


async def main_async(args) -> None:
    results: dict = {mode: {"colocate": [], "stock": []} for mode in MODES}
    with _cluster.control_plane(kubelet_stub=True) as cp:
        await _cluster.use_credentials(cp.kubeconfig)
        for run in range(args.repeat):
            for mode in MODES:
                for which in ("colocate", "stock"):
                    if which == "stock" and run >= args.stock_repeat:
                        continue
                    outcome = await one(cp, mode, which, run, args.stock_timeout)
                    results[mode][which].append(outcome)
        await asyncio.sleep(0.1)

    print(f"machine: {_cluster.machine()}")
    print(
        f"stock KubeSpawner: hard pod affinity, start_timeout={args.stock_timeout:g} s "
        f"(zero-to-jupyterhub: {Z2JH_START_TIMEOUT} s)"
    )
    slowest = 0.0
    for mode, by_class in results.items():
        ours = by_class["colocate"]
        seconds = [s for _, s, _ in ours]
        slowest = max(slowest, *seconds)
        kinds = {k for k, _, _ in ours}
        print(
            f"{mode}: colocate {'/'.join(sorted(kinds))} in median {statistics.median(seconds):.3f}"
            f" s, max {max(seconds):.3f} s over {len(seconds)} runs: {ours[0][2]!r}"
        )
        for kind, secs, text in by_class["stock"]:
            if kind == "timed out":
                print(
                    f"{mode}: stock timed out after {secs:.1f} s (start_timeout "
                    f"{args.stock_timeout:g} s; {Z2JH_START_TIMEOUT} s in zero-to-jupyterhub): "
                    f"{text}"
                )
            else:
                print(f"{mode}: stock {kind} after {secs:.1f} s: {text}")
    ratio = Z2JH_START_TIMEOUT / slowest if slowest else float("inf")
    print(
        f"time-to-verdict: colocate={slowest:.3f} s stock=start_timeout ({Z2JH_START_TIMEOUT} s) "
        f"ratio={ratio:.0f}x"
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stock-timeout", type=float, default=10.0, help="stock start_timeout")
    parser.add_argument("--repeat", type=int, default=3, help="runs of ColocatingKubeSpawner")
    parser.add_argument(
        "--stock-repeat", type=int, default=1, help="runs of stock KubeSpawner (each waits)"
    )
    args = parser.parse_args(argv)
    asyncio.run(main_async(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
