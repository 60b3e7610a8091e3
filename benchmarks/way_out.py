"""The way out in one click against the manual path, and the move off a GPU node, on Karpenter.

One control plane of tests/kube (etcd, kube-apiserver, kube-scheduler, kube-controller-manager
with the real attach/detach controller, kwok) plus Karpenter with its kwok cloud provider and
NodePools ``cpu`` and ``gpu`` (tainted ``nvidia.com/gpu``), as the cluster tests run it
(tests/kube/autoscaler.py). Before each case every node is removed: Karpenter launches the nodes
each case needs, so no case profits from another's.

- GPU lab blocked: an app (0.5 CPU) runs on a CPU node; the GPU lab is refused.
- Capacity cap: a lab (1.5 CPU) takes most of the smallest CPU machine; an app (1 CPU) is refused.

For each, seconds from the person's click to the wanted server running:

- **way out**: the steps of the hub's handler (``nebari_colocate.handlers.take_way_out``, what
  ``POST /hub/colocate/way-out/...`` runs after its scope checks): re-check under the lock, stop
  what blocks, wait for the release (the real attach/detach controller detaches the volume), start
  the server with its options;
- **manual**, a fast person: the click is "Stop" on the home page (the spawner's stop, as
  JupyterHub's), then "Start" again at once and every ``--retry-every`` seconds after each
  refusal (while the volume is still attached to the old node the start is refused again), until
  it starts; no time is counted for reading or for moving the mouse;
- **stock** KubeSpawner: it says nothing until ``start_timeout`` (300 s in zero-to-jupyterhub),
  and even then only "Spawn failed: "; then the person must find the app and do the manual path.
  The benchmark states 300 s without waiting for it (``benchmarks/failure_modes.py`` measures
  that stock times out).

GPU node kept alive: a GPU lab runs (Karpenter adds a GPU node), an app follows it there (every
server tolerates the GPU taint and carries ``karpenter.sh/do-not-disrupt``; ``premium_node_policy``
warn, the default), then the lab stops. GPU node-seconds from the lab's stop to the GPU node's
removal:

- **moved**: the person takes the home page's move at once (``move_off_premium``, what
  ``POST /hub/colocate/move/<user>`` runs): the app stops, the volume detaches, the app starts
  on a CPU node Karpenter adds, and Karpenter consolidates the empty GPU node (it looks every
  10 s and waits 15 s before it acts, on its own clock: consolidateAfter is 0 s here);
- **kept**: nobody moves it: the GPU node runs for as long as the app does; the figure is the
  observation window (``--window``), a lower bound.

    python -m benchmarks.way_out [--window 120] [--retry-every 2]

Last line: ``way-out: click-to-running gpu=<s> cap=<s>; manual gpu=<s> cap=<s>; stock=300 s;
gpu-node-seconds moved=<s> kept=<s>``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

from benchmarks import _cluster
from benchmarks._cluster import GPU_PROFILE, GPU_TOLERATION, Z2JH_START_TIMEOUT
from tests.support.autoscaler import DO_NOT_DISRUPT, NODEPOOL_LABEL, clear_nodes

START_TIMEOUT = 90  # a server waits for Karpenter's node
OURS = {"start_timeout": START_TIMEOUT, "way_out_release_timeout": 120}
PROTECTED = {"extra_annotations": {DO_NOT_DISRUPT: "true"}}

# case -> (the running server, its traits; the refused one, its traits)
CASES = {
    "gpu": (("app", {"cpu_guarantee": 0.5}), ("", GPU_PROFILE)),
    "cap": (("", {"cpu_guarantee": 1.5}), ("app", {"cpu_guarantee": 1.0})),
}


class Run(_cluster.SpawnerRun):
    def __init__(self, cp, retry_every: float):
        super().__init__(cp)
        self.retry_every = retry_every
        self.notes: list[str] = []

    def note(self, text: str) -> None:
        """A figure, kept for the summary and printed now (a run that fails later keeps it)."""
        self.notes.append(text)
        print(f"  {text}", flush=True)

    async def fresh(self, name: str, *, clear: bool = True) -> str:
        """A namespace with alice's home; with ``clear``, first an empty cluster (Karpenter
        removes every node)."""
        return await self.namespace(name, clear=clear)

    def spawner(self, namespace: str, server: str, **traits):
        from nebari_colocate import ColocatingKubeSpawner

        spawner = _cluster.make_spawner(
            ColocatingKubeSpawner, namespace, "alice", server, **OURS, **traits
        )
        return self.keep(spawner)

    async def pool_of(self, namespace: str, pod_name: str) -> str:
        from kubernetes_asyncio import client

        node_name = await _cluster.pod_node(self.cp, namespace, pod_name)
        async with _cluster.admin(self.cp) as admin:
            node = await client.CoreV1Api(admin).read_node(node_name)
            return str((node.metadata.labels or {}).get(NODEPOOL_LABEL))

    async def blocked(self, case: str, how: str):
        """The case's running server and the refused one (refused once, as the person saw)."""
        from nebari_colocate.spawner import ColocationRefused

        (running, running_traits), (wanted, wanted_traits) = CASES[case]
        namespace = await self.fresh(f"wo-{case}-{how}")
        holder = self.spawner(namespace, running, **running_traits)
        await holder.start()
        blocked = self.spawner(namespace, wanted, **wanted_traits)
        try:
            await blocked.start()
        except ColocationRefused as refused:
            self.note(f"{case}/{how}: refused ({', '.join(refused.decision.reasons)})")
        else:
            raise SystemExit(f"{case}: the server was not refused")
        return namespace, holder, blocked

    async def way_out(self, case: str) -> float:
        from nebari_colocate.handlers import take_way_out

        namespace, holder, blocked = await self.blocked(case, "way-out")
        stop = list(blocked.colocation_failure.way_out.stop)
        if stop != [holder.name]:
            raise SystemExit(f"{case}: unexpected way out {stop}")
        stopped: set[str] = set()

        async def stop_server(name: str) -> None:
            stopped.add(name)
            await holder.stop(now=True)

        async def start_server(options: dict) -> None:
            await blocked.start()

        clicked = time.perf_counter()
        await take_way_out(
            blocked,
            stop,
            is_running=lambda name: name == holder.name and name not in stopped,
            stop_server=stop_server,
            start_server=start_server,
            words={"start": blocked.name, "stop": tuple(stop)},
        )
        seconds = time.perf_counter() - clicked
        pool = await self.pool_of(namespace, blocked.pod_name)
        self.note(f"{case}/way-out: running on a {pool} node {seconds:.1f} s after click")
        return seconds

    async def manual(self, case: str) -> float:
        from nebari_colocate.spawner import ColocationRefused

        namespace, holder, blocked = await self.blocked(case, "manual")
        clicked = time.perf_counter()
        await holder.stop(now=True)
        tries = 0
        while True:
            tries += 1
            try:
                await blocked.start()
                break
            except ColocationRefused:
                await asyncio.sleep(self.retry_every)
        seconds = time.perf_counter() - clicked
        pool = await self.pool_of(namespace, blocked.pod_name)
        self.note(
            f"{case}/manual: running on a {pool} node {seconds:.1f} s after the stop click, "
            f"start clicked {tries} times"
        )
        return seconds

    async def gpu_node_seconds(self, window: float) -> tuple[float, float]:
        """(moved, kept): GPU node-seconds after the lab stops, side by side."""
        from nebari_colocate.handlers import move_off_premium

        async with _cluster.admin(self.cp) as admin:
            await clear_nodes(admin, timeout=180)
        setups = {}
        for which in ("moved", "kept"):
            namespace = await self.fresh(f"wo-node-{which}", clear=False)
            lab = self.spawner(namespace, "", **GPU_PROFILE, **PROTECTED)
            await lab.start()
            app = self.spawner(
                namespace, "app", cpu_guarantee=0.5, tolerations=[GPU_TOLERATION], **PROTECTED
            )
            await app.start()
            setups[which] = (lab, app, await _cluster.pod_node(self.cp, namespace, app.pod_name))
        if setups["moved"][2] == setups["kept"][2]:
            raise SystemExit("both users' apps on one GPU node: the figures would mix")
        await asyncio.gather(*(lab.stop(now=True) for lab, _, _ in setups.values()))
        stopped = time.perf_counter()
        lab, app, gpu = setups["moved"]
        rides = app.premium_rides()
        if [r.node for r in rides] != [gpu]:
            raise SystemExit(f"no ride on {gpu} to move: {rides}")

        async def stop_server(name: str) -> None:
            await app.stop(now=True)

        async def start_server(name: str, options: dict) -> None:
            await app.start()

        await move_off_premium(
            app,
            gpu,
            ["app"],
            spawner_of={"app": app}.__getitem__,
            stop_server=stop_server,
            start_server=start_server,
            words={"servers": ("app",)},
        )
        moved_at = time.perf_counter() - stopped
        pool = await self.pool_of(app.namespace, app.pod_name)
        self.note(f"move: app running on a {pool} node {moved_at:.1f} s after the lab")
        nodes = {which: node for which, (_, _, node) in setups.items()}
        alive = await _cluster.gone_after(self.cp, nodes, stopped, window)
        return alive["moved"], alive["kept"]


