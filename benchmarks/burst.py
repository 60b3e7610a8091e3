"""Burst: a class at nine o'clock, every user starting at once, stock KubeSpawner against ours.

``--users`` users (100 by default), each with a ReadWriteOnce home claim bound beforehand, on
kwok nodes with room for all of them (``--nodes``, 4 CPU each; every server asks for 0.1 CPU).
Round 1: every user starts the default server at once (real spawner objects, ``asyncio.gather``,
as JupyterHub runs concurrent spawns, whose ``concurrent_spawn_limit`` is 100 by default).
Round 2: while the default servers run, every user starts an app (a named server) at once.

Measured side by side in one run, on one real control plane (tests/kube: etcd, kube-apiserver,
kube-scheduler, kube-controller-manager, kwok and the volume gate; loopback only), each class in
its own namespace and its own event loop (KubeSpawner keeps one API client per loop), one after
the other on an emptied cluster:

- stock: KubeSpawner with the hard pod affinity deployments put on every user pod for an RWO home
  today (required podAffinity on the user's label, as data-science-pack and Nebari write it);
- ours: ColocatingKubeSpawner.

Each class first starts and stops one server of another user (a hub that has been up before the
class: KubeSpawner's reflectors and the live view are running when the burst begins).

Per class and round: seconds from the spawn request to the server running (``start()``
returned), p50 and p99 (nearest rank); for ours the colocation check's own duration
(``colocation_timings``: state, decision and dry run) p99, and where it spent its time
(``--spans``); the event loop's longest stall; split claims (an RWO claim's pods bound to two
nodes, after each round) and errors (any exception of a start, a pod not running).

Last line: ``burst: users=100 stock p50=… s p99=… s ours p50=… s p99=… s ratio-p99=…; check
p99=… ms; splits=0 errors=0`` (p50 and p99 over both rounds).

With ``--steps``, per class and round, the p50 of when each spawn sent its PVC request and its pod
create, and when its pod was first seen scheduled and running in the reflector (a task looking
every 20 ms), against when ``start()`` returned.

    python -m benchmarks.burst [--users 100] [--nodes 10] [--spans] [--steps] [--share-pod-watch]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import math
import secrets
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

from benchmarks import _cluster
from nebari_colocate.config import DEFAULT_SHARE_POD_WATCH
from tests.support.spawning import legacy_affinity

STOCK, OURS = "stock", "ours"
SHARE = DEFAULT_SHARE_POD_WATCH
#: both classes: KubeSpawner's own API timeouts (3 s a request, 30 s of retries; the tests' base
#: configuration shortens the retries to 15 s), and room to start on a busy machine
TRAITS = {"k8s_api_request_timeout": 3, "k8s_api_request_retry_timeout": 30, "start_timeout": 120}
#: ours only (``--no-share-pod-watch`` sets colocation_share_pod_watch = False)
OURS_TRAITS: dict = {}
ROUNDS = ((1, ""), (2, "app"))


def percentile(samples: Iterable[float], q: float) -> float:
    """The nearest-rank ``q`` quantile (0 < q <= 1) of ``samples``; NaN when there are none."""
    ordered = sorted(samples)
    if not ordered:
        return math.nan
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().strip()


# --------------------------------------------------------------------------------------------------
# what one class's burst records


class Record:
    """One class's figures: start seconds per round, check seconds and spans, errors, splits."""

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.start_seconds: dict[int, list[float]] = {n: [] for n, _ in ROUNDS}
        self.check_seconds: dict[int, list[float]] = {n: [] for n, _ in ROUNDS}
        self.dry_run_seconds: dict[int, list[float]] = {n: [] for n, _ in ROUNDS}
        #: the round trips of the dry runs made (awaited or not; none when another's was reused)
        self.round_trip_seconds: dict[int, list[float]] = {n: [] for n, _ in ROUNDS}
        self.spans: dict[int, dict[str, list[float]]] = {n: {} for n, _ in ROUNDS}
        self.loop_stall: dict[int, float] = {}
        self.wall: dict[int, float] = {}
        self.errors: list[str] = []
        self.splits = 0
        #: ``--steps``: per round, step -> the seconds after each spawn began that it was reached
        self.steps: dict[int, dict[str, list[float]]] = {n: {} for n, _ in ROUNDS}

    def span(self, round_number: int, name: str, seconds: float) -> None:
        self.spans[round_number].setdefault(name, []).append(seconds)


