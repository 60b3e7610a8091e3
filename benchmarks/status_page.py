"""The operator's page at scale: its render time with 10,000 pods in the hub's watches, and no
Kubernetes API request.

It fills one hub's watches (``nebari_colocate.informer.HubWatches``, the real collections and
indexes, on an API client that is never asked anything) with a cluster of ``--pods`` pods on
``--nodes`` nodes: users with a ReadWriteOnce home each, three servers each on one node, some
users on shared (ReadWriteMany) storage, some pods of other namespaces, one GPU node in ten with
servers riding on it; and the history (``nebari_colocate.history``) at capacity: every ring full
of refusals of the last 24 hours and ways out.  Then, ``--renders`` times each:

- ``json``: the page's JSON as the handler answers ``?format=json`` (gather from the watches on
  the event loop, build and ``json.dumps`` in a thread);
- ``html``: the page as a person gets it (gather, build and render the content in a thread,
  then ``colocate_status.html``, JupyterHub's own ``page.html`` with the navbar's link around
  it, as JupyterHub's Jinja environment does, on the loop);
- ``on-loop``: the page view's own work on the event loop (gathering from the watches, and the
  hub's page around the content), which the hub's other requests wait for; ``loop-lag``: the
  longest a task sleeping 5 ms woke late meanwhile (that work, the thread's turns at the GIL,
  and on a loaded machine the operating system's).

Every request any kubernetes_asyncio client of the process sends is counted around the renders
(must be 0: exit 1 otherwise).  Also printed: the history's memory at capacity (tracemalloc).

    python -m benchmarks.status_page [--pods 10000] [--nodes 1000] [--renders 30] [--seed 1]

Last line: ``status-page: json p50=… p99=… ms html p50=… p99=… ms (pods=… nodes=… pinned=…
refusals=…) on-loop p99=… ms loop-lag=… ms api-requests=0``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import statistics
import sys
import time
import tracemalloc
from pathlib import Path
from types import SimpleNamespace

from nebari_colocate import history
from nebari_colocate.helm import HUB_TEMPLATES
from nebari_colocate.history import MOVE_OFF_PREMIUM, WAY_OUT, record_refusal, record_way_out
from nebari_colocate.informer import Collection, HubWatches, collector_paused
from nebari_colocate.status import build
from nebari_colocate.status_page import BODY, NAV_LINK, PAGE, gather, render_body
from tests.support import builders

NAMESPACE = "jhub"
REASONS = ("insufficient:cpu", "insufficient:nvidia.com/gpu", "node-selector", "premium-node")


def cluster(pods: int, nodes: int, rng: random.Random) -> tuple[list, list, list, list]:
    """(nodes, pods, claims, volumes) of a hub's cluster."""
    node_objs = [
        builders.gpu_node(f"node-{i}", allocatable={"cpu": "32", "memory": "128Gi", "pods": "110"})
        if i % 10 == 0
        else builders.node(f"node-{i}", allocatable={"cpu": "32", "memory": "128Gi"})
        for i in range(nodes)
    ]
    pod_objs: list[dict] = []
    claims: list[dict] = []
    volumes: list[dict] = []
    user = 0
    while len(pod_objs) < pods:
        name = f"user-{user}"
        home = f"claim-{name}"
        shared = user % 5 == 0  # one user in five on ReadWriteMany storage
        claims.append(
            builders.pvc(
                home,
                namespace=NAMESPACE,
                modes=("ReadWriteMany",) if shared else ("ReadWriteOnce",),
            )
        )
        volumes.append(builders.pv(f"pv-{home}", claim=f"{NAMESPACE}/{home}"))
        node = f"node-{rng.randrange(nodes)}"
        for server in ("", "app-1", "app-2"):
            pod = builders.running(
                f"jupyter-{name}-{server or 'lab'}",
                node,
                namespace=NAMESPACE,
                user=name,
                server=server,
                claims=[home],
                requests={"cpu": "500m", "memory": "1Gi"},
            )
            pod_objs.append(pod)
        if user % 7 == 0:  # pods of other namespaces on the same nodes
            pod_objs.append(
                builders.running(
                    f"agent-{user}", node, namespace="kube-system", requests={"cpu": "100m"}
                )
            )
        user += 1
    return node_objs, pod_objs[:pods], claims, volumes


def fill(collection: Collection, objects: list[dict]) -> None:
    """A collection as a LIST leaves it: the objects, live, just heard from."""
    collection._replace_all(objects)
    collection._set_live(True)
    collection.last_seen = time.monotonic()


def fill_history(now: float, rng: random.Random, users: int) -> float:
    """Every ring full (refusals of the last 24 hours, ways out); the MiB they hold."""
    history.the_history().clear()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    words = (
        "Your server 'GPU Lab' cannot start: your volume can be attached to one node at a time "
        "and is in use by 'Pandas App' on node node-12, which has no GPU. Stop 'Pandas App' first."
    )
    for i in range(history.REFUSALS_KEPT):
        record_refusal(
            f"user-{rng.randrange(users)}",
            "gpu-lab",
            reasons=[rng.choice(REASONS)],
            message=f"{words} ({i})",
            node=f"node-{i % 100}",
            way_out=True,
            at=now - rng.uniform(0, 23 * 3600),
        )
    for i in range(history.WAYS_OUT_KEPT):
        kind = WAY_OUT if i % 2 else MOVE_OFF_PREMIUM
        record_way_out(
            f"user-{i}", kind, "started", server="gpu-lab", servers=["app-1"], at=now - i
        )
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    size = sum(s.size_diff for s in after.compare_to(before, "filename"))
    return size / 2**20


