"""Shared helpers of the cluster benchmarks: a real control plane, admin clients, apiserver metrics,
and real KubeSpawner / ColocatingKubeSpawner objects built outside JupyterHub.

The control plane is the one the cluster tests use (``tests/kube``: etcd, kube-apiserver,
kube-scheduler, kube-controller-manager and kwok built from their upstream Go modules, loopback
only), from the test-support package ``tests.support``. Benchmarks run from the repository root
as ``python -m benchmarks.<name>``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import platform
import re
import ssl
import subprocess
import time
import urllib.request
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from tests.support import helpers, spawning
from tests.support.controlplane import CONTROLLERS, ControlPlane
from tests.support.spawning import stop_reflectors

ROOT = Path(__file__).resolve().parent.parent
TESTS_DIR = ROOT / "tests"

BUILD_SCRIPT = TESTS_DIR / "kube" / "build.sh"
FROZEN_STATE_CONTROLLERS = tuple(c for c in CONTROLLERS if c != "attachdetach")

#: zero-to-jupyterhub's default ``singleuser.startTimeout``: what stock KubeSpawner waits
Z2JH_START_TIMEOUT = 300
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
#: a GPU profile as z2jh profiles write it (limits only: requests stay empty)
GPU_PROFILE = {"tolerations": [GPU_TOLERATION], "extra_resource_limits": {"nvidia.com/gpu": "1"}}

__all__ = [
    "GPU_PROFILE",
    "GPU_TOLERATION",
    "Z2JH_START_TIMEOUT",
    "ControlPlane",
    "SpawnerRun",
    "admin",
    "admin_client",
    "apiserver_request_totals",
    "bin_dir",
    "control_plane",
    "diff_totals",
    "gone_after",
    "helpers",
    "karpenter_cluster",
    "machine",
    "make_spawner",
    "pod_node",
    "stop_reflectors",
    "use_credentials",
]


def bin_dir() -> Path:
    """tests/kube/bin, building it with tests/kube/build.sh when a binary is missing."""
    default = TESTS_DIR / "kube" / "bin"
    if all(os.access(default / b, os.X_OK) for b in ("etcd", "kube", "kwok")):
        return default
    result = subprocess.run(
        ["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, stdin=subprocess.DEVNULL
    )
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        raise SystemExit(f"{BUILD_SCRIPT} failed (exit {result.returncode}):\n{result.stderr}")
    return Path(lines[-1])


@contextlib.contextmanager
def control_plane(*, kubelet_stub: bool = False, keep_logs: bool = False) -> Iterator[ControlPlane]:
    """A started control plane, stopped on exit (also on Ctrl-C).

    ``kubelet_stub=True``: the whole cluster of the cluster tests (kwok runs the pods, the
    attach/detach controller attaches their volumes). False: a cluster state frozen as the
    benchmark writes it: no kwok (bound pods stay in the phase the benchmark sets) and no
    attach/detach controller (the only VolumeAttachments are the benchmark's own); the PV
    controller still binds the claims. (The name is the one of the former kubelet stub.)
    """
    controllers = CONTROLLERS if kubelet_stub else FROZEN_STATE_CONTROLLERS
    cp = ControlPlane(bin_dir(), kwok=kubelet_stub, controllers=controllers, keep_logs=keep_logs)
    cp.start()
    try:
        yield cp
    finally:
        cp.stop()


async def admin_client(cp: ControlPlane):
    """A kubernetes_asyncio ApiClient with the admin credentials (caller closes it)."""
    from kubernetes_asyncio import config

    return await config.new_client_from_config(config_file=cp.kubeconfig, persist_config=False)


@contextlib.asynccontextmanager
async def admin(cp: ControlPlane) -> AsyncIterator[Any]:
    """:func:`admin_client`, closed on exit."""
    client = await admin_client(cp)
    try:
        yield client
    finally:
        await client.close()


@contextlib.asynccontextmanager
async def karpenter_cluster() -> AsyncIterator[ControlPlane]:
    """The whole cluster of the cluster tests (:func:`control_plane` with kwok) plus Karpenter
    with its kwok cloud provider (``tests.support.autoscaler``), both stopped on exit; spawners
    made inside use its credentials."""
    from tests.support.autoscaler import Autoscaler

    with control_plane(kubelet_stub=True) as cp:
        karpenter = Autoscaler(bin_dir(), cp).start()
        try:
            await use_credentials(cp.kubeconfig)
            yield cp
        finally:
            karpenter.stop()


async def pod_node(cp: ControlPlane, namespace: str, pod_name: str) -> str:
    """The node pod ``namespace/pod_name`` is bound to."""
    from kubernetes_asyncio import client

    async with admin(cp) as api:
        pod = await client.CoreV1Api(api).read_namespaced_pod(pod_name, namespace)
        return str(pod.spec.node_name)


async def gone_after(
    cp: ControlPlane, nodes: Mapping[str, str], since: float, window: float
) -> dict[str, float]:
    """For each key of ``nodes`` (key -> the name of a node of Karpenter's ``gpu`` pool), the
    seconds after ``since`` (``time.perf_counter()``) at which the node was gone; ``window``
    for a node still there when the window ends."""
    from tests.support.autoscaler import karpenter_nodes

    alive = dict.fromkeys(nodes, window)
    async with admin(cp) as api:
        while time.perf_counter() - since < window:
            names = {n["metadata"]["name"] for n in await karpenter_nodes(api, "gpu")}
            for which, node in nodes.items():
                if node not in names and alive[which] == window:
                    alive[which] = time.perf_counter() - since
            if all(v < window for v in alive.values()):
                break
            await asyncio.sleep(0.5)
    return alive


class SpawnerRun:
    """The spawners and namespaces a benchmark run made, stopped and forgotten by :meth:`close`."""

    def __init__(self, cp: ControlPlane) -> None:
        self.cp = cp
        self.spawners: list[Any] = []
        self.namespaces: list[str] = []

    def keep(self, spawner: Any) -> Any:
        """``spawner``, stopped at :meth:`close`."""
        self.spawners.append(spawner)
        return spawner

    async def namespace(
        self, name: str, access_modes: Iterable[str] = ("ReadWriteOnce",), *, clear: bool = False
    ) -> str:
        """A new namespace ``name`` with alice's home ``claim-alice``, bound; with ``clear``,
        first an empty cluster (Karpenter removes every node)."""
        from kubernetes_asyncio import client

        from tests.support.autoscaler import clear_nodes

        async with admin(self.cp) as api:
            if clear:
                await clear_nodes(api, timeout=180)
            await client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})
            await helpers.create_bound_claim(api, name, "claim-alice", tuple(access_modes))
        self.namespaces.append(name)
        return name

    async def close(self) -> None:
        for spawner in self.spawners:
            with contextlib.suppress(Exception):
                await spawner.stop(now=True)
        for namespace in self.namespaces:
            await stop_reflectors(namespace)


# --------------------------------------------------------------------------------------------------
# kube-apiserver's own request counter

_SAMPLE = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def apiserver_request_totals(cp: ControlPlane) -> dict[tuple[str, str, str, str], float]:
    """``apiserver_request_total`` from GET /metrics (admin client cert), summed by
    (verb, resource, subresource, user agent-free scope) -> count.

    The key is ``(verb, resource, subresource, scope)``; codes and other labels are summed.
    """
    ctx = ssl.create_default_context(cafile=cp.ca_file)
    ctx.load_cert_chain(cp.dir / "admin.crt", cp.dir / "admin.key")
    with urllib.request.urlopen(f"{cp.server}/metrics", timeout=10, context=ctx) as response:
        text = response.read().decode("utf-8", "replace")
    totals: dict[tuple[str, str, str, str], float] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if not match:
            continue
        labels = dict(_LABEL.findall(match["labels"]))
        key = (
            labels.get("verb", ""),
            labels.get("resource", ""),
            labels.get("subresource", ""),
            labels.get("scope", ""),
        )
        totals[key] = totals.get(key, 0.0) + float(match["value"])
    return totals


def diff_totals(after: dict, before: dict) -> dict:
    """Per-key increase between two ``apiserver_request_totals`` readings (zeros dropped)."""
    out = {}
    for key, value in after.items():
        delta = value - before.get(key, 0.0)
        if delta:
            out[key] = delta
    return out


# --------------------------------------------------------------------------------------------------
# the machine a figure came from


def machine() -> str:
    """``2 x AMD EPYC ..., 23 GiB, Linux 6.x, Python 3.x`` for the figures' provenance."""
    model = platform.processor() or "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    memory = ""
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory = f", {int(line.split()[1]) / 2**20:.0f} GiB"
                break
    return (
        f"{os.cpu_count()} x {model}{memory}, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}"
    )


# --------------------------------------------------------------------------------------------------
# spawners outside JupyterHub (as tests/cluster/conftest.py builds them)


async def use_credentials(kubeconfig: str) -> None:
    """Make spawners created from now on use ``kubeconfig`` (KubeSpawner loads the default
    kubeconfig once per process and shares one API client per event loop)."""
    from kubernetes_asyncio import config
    from kubernetes_asyncio.config import kube_config

    kube_config.KUBE_CONFIG_DEFAULT_LOCATION = kubeconfig
    await config.load_kube_config(config_file=kubeconfig)


def make_spawner(cls, namespace: str, username: str, server: str = "", **traits):
    """A KubeSpawner (or subclass) for ``username``'s server ``server`` in ``namespace``."""
    return spawning.make_spawner(
        cls, namespace, username, server, api_token="benchmark-token", **traits
    )
