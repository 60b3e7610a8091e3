"""Churn: many users starting and stopping servers at once, under capacity pressure.

100 users with a ReadWriteOnce home each and 3 servers each (the default server and two apps),
on 10 nodes that hold about half of what everyone would run (4 CPU each, every server asks for
0.5 CPU: 40 CPU for up to 150).  In each round every server is toggled with probability
``--toggle`` (started if stopped, stopped if running), all at once through real
ColocatingKubeSpawners (``--concurrency`` at a time, like a hub under a spawn storm) against the
real control plane (tests/kube: etcd, kube-apiserver, kube-scheduler, kubelet stub; loopback).

Counted: spawns, started, refused with a reason a person can read (the pre-spawn check, or fail
fast on the pod's events: ``unschedulable_grace_seconds`` is 2 s here), errors (anything else: a
raw exception, a spawn that timed out), split claims (an RWO claim used by pods on two nodes,
checked after every round), orphans (pods no running server owns, after every round and at the
end), and the duration of every pre-spawn check.

Last line: ``churn: <spawns> spawns, <started> started, <refused> refused with a reason,
<errors> errors, <split> split claims, <orphans> orphans, check p99=<ms> ms``.

    python -m benchmarks.churn [--users 100] [--rounds 4] [--toggle 0.5] [--concurrency 25]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import random
import secrets
import statistics
import sys
import time

from benchmarks import _cluster
from nebari_colocate.spawner import ColocatingKubeSpawner, ColocationRefused

SERVERS = ("", "app1", "app2")
CHECK_SECONDS: list[float] = []


class TimedSpawner(ColocatingKubeSpawner):
    """ColocatingKubeSpawner that records how long each pre-spawn check took."""

    async def colocation_decide(self, pod, **kwargs):
        # the keywords pass through whatever they are: a keyword added to the spawner's
        # signature must not break the benchmark (it did once: admit_later)
        started = time.perf_counter()
        try:
            return await super().colocation_decide(pod, **kwargs)
        finally:
            CHECK_SECONDS.append(time.perf_counter() - started)


class Tally:
    def __init__(self) -> None:
        self.spawns = self.started = self.refused = 0
        self.errors: list[str] = []
        self.split = self.orphans = 0
        self.reasons: dict[str, int] = {}


async def spawn(spawner, tally: Tally, running: set) -> None:
    tally.spawns += 1
    try:
        await spawner.start()
    except ColocationRefused as exc:
        text = exc.jupyterhub_message or ""
        decision, verdict = exc.decision, exc.event_verdict
        code = (
            ",".join(decision.reasons)
            if decision is not None
            else f"event:{verdict.reason}"
            if verdict is not None
            else "?"
        )
        tally.reasons[code] = tally.reasons.get(code, 0) + 1
        if text and "Traceback" not in text:
            tally.refused += 1
        else:
            tally.errors.append(f"refusal without words: {exc!r}")
        with contextlib.suppress(Exception):
            await spawner.stop(now=True)
        return
    except Exception as exc:  # JupyterHub would show it: an error of this benchmark's count
        tally.errors.append(f"{spawner.user.name}/{spawner.name}: {type(exc).__name__}: {exc}")
        with contextlib.suppress(Exception):
            await spawner.stop(now=True)
        return
    tally.started += 1
    running.add(spawner)


async def stop(spawner, running: set) -> None:
    await spawner.stop(now=True)
    running.discard(spawner)


async def check_cluster(api, namespace: str, running: set, tally: Tally) -> None:
    from kubernetes_asyncio import client

    core = client.CoreV1Api(api)
    pods = [
        api.sanitize_for_serialization(p) for p in (await core.list_namespaced_pod(namespace)).items
    ]
    pvcs = [
        api.sanitize_for_serialization(p)
        for p in (await core.list_namespaced_persistent_volume_claim(namespace)).items
    ]
    split = _cluster.helpers.split_claims(pods, pvcs)
    tally.split += len(split)
    owned = {s.pod_name for s in running}
    stray = [p["metadata"]["name"] for p in pods if p["metadata"]["name"] not in owned]
    if stray:
        # A pod being deleted may linger a moment (grace period 0 here): look again.
        await asyncio.sleep(2)
        names = {p.metadata.name for p in (await core.list_namespaced_pod(namespace)).items}
        tally.orphans += len([n for n in stray if n in names])


async def run(args) -> int:
    logging.basicConfig(level=logging.ERROR)
    rng = random.Random(args.seed)
    tally = Tally()
    with _cluster.control_plane(kubelet_stub=True) as cp:
        api = await _cluster.admin_client(cp)
        from kubernetes_asyncio import client

        core = client.CoreV1Api(api)
        namespace = f"churn-{secrets.token_hex(3)}"
        await core.create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace))
        )
        for n in range(args.nodes):
            await _cluster.helpers.create_node(api, f"node-{n}", cpu="4", memory="32Gi", pods="110")
        users = [f"user{u:03d}" for u in range(args.users)]
        for user in users:
            await _cluster.helpers.create_bound_claim(api, namespace, f"claim-{user}")
        await _cluster.use_credentials(cp.kubeconfig)
        spawners = {
            (user, server): _cluster.make_spawner(
                TimedSpawner,
                namespace,
                user,
                server,
                cpu_guarantee=0.5,
                mem_guarantee="256M",
                unschedulable_grace_seconds=2.0,
                start_timeout=60,
            )
            for user in users
            for server in SERVERS
        }
        for spawner in spawners.values():
            spawner.event_poll_interval = 0.25
            spawner.log.setLevel(logging.ERROR)
        running: set = set()
        gate = asyncio.Semaphore(args.concurrency)

        async def gated(coro):
            async with gate:
                await coro

        began = time.monotonic()
        for round_number in range(1, args.rounds + 1):
            todo = [s for s in spawners.values() if rng.random() < args.toggle]
            rng.shuffle(todo)
            round_began = time.monotonic()
            before = (tally.spawns, tally.started, tally.refused, len(tally.errors))
            await asyncio.gather(
                *(
                    gated(stop(s, running) if s in running else spawn(s, tally, running))
                    for s in todo
                )
            )
            await check_cluster(api, namespace, running, tally)
            took = time.monotonic() - round_began
            print(
                f"round {round_number}: {len(todo)} toggled in {took:.1f} s; "
                f"spawns +{tally.spawns - before[0]} started +{tally.started - before[1]} "
                f"refused +{tally.refused - before[2]} errors +{len(tally.errors) - before[3]}; "
                f"{len(running)} running; split claims {tally.split}, orphans {tally.orphans}",
                flush=True,
            )
        await asyncio.gather(*(gated(stop(s, running)) for s in list(running)))
        await check_cluster(api, namespace, running, tally)
        await _cluster.stop_reflectors(namespace)
        await api.close()
    for error in tally.errors[:10]:
        print(f"ERROR {error}")
    print(f"refusal reasons: {dict(sorted(tally.reasons.items()))}")
    ordered = sorted(CHECK_SECONDS)
    p50 = statistics.median(ordered) * 1000 if ordered else 0.0
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000 if ordered else 0.0
    worst = ordered[-1] * 1000 if ordered else 0.0
    print(
        f"{len(ordered)} checks: p50={p50:.1f} ms p99={p99:.1f} ms max={worst:.1f} ms; "
        f"{time.monotonic() - began:.0f} s of churn on {_cluster.machine()}"
    )
    print(
        f"churn: {tally.spawns} spawns, {tally.started} started, {tally.refused} refused with a "
        f"reason, {len(tally.errors)} errors, {tally.split} split claims, {tally.orphans} orphans, "
        f"check p99={p99:.0f} ms"
    )
    return 1 if tally.errors or tally.split or tally.orphans else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=100)
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--toggle", type=float, default=0.5, help="chance a server is toggled")
    parser.add_argument("--concurrency", type=int, default=25, help="spawns and stops at once")
    parser.add_argument("--seed", type=int, default=1)
    return asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
