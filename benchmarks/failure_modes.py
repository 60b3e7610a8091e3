"""The three failure modes with the real autoscaler (Karpenter), stock KubeSpawner against ours,
in one run: seconds to a verdict the user can read, and GPU node-seconds kept alive after the lab
stops.

One control plane of tests/kube (etcd, kube-apiserver, kube-scheduler, kube-controller-manager,
kwok) plus Karpenter with its kwok cloud provider and NodePools ``cpu`` and ``gpu`` (tainted
``nvidia.com/gpu``), as the cluster tests run it (tests/support/autoscaler.py). Every user starts
with no node: Karpenter launches the nodes the first servers need.

- GPU lab blocked: an app runs on a CPU node; the user starts a GPU profile.
- Capacity cap: a lab takes most of the smallest CPU machine; the next server does not fit there.
- No pool can serve: a first server asks for 8 GPUs, more than any machine type has.
- GPU node kept alive: a GPU lab runs, a CPU app follows it (every server tolerates the GPU taint
  and carries ``karpenter.sh/do-not-disrupt``); then the lab stops.

Stock KubeSpawner carries the hard pod affinity deployments use today. It never gives a reason in
the first three modes: it waits out ``start_timeout`` (run here with ``--stock-timeout``; 300 s
in zero-to-jupyterhub, the figure reported) and says "Spawn failed: ". In the fourth the app
starts on the GPU node and keeps it: its node-seconds are the observation window
(``--window``), a lower bound. ColocatingKubeSpawner (``premium_node_policy=refuse`` in the
fourth mode) refuses before the pod exists, or ends the spawn on Karpenter's event; its GPU node
is consolidated once the lab stops.

    python -m benchmarks.failure_modes [--window 90] [--stock-timeout 15]

Last line: ``failure-modes: verdict stock=<s> ours=<s>; gpu-node-seconds stock=<s> ours=<s>``
(ours: the slowest verdict over the modes).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time

from benchmarks import _cluster
from benchmarks._cluster import GPU_PROFILE, GPU_TOLERATION, Z2JH_START_TIMEOUT
from tests.support.autoscaler import DO_NOT_DISRUPT, clear_nodes
from tests.support.spawning import legacy_affinity

START_TIMEOUT = 90  # a first server waits for Karpenter's node

# mode -> (first server's traits or None, second server's traits, ours' extra traits)
MODES = {
    "gpu-lab-blocked": ({"cpu_guarantee": 0.5}, GPU_PROFILE, {}),
    "capacity-cap": ({"cpu_guarantee": 1.5}, {"cpu_guarantee": 1.0}, {}),
    "no-pool-can-serve": (
        None,
        {"tolerations": [GPU_TOLERATION], "extra_resource_limits": {"nvidia.com/gpu": "8"}},
        {"unschedulable_grace_seconds": 0},
    ),
}


class Run(_cluster.SpawnerRun):
    def __init__(self, cp, stock_timeout: float):
        super().__init__(cp)
        self.stock_timeout = stock_timeout

    def spawner(self, which: str, namespace: str, server: str, traits: dict, ours: dict):
        from kubespawner import KubeSpawner

        from nebari_colocate import ColocatingKubeSpawner

        if which == "stock":
            cls, extra = KubeSpawner, legacy_affinity("alice")
        else:
            cls, extra = ColocatingKubeSpawner, ours
        return self.keep(_cluster.make_spawner(cls, namespace, "alice", server, **traits, **extra))

    async def verdict(self, mode: str, which: str) -> tuple[str, float, str]:
        """(outcome, seconds, what the user is told) of the second server's spawn."""
        first, second, ours = MODES[mode]
        namespace = await self.namespace(f"fm-{mode}-{which}")
        if first is not None:
            lab = self.spawner(which, namespace, "lab", {**first, "start_timeout": 90}, ours)
            await lab.start()
        timeout = self.stock_timeout if which == "stock" else START_TIMEOUT
        app = self.spawner(which, namespace, "app", {**second, "start_timeout": timeout}, ours)
        t0 = time.perf_counter()
        try:
            await app.start()
        except Exception as exc:
            elapsed = time.perf_counter() - t0
            message = getattr(exc, "jupyterhub_message", None)
            if message is None:
                return "timed out", elapsed, f"{type(exc).__name__}: {exc}"
            return "refused", elapsed, message
        return "started", time.perf_counter() - t0, "no verdict: the server started"

    async def gpu_node_kept_alive(self, window: float) -> dict[str, float]:
        """GPU node-seconds after the lab stops, stock and ours side by side (same window)."""
        protected = {"extra_annotations": {DO_NOT_DISRUPT: "true"}}
        labs, gpu_nodes = {}, {}
        for which in ("stock", "ours"):
            namespace = await self.namespace(f"fm-kept-alive-{which}")
            ours = {"premium_node_policy": "refuse", **protected}
            traits = {**GPU_PROFILE, "start_timeout": START_TIMEOUT}
            if which == "stock":
                traits.update(protected)
            lab = self.spawner(which, namespace, "lab", traits, ours)
            await lab.start()
            app_traits = {
                "cpu_guarantee": 0.5,
                "tolerations": [GPU_TOLERATION],
                "start_timeout": START_TIMEOUT,
                **(protected if which == "stock" else {}),
            }
            app = self.spawner(which, namespace, "app", app_traits, ours)
            with contextlib.suppress(Exception):  # ours refuses it (premium-node)
                await app.start()
            gpu_nodes[which] = await _cluster.pod_node(self.cp, namespace, lab.pod_name)
            labs[which] = lab
        await asyncio.gather(*(lab.stop(now=True) for lab in labs.values()))
        stopped = time.perf_counter()
        return await _cluster.gone_after(self.cp, gpu_nodes, stopped, window)