#: the round the spans are recorded for (one class runs at a time, in its own loop)
CURRENT: dict[str, Any] = {"record": None, "round": 0}


def _timed(name: str, method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return await method(*args, **kwargs)
        finally:
            record = CURRENT["record"]
            if record is not None:
                record.span(CURRENT["round"], name, time.perf_counter() - began)

    return wrapper


def instrument_spans() -> None:
    """Time the awaits of the check (the benchmark's own wrappers; nothing of the library
    changes): the per-user lock, the confirming LISTs of an unpinned decision, the direct
    reads, the dry run."""
    from nebari_colocate.check import SpawnCheck
    from nebari_colocate.spawner import ColocatingKubeSpawner
    from nebari_colocate.view import ClusterView

    for cls, name, span in (
        (ColocatingKubeSpawner, "_acquire_colocation_lock", "lock"),
        (SpawnCheck, "state", "state-await"),
        (SpawnCheck, "confirmed_unpinned", "confirm-unpinned"),
        (SpawnCheck, "admitted", "dry-run"),
        (ClusterView, "_add_node_pods", "node-pods-list"),
        (ClusterView, "_confirm_node", "node-read"),
    ):
        setattr(cls, name, _timed(span, getattr(cls, name)))


#: ``--steps``, in the order a spawn reaches them
STEPS = (
    "PVC request sent",
    "pod create sent",
    "pod seen scheduled",
    "pod seen running",
    "start() returned",
)
#: spawner -> when its start began, and the requests it sent (``--steps``)
BEGAN: dict[int, float] = {}
SENT: dict[int, set[str]] = {}


def step(spawner: Any, name: str) -> None:
    record, began = CURRENT["record"], BEGAN.get(id(spawner))
    if record is not None and began is not None:
        seconds = time.perf_counter() - began
        record.steps[CURRENT["round"]].setdefault(name, []).append(seconds)


def instrument_steps() -> None:
    """Note when each spawn sends its PVC request and its pod create (KubeSpawner's own
    request methods, which ours calls too; the benchmark's wrappers, the library unchanged)."""
    from kubespawner import KubeSpawner

    for method, name in (
        ("_make_create_pvc_request", "PVC request sent"),
        ("_make_create_pod_request", "pod create sent"),
    ):
        original = getattr(KubeSpawner, method)

        def wrapper(self: Any, *args: Any, _o: Any = original, _n: str = name) -> Any:
            sent = SENT.setdefault(id(self), set())
            if _n not in sent:  # the first request (a retry is not a step)
                sent.add(_n)
                step(self, _n)
            return _o(self, *args)

        setattr(KubeSpawner, method, wrapper)


async def look_at_pod(spawner: Any) -> None:
    """``--steps``: when the pod is first seen scheduled and running in the spawner's pod
    reflector (looked at every 20 ms)."""
    scheduled = False
    while True:
        await asyncio.sleep(0.02)
        reflector = spawner.pod_reflector
        pod = reflector.pods.get(f"{spawner.namespace}/{spawner.pod_name}") if reflector else None
        if pod is None:
            continue
        if not scheduled and (pod.get("spec") or {}).get("nodeName"):
            scheduled = True
            step(spawner, "pod seen scheduled")
        if spawner.is_pod_running(pod):
            step(spawner, "pod seen running")
            return


async def watch_loop(stalls: list[float], stop: asyncio.Event, tick: float = 0.005) -> None:
    """How late the loop wakes a 5 ms sleep: its stalls (JSON parsing, a relist, a busy core)."""
    while not stop.is_set():
        began = time.perf_counter()
        await asyncio.sleep(tick)
        stalls.append(time.perf_counter() - began - tick)


# --------------------------------------------------------------------------------------------------
# one class


def spawner_for(tag: str, namespace: str, user: str, server: str):
    from kubespawner import KubeSpawner

    from nebari_colocate import ColocatingKubeSpawner

    if tag == STOCK:
        spawner = _cluster.make_spawner(
            KubeSpawner, namespace, user, server, **TRAITS, **legacy_affinity(user)
        )
    else:
        spawner = _cluster.make_spawner(
            ColocatingKubeSpawner, namespace, user, server, **TRAITS, **OURS_TRAITS
        )
    spawner.log.setLevel(logging.ERROR)
    return spawner


async def timed_start(spawner, record: Record, round_number: int, steps: bool = False) -> None:
    began = BEGAN[id(spawner)] = time.perf_counter()
    looking = asyncio.ensure_future(look_at_pod(spawner)) if steps else None
    try:
        await spawner.start()
    except Exception as exc:  # JupyterHub would show it: an error of this benchmark's count
        record.errors.append(f"{spawner.user.name}/{spawner.name}: {type(exc).__name__}: {exc}")
        return
    finally:
        if looking is not None:
            looking.cancel()
    if steps:
        step(spawner, "start() returned")
    record.start_seconds[round_number].append(time.perf_counter() - began)
    timings = getattr(spawner, "colocation_timings", None)
    if timings:
        record.check_seconds[round_number].append(timings["check"] + timings["dry_run"])
        record.dry_run_seconds[round_number].append(timings["dry_run"])
        if timings.get("dry_runs_made"):
            record.round_trip_seconds[round_number].append(timings["dry_run_round_trip"])


async def check_cluster(api, namespace: str, expected: int, record: Record) -> None:
    from kubernetes_asyncio import client

    core = client.CoreV1Api(api)
    pods = [
        api.sanitize_for_serialization(p) for p in (await core.list_namespaced_pod(namespace)).items
    ]
    pvcs = [
        api.sanitize_for_serialization(p)
        for p in (await core.list_namespaced_persistent_volume_claim(namespace)).items
    ]
    record.splits += len(_cluster.helpers.split_claims(pods, pvcs))
    running = [p for p in pods if _cluster.helpers.is_running(p)]
    if len(running) != expected:
        record.errors.append(f"{len(running)} pods running in {namespace}, {expected} expected")


async def burst(cp, tag: str, users: list[str], record: Record, steps: bool = False) -> None:
    """The two rounds of one class, in this event loop."""
    await _cluster.use_credentials(cp.kubeconfig)
    api = await _cluster.admin_client(cp)
    from kubernetes_asyncio import client

    namespace = f"burst-{tag}-{secrets.token_hex(3)}"
    await client.CoreV1Api(api).create_namespace({"metadata": {"name": namespace}})
    for user in [*users, "teacher"]:
        await _cluster.helpers.create_bound_claim(api, namespace, f"claim-{user}")
    warm = spawner_for(tag, namespace, "teacher", "")
    await warm.start()
    await warm.stop(now=True)
    await asyncio.sleep(5)  # the hub idles before the class: its watches go quiet
    running = []
    for round_number, server in ROUNDS:
        spawners = [spawner_for(tag, namespace, user, server) for user in users]
        stalls: list[float] = []
        stop = asyncio.Event()
        watcher = asyncio.ensure_future(watch_loop(stalls, stop))
        CURRENT.update(record=record, round=round_number)
        began = time.perf_counter()
        await asyncio.gather(*(timed_start(s, record, round_number, steps) for s in spawners))
        record.wall[round_number] = time.perf_counter() - began
        stop.set()
        await watcher
        record.loop_stall[round_number] = max(stalls, default=0.0)
        running += spawners
        await check_cluster(api, namespace, len(running), record)
    CURRENT.update(record=None)
    await asyncio.gather(*(s.stop(now=True) for s in running), return_exceptions=True)
    await _cluster.stop_reflectors(namespace)
    with contextlib.suppress(Exception):
        await _cluster.helpers.delete_namespace(api, namespace)
    await api.close()
    await asyncio.sleep(0.1)  # let the per-loop API clients close before the loop does


async def create_nodes(cp, count: int) -> None:
    api = await _cluster.admin_client(cp)
    try:
        for n in range(count):
            await _cluster.helpers.create_node(api, f"node-{n}", cpu="4", memory="32Gi")
    finally:
        await api.close()


# --------------------------------------------------------------------------------------------------
# the report


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f}"