async def main_async(args) -> None:
    started = time.perf_counter()
    with open("/proc/loadavg") as f:
        load_before = " ".join(f.read().split()[:3])
    async with _cluster.karpenter_cluster() as cp:
        run = Run(cp, args.retry_every)
        try:
            click = {case: await run.way_out(case) for case in CASES}
            manual = {case: await run.manual(case) for case in CASES}
            moved, kept = await run.gpu_node_seconds(args.window)
        finally:
            await run.close()
    with open("/proc/loadavg") as f:
        load_after = " ".join(f.read().split()[:3])

    print(f"machine: {_cluster.machine()}; load average before {load_before}, after {load_after}")
    for note in run.notes:
        print(note)
    still = " (still alive at the end of the window)" if kept >= args.window else ""
    print(f"gpu node: moved gone {moved:.1f} s after the lab stopped; kept {kept:.0f} s{still}")
    print(
        f"stock KubeSpawner: stated as zero-to-jupyterhub's start_timeout ({Z2JH_START_TIMEOUT} s) "
        "before any word, not waited for here"
    )
    print(f"run time: {time.perf_counter() - started:.0f} s")
    print(
        f"way-out: click-to-running gpu={click['gpu']:.1f} s cap={click['cap']:.1f} s; "
        f"manual gpu={manual['gpu']:.1f} s cap={manual['cap']:.1f} s; "
        f"stock={Z2JH_START_TIMEOUT} s; gpu-node-seconds moved={moved:.0f} kept={kept:.0f}"
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--window", type=float, default=120.0, help="seconds to watch the GPU nodes after the lab"
    )
    parser.add_argument(
        "--retry-every",
        type=float,
        default=2.0,
        help="seconds the manual path waits after a refusal before it clicks Start again",
    )
    args = parser.parse_args(argv)
    asyncio.run(main_async(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