async def main_async(args) -> None:
    results: dict[str, dict[str, tuple[str, float, str]]] = {}
    started = time.perf_counter()
    async with _cluster.karpenter_cluster() as cp:
        run = Run(cp, args.stock_timeout)
        try:
            for mode in MODES:
                results[mode] = {w: await run.verdict(mode, w) for w in ("stock", "ours")}
        finally:
            await run.close()
        # An empty cluster again: consolidating the earlier modes' nodes would compete with
        # the GPU nodes below for Karpenter's disruption budget (10 % of the nodes).
        async with _cluster.admin(cp) as admin:
            await clear_nodes(admin, timeout=120)
        run = Run(cp, args.stock_timeout)
        try:
            alive = await run.gpu_node_kept_alive(args.window)
        finally:
            await run.close()

    print(f"machine: {_cluster.machine()}")
    print(
        f"stock KubeSpawner: hard pod affinity, start_timeout={args.stock_timeout:g} s "
        f"(zero-to-jupyterhub: {Z2JH_START_TIMEOUT} s)"
    )
    slowest = 0.0
    for mode, by_class in results.items():
        for which, (kind, seconds, text) in by_class.items():
            print(f"{mode}: {which} {kind} after {seconds:.2f} s: {text!r}")
        kind, seconds, _ = by_class["ours"]
        if kind != "refused":
            raise SystemExit(f"{mode}: ours did not refuse ({kind})")
        if by_class["stock"][0] != "timed out":
            raise SystemExit(f"{mode}: stock did not wait out its start_timeout")
        slowest = max(slowest, seconds)
    for which, seconds in alive.items():
        still = " (still alive at the end of the window)" if seconds >= args.window else ""
        print(f"gpu-node-kept-alive: {which} GPU node alive {seconds:.1f} s after the lab{still}")
    print(f"run time: {time.perf_counter() - started:.0f} s")
    print(
        f"failure-modes: verdict stock={Z2JH_START_TIMEOUT} ours={slowest:.2f}; "
        f"gpu-node-seconds stock={alive['stock']:.0f} ours={alive['ours']:.0f}"
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--window", type=float, default=90.0, help="seconds to watch the GPU nodes after the lab"
    )
    parser.add_argument(
        "--stock-timeout", type=float, default=15.0, help="start_timeout of stock KubeSpawner"
    )
    args = parser.parse_args(argv)
    asyncio.run(main_async(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