def report(records: dict[str, Record], spans: bool) -> None:
    for tag, record in records.items():
        for round_number, _ in ROUNDS:
            starts = record.start_seconds[round_number]
            line = (
                f"[{tag}] round {round_number}: {len(starts)} started in "
                f"{record.wall.get(round_number, 0):.1f} s; start p50="
                f"{percentile(starts, 0.5):.2f} s p99={percentile(starts, 0.99):.2f} s "
                f"max={max(starts, default=math.nan):.2f} s; loop stall max="
                f"{_ms(record.loop_stall.get(round_number, 0))} ms"
            )
            checks = record.check_seconds[round_number]
            if checks:
                dry = record.dry_run_seconds[round_number]
                trips = record.round_trip_seconds[round_number]
                line += (
                    f"; check p50={_ms(statistics.median(checks))} ms "
                    f"p99={_ms(percentile(checks, 0.99))} ms (waiting in get_pod_manifest p99="
                    f"{_ms(percentile(dry, 0.99))} ms; dry runs {len(trips)} of {len(checks)}, "
                    f"round trip p99={_ms(percentile(trips, 0.99))} ms)"
                )
            print(line)
            if spans:
                for name, values in sorted(record.spans[round_number].items()):
                    print(
                        f"    span {name}: n={len(values)} p50={_ms(statistics.median(values))} "
                        f"ms p99={_ms(percentile(values, 0.99))} ms max={_ms(max(values))} ms"
                    )
        for error in record.errors[:5]:
            print(f"  ERROR [{tag}] {error}")