def environment():
    """JupyterHub's Jinja environment (jupyterhub/app.py) with what install() adds."""
    from jinja2 import ChoiceLoader, Environment, FileSystemLoader, PrefixLoader
    from jupyterhub._data import DATA_FILES_PATH

    default = str(Path(DATA_FILES_PATH) / "templates")
    loader = ChoiceLoader(
        [
            PrefixLoader({"templates": FileSystemLoader([default])}, "/"),
            FileSystemLoader([str(HUB_TEMPLATES), default]),
        ]
    )
    return Environment(loader=loader, autoescape=True, extensions=[NAV_LINK])


def namespace_of_page() -> dict:
    """What JupyterHub's template namespace gives a page (an admin's)."""
    return {
        "static_url": lambda *a, **k: "/hub/static/x",
        "base_url": "/hub/",
        "prefix": "/",
        "user": SimpleNamespace(name="root", admin=True, spawner=SimpleNamespace(options_form="")),
        "no_spawner_check": True,
        "xsrf": "t",
        "parsed_scopes": {"admin-ui": True},
        "version_hash": "",
        "services": [],
    }


@contextlib.contextmanager
def counted_requests():
    from kubernetes_asyncio.client import rest

    seen: list[str] = []
    original = rest.RESTClientObject.request

    async def request(self, method, url, *args, **kwargs):
        seen.append(f"{method} {url}")
        return await original(self, method, url, *args, **kwargs)

    rest.RESTClientObject.request = request
    try:
        yield seen
    finally:
        rest.RESTClientObject.request = original


class LoopLag:
    """The longest the event loop was blocked: a task that sleeps 5 ms notes how late it
    wakes (what other requests to the hub wait meanwhile)."""

    def __init__(self) -> None:
        self.worst = 0.0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while True:
            before = time.perf_counter()
            await asyncio.sleep(0.005)
            self.worst = max(self.worst, (time.perf_counter() - before - 0.005) * 1000)

    async def stop(self) -> float:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        return self.worst


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def main(args: argparse.Namespace) -> int:
    from kubernetes_asyncio.client import ApiClient, Configuration

    rng = random.Random(args.seed)
    nodes, pods, claims, volumes = cluster(args.pods, args.nodes, rng)
    configuration = Configuration()
    configuration.host = "http://127.0.0.1:9"  # never asked: the count below says so
    api_client = ApiClient(configuration)
    hub = HubWatches(api_client)
    hub.namespace(NAMESPACE)
    started = time.perf_counter()
    fill(hub.all_pods, pods)
    fill(hub.all_pvcs, claims)
    fill(hub.nodes, nodes)
    fill(hub.pvs, volumes)
    fill(hub.attachments, [])
    fill(hub.namespaces[NAMESPACE].leases, [])
    print(f"watches filled in {time.perf_counter() - started:.2f} s: {len(pods)} pods")
    now = time.time()
    users = len(claims)
    history_mib = fill_history(now, rng, users)
    print(
        f"history at capacity: {history.REFUSALS_KEPT} refusals, {history.WAYS_OUT_KEPT} ways "
        f"out: {history_mib:.1f} MiB"
    )
    env = environment()
    template, body_template = env.get_template(PAGE), env.get_template(BODY)
    page_ns = namespace_of_page()
    json_ms: list[float] = []
    html_ms: list[float] = []
    loop_ms: list[float] = []  # the page view's own work on the event loop
    size = {"json": 0, "html": 0}
    lag = LoopLag()
    with counted_requests() as seen:
        lag.start()
        for _ in range(args.renders):
            # as the handler does it: gather on the loop, build and dump (or render the content)
            # in a thread without the garbage collector, the hub's page around it on the loop
            t0 = time.perf_counter()
            with collector_paused():
                found = await asyncio.to_thread(build, gather([hub], now=time.time()))
                text = await asyncio.to_thread(json.dumps, found, indent=1)
            t1 = time.perf_counter()
            with collector_paused():
                facts = gather([hub], now=time.time())
                on_loop = time.perf_counter() - t1
                body = await render_body(body_template, await asyncio.to_thread(build, facts))
            t_page = time.perf_counter()
            html = template.render(**page_ns, colocate_status_body=body)
            t2 = time.perf_counter()
            json_ms.append((t1 - t0) * 1000)
            html_ms.append((t2 - t1) * 1000)
            loop_ms.append((on_loop + t2 - t_page) * 1000)
            size = {"json": len(text), "html": len(html)}
        blocked = await lag.stop()
    found = build(gather([hub], now=time.time()))
    await api_client.close()
    pinned, refusals = len(found["pinned"]), len(found["refusals"]["items"])
    print(
        f"page: {pinned} pinned claims, {len(found['nodes'])} nodes' headroom, {refusals} "
        f"refusals, {len(found['premium_rides'])} premium rides; json {size['json'] / 2**20:.1f}"
        f" MiB, html {size['html'] / 2**20:.1f} MiB"
    )
    print(
        f"status-page: json p50={statistics.median(json_ms):.0f} "
        f"p99={percentile(json_ms, 0.99):.0f} ms html p50={statistics.median(html_ms):.0f} "
        f"p99={percentile(html_ms, 0.99):.0f} ms (pods={len(pods)} nodes={len(nodes)} "
        f"pinned={pinned} refusals={refusals}) on-loop p99={percentile(loop_ms, 0.99):.0f} ms "
        f"loop-lag={blocked:.0f} ms "
        f"api-requests={len(seen)}"
    )
    return 0 if not seen else 1


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--nodes", type=int, default=1_000)
    parser.add_argument("--renders", type=int, default=30)
    parser.add_argument("--seed", type=int, default=1)
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse(sys.argv[1:]))))
