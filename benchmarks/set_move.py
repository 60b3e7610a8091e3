"""The move of the whole set in one click: seconds from the click to every server running.

One control plane of tests/kube (etcd, kube-apiserver, kube-scheduler, kube-controller-manager
with the real attach/detach controller, kwok) plus Karpenter with its kwok cloud provider, as the
cluster tests run it. The capacity cap: alice's lab (1 CPU) and app (0.5 CPU) run on the machine
Karpenter launched for them (cpu-2x); her 'big' app (1.5 CPU) is refused there for lack of room.

- **existing node**: a node with room for all three is there (8 CPU, added after her servers
  started); the move restarts the two there and starts 'big';
- **new node**: no node has room; the move asks Karpenter for one (one pod holding the room of
  the whole set), which launches a cpu-4x, and the three start there.

Each figure is the steps of the hub's handler (``nebari_colocate.set_move_step.move_whole_set``,
what ``POST /hub/colocate/move-set/...`` runs after its scope checks): re-check under the lock,
stop the set, wait for the release (the real attach/detach controller detaches the volume), start
every server with its options, pinned to the node. Stock KubeSpawner has no way to this: 'big'
waits ``start_timeout`` (300 s in zero-to-jupyterhub) and fails; then the person can only stop
servers.

    python -m benchmarks.set_move [--repeat 1]

Last line: ``set-move: click-to-all-running existing-node=<s> new-node=<s> (3 servers: 2
restarted, 1 new); stock: no move, 'big' fails after 300 s``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time

from benchmarks import _cluster
from benchmarks._cluster import Z2JH_START_TIMEOUT
from tests.support import helpers

OURS = {"start_timeout": 120, "way_out_release_timeout": 120}
SET = {"": 1.0, "app": 0.5}
BIG = 1.5


class Run(_cluster.SpawnerRun):
    def __init__(self, cp) -> None:
        super().__init__(cp)
        self.notes: list[str] = []
        self.static_nodes: list[str] = []

    def note(self, text: str) -> None:
        self.notes.append(text)
        print(f"  {text}", flush=True)

    def spawner(self, namespace: str, server: str, cpu: float):
        from nebari_colocate import ColocatingKubeSpawner

        spawner = _cluster.make_spawner(
            ColocatingKubeSpawner, namespace, "alice", server, cpu_guarantee=cpu, **OURS
        )
        return self.keep(spawner)

    async def refused(self, case: str, attempt: int):
        """alice's set on a Karpenter machine, 'big' refused; for ``existing``, a roomy node."""
        namespace = await self.namespace(f"sm-{case}-{attempt}", clear=True)
        servers = {name: self.spawner(namespace, name, cpu) for name, cpu in SET.items()}
        for server in servers.values():
            await server.start()
        if case == "existing":
            name = f"roomy-{attempt}"
            async with _cluster.admin(self.cp) as api:
                await helpers.create_node(api, name, cpu="8", wait_ready=30)
            self.static_nodes.append(name)
        big = servers["big"] = self.spawner(namespace, "big", BIG)
        for _ in range(50):  # until the live view has the roomy node (existing)
            try:
                await big.start()
            except Exception:
                move = big.colocation_failure.way_out.move if big.colocation_failure else None
                if move is not None and (case != "existing" or move.node is not None):
                    return namespace, servers, move
            else:
                raise SystemExit(f"{case}: 'big' was not refused")
            await asyncio.sleep(0.2)
        failure = big.colocation_failure
        decision = failure.decision if failure is not None else None
        view = big.whole_set_state({"metadata": {}, "spec": {}})
        raise SystemExit(
            f"{case}: the refusal offered no move: "
            f"{decision.reasons if decision else None} {failure.way_out if failure else None}; "
            f"nodes seen {sorted(view.nodes or {}) if view is not None else None}"
        )

    async def click(self, case: str, attempt: int) -> float:
        from nebari_colocate.set_move_step import move_whole_set

        namespace, servers, move = await self.refused(case, attempt)
        stopped: list[str] = []

        async def stop_server(name: str) -> None:
            stopped.append(name)
            await servers[name].stop(now=True)

        async def start_server(name: str, options: dict) -> None:
            await servers[name].start()

        clicked = time.perf_counter()
        await move_whole_set(
            servers["big"],
            list(move.restart),
            move.node or "",
            spawner_of=servers.__getitem__,
            is_running=lambda name: name not in stopped,
            stop_server=stop_server,
            start_server=start_server,
            words={"start": "big", "restart": move.restart},
        )
        seconds = time.perf_counter() - clicked
        nodes = {await _cluster.pod_node(self.cp, namespace, s.pod_name) for s in servers.values()}
        if len(nodes) != 1:
            raise SystemExit(f"{case}: the set is split over {sorted(nodes)}")
        where = nodes.pop()
        self.note(f"{case}: all {len(servers)} running on {where} {seconds:.1f} s after click")
        for server in servers.values():
            await server.stop(now=True)
        await self.remove_static_nodes()
        return seconds

    async def remove_static_nodes(self) -> None:
        async with _cluster.admin(self.cp) as api:
            await helpers.delete_nodes(api, self.static_nodes)
        self.static_nodes.clear()

    async def close(self) -> None:
        await super().close()
        await self.remove_static_nodes()


async def main_async(args) -> None:
    started = time.perf_counter()
    async with _cluster.karpenter_cluster() as cp:
        run = Run(cp)
        try:
            figures = {
                case: [await run.click(case, i) for i in range(args.repeat)]
                for case in ("existing", "new-node")
            }
        finally:
            await run.close()
    print(f"machine: {_cluster.machine()}")
    for note in run.notes:
        print(note)
    print(f"run time: {time.perf_counter() - started:.0f} s")
    median = {case: statistics.median(values) for case, values in figures.items()}
    print(
        f"set-move: click-to-all-running existing-node={median['existing']:.1f} s "
        f"new-node={median['new-node']:.1f} s (3 servers: 2 restarted, 1 new); "
        f"stock: no move, 'big' fails after {Z2JH_START_TIMEOUT} s"
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="moves per case (median printed)")
    args = parser.parse_args(argv)
    asyncio.run(main_async(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