def report_steps(records: dict[str, Record]) -> None:
    """``--steps``: p50 seconds after the spawn began at which each step was reached."""
    for tag, record in records.items():
        for round_number, _ in ROUNDS:
            reached = record.steps[round_number]
            cells = [
                f"{name} {statistics.median(reached[name]):.2f} s"
                for name in STEPS
                if reached.get(name)
            ]
            print(f"[{tag}] round {round_number} steps (p50): " + "; ".join(cells))


def summary(users: int, records: dict[str, Record]) -> str:
    def both(record: Record, field: str) -> list[float]:
        return [s for n, _ in ROUNDS for s in getattr(record, field)[n]]

    stock, ours = both(records[STOCK], "start_seconds"), both(records[OURS], "start_seconds")
    if not stock or not ours:
        return f"burst: users={users} (one class only: no comparison)"
    checks = both(records[OURS], "check_seconds")
    s99, o99 = percentile(stock, 0.99), percentile(ours, 0.99)
    splits = sum(r.splits for r in records.values())
    errors = sum(len(r.errors) for r in records.values())
    return (
        f"burst: users={users} stock p50={percentile(stock, 0.5):.2f} s p99={s99:.2f} s "
        f"ours p50={percentile(ours, 0.5):.2f} s p99={o99:.2f} s ratio-p99={o99 / s99:.2f}; "
        f"check p99={percentile(checks, 0.99) * 1000:.0f} ms; splits={splits} errors={errors}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=100)
    parser.add_argument("--nodes", type=int, default=None, help="default: users / 10, at least 2")
    parser.add_argument(
        "--order", default=f"{STOCK},{OURS}", help="which class bursts first (stock,ours)"
    )
    parser.add_argument("--spans", action="store_true", help="where the check's awaits wait")
    parser.add_argument(
        "--steps",
        action="store_true",
        help="when each spawn sent its PVC request and its create, and its pod ran (p50)",
    )
    parser.add_argument(
        "--share-pod-watch",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="ours with colocation_share_pod_watch on or off (default: the library's, on)",
    )
    args = parser.parse_args(argv)
    if args.share_pod_watch is not None:
        OURS_TRAITS["colocation_share_pod_watch"] = args.share_pod_watch
    order = args.order.split(",")
    if not order or not set(order) <= {STOCK, OURS} or len(set(order)) != len(order):
        parser.error("--order: stock,ours or ours,stock (or one of them alone, to look closer)")
    logging.basicConfig(level=logging.ERROR)
    print(f"loadavg at start: {loadavg()}", flush=True)
    if args.spans:
        instrument_spans()
    if args.steps:
        instrument_steps()
    users = [f"user{u:03d}" for u in range(args.users)]
    records = {STOCK: Record(STOCK), OURS: Record(OURS)}
    with _cluster.control_plane(kubelet_stub=True) as cp:
        asyncio.run(create_nodes(cp, args.nodes or max(2, args.users // 10)))
        for tag in order:
            asyncio.run(burst(cp, tag, users, records[tag], args.steps))
            print(f"[{tag}] done; loadavg {loadavg()}", flush=True)
    print(f"machine: {_cluster.machine()}")
    print(f"colocation_share_pod_watch: {OURS_TRAITS.get('colocation_share_pod_watch', SHARE)}")
    report({tag: records[tag] for tag in order}, args.spans)
    if args.steps:
        report_steps({tag: records[tag] for tag in order})
    print(f"loadavg at end: {loadavg()}")
    print(summary(args.users, records))
    return 1 if any(r.errors or r.splits for r in records.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
