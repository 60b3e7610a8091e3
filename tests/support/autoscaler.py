"""Karpenter, the real node autoscaler, running out of cluster against a test ControlPlane.

Plain Python, no pytest: the ``autoscaler`` fixture in ``tests/conftest.py`` and the benchmarks
both use it.

    cp = ControlPlane(bin_dir).start()
    karpenter = Autoscaler(bin_dir, cp).start()   # CRDs, node class, NodePools, then Karpenter
    ... pods go Pending, Karpenter adds nodes, consolidates empty or underutilized ones ...
    karpenter.stop()

The binary is Karpenter's kwok cloud provider (``sigs.k8s.io/karpenter/kwok``, built by
``tests/kube/build.sh``): it "launches" a machine by creating the Node object itself, so the kwok
controller of the control plane must then keep that Node Ready (it manages Nodes annotated
``kwok.x-k8s.io/node: fake``, which Karpenter's kwok provider sets).

What the fixture sets up, and why:

- the CRDs of the same module version (``bin/karpenter-crds``, copied by build.sh): NodePool,
  NodeClaim, NodeOverlay, CapacityBuffer and KWOKNodeClass. Karpenter v1.15 has no webhooks;
  validation is CEL in the CRDs;
- one ``KWOKNodeClass`` and two NodePools: ``cpu`` (instance family ``cpu``, weight 10: tried
  first) and ``gpu`` (family ``gpu``, tainted ``nvidia.com/gpu=true:NoSchedule`` as GPU node
  pools usually are), with the
  instance types of ``karpenter/instance-types.json`` (prices make the smallest fitting type win);
- consolidation ``WhenEmptyOrUnderutilized`` after 0 s, so a test sees it within about 30 s
  (Karpenter polls every 10 s and re-validates a decision 15 s later before acting);
- batching of pending pods cut to 1 s (``BATCH_MAX_DURATION``) instead of 10 s;
- leader election off; every option through its environment variable (Karpenter parses its own
  flag set and knows no ``--kubeconfig`` flag: controller-runtime reads ``KUBECONFIG``).

Karpenter binds its metrics and health ports on all interfaces and has no option to restrict
them: the ports are picked free on 127.0.0.1 and nothing here ever connects to anything but
127.0.0.1.

Facts a test must not assume away: the Node is named ``kwok-<nodeclaim>-<random>-<n>``, yet its
``kubernetes.io/hostname`` label is the NodeClaim's name, so the two differ; a new Node carries
``karpenter.sh/unregistered:NoExecute`` until Karpenter registers it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml

from .controlplane import HOST, KUBE_DIR, ControlPlane, _Component, free_port
from .helpers import CONTROLLER_MANAGED_ATTACH
from .waiting import wait_until

INSTANCE_TYPES = KUBE_DIR / "karpenter" / "instance-types.json"
KARPENTER_GROUP = "karpenter.sh"
KWOK_GROUP = "karpenter.kwok.sh"
NODEPOOL_LABEL = "karpenter.sh/nodepool"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"


def nodepool(
    name: str,
    family: str,
    *,
    taints: list[dict] | tuple = (),
    limits: dict | None = None,
    consolidate_after: str = "0s",
    weight: int | None = None,
) -> dict:
    """A NodePool of the kwok provider's instance family ``family``."""
    spec: dict = {
        "template": {
            "metadata": {
                "labels": {"colocate.test/pool": name},
                # The kwok provider copies NodeClaim annotations onto the Node it creates. A
                # kubelet sets this one at registration; without it the attach/detach controller
                # leaves the Node's volumes alone and no pod with a volume starts there.
                "annotations": {CONTROLLER_MANAGED_ATTACH: "true"},
            },
            "spec": {
                "nodeClassRef": {"group": KWOK_GROUP, "kind": "KWOKNodeClass", "name": "default"},
                "requirements": [
                    {
                        "key": "karpenter.kwok.sh/instance-family",
                        "operator": "In",
                        "values": [family],
                    },
                    {
                        "key": "karpenter.sh/capacity-type",
                        "operator": "In",
                        "values": ["on-demand"],
                    },
                ],
                "expireAfter": "Never",
            },
        },
        "disruption": {
            "consolidationPolicy": "WhenEmptyOrUnderutilized",
            "consolidateAfter": consolidate_after,
        },
    }
    if taints:
        spec["template"]["spec"]["taints"] = list(taints)
    if limits:
        spec["limits"] = limits
    if weight is not None:
        spec["weight"] = weight
    return {
        "apiVersion": f"{KARPENTER_GROUP}/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": spec,
    }


# Karpenter tries NodePools by weight, then by name *descending*: without a weight "gpu" comes
# before "cpu", and a pod that tolerates the GPU taint (a CPU app that followed a lab onto a GPU
# node) would be given a GPU machine again, also when consolidation looks for a cheaper one.
DEFAULT_NODEPOOLS = (
    nodepool("cpu", "cpu", limits={"cpu": "64"}, weight=10),
    nodepool("gpu", "gpu", taints=[GPU_TAINT], limits={"nvidia.com/gpu": "8"}),
)


def _run(coro):
    """Run ``coro`` on a loop of its own (callers may or may not be inside one)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


class Autoscaler:
    """Karpenter (kwok cloud provider) for one started ``ControlPlane``.

    ``start()`` applies the CRDs, creates the node class and ``nodepools`` and starts Karpenter,
    then waits until it is ready and every NodePool is Ready; RuntimeError with the log tail if
    not. ``stop()`` ends the process (the control plane, and the Nodes in it, stay).
    """

    def __init__(
        self,
        bin_dir: str | os.PathLike[str],
        control_plane: ControlPlane,
        *,
        nodepools: tuple[dict, ...] | list[dict] = DEFAULT_NODEPOOLS,
        instance_types: str | os.PathLike[str] = INSTANCE_TYPES,
        timeout: float = 60.0,
    ) -> None:
        self.bin = Path(bin_dir) / "karpenter"
        self.crd_dir = Path(bin_dir) / "karpenter-crds"
        self.control_plane = control_plane
        self.nodepools = list(nodepools)
        self.instance_types = Path(instance_types)
        self.timeout = timeout
        self.log: str | None = None
        self.startup_seconds: float | None = None
        self.metrics_port: int | None = None
        self._component: _Component | None = None

    # -- public ---------------------------------------------------------------------------------

    def start(self) -> Autoscaler:
        cp = self.control_plane
        if cp.dir is None or cp.kubeconfig is None:
            raise RuntimeError("Autoscaler.start(): the control plane is not started")
        if not os.access(self.bin, os.X_OK):
            raise RuntimeError(f"{self.bin} is missing or not executable: run tests/kube/build.sh")
        crds = sorted(self.crd_dir.glob("*.yaml"))
        if not crds:
            raise RuntimeError(f"no CRD files in {self.crd_dir}: run tests/kube/build.sh")
        t0 = time.monotonic()
        _run(self._apply(crds))
        for attempt in range(3):
            health = free_port()
            self._launch(health, free_port())
            try:
                self._wait_ready(health)
                break
            except RuntimeError:
                text = Path(self.log).read_text(errors="replace")
                if attempt == 2 or self._component.alive() or "address already in use" not in text:
                    raise
                self._component.stop()
        _run(self._wait_nodepools_ready())
        self.startup_seconds = time.monotonic() - t0
        return self

    def stop(self) -> None:
        if self._component is not None:
            self._component.stop()

    def alive(self) -> bool:
        return self._component is not None and self._component.alive()

    def metrics(self) -> dict[tuple[str, frozenset], float]:
        """Karpenter's Prometheus metrics now: (sample name, its labels) -> value."""
        from prometheus_client.parser import text_string_to_metric_families

        if self.metrics_port is None:
            raise RuntimeError("Autoscaler.metrics(): Karpenter is not started")
        url = f"http://{HOST}:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as r:
            text = r.read().decode()
        return {
            (sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        }

    def __enter__(self) -> Autoscaler:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- steps ----------------------------------------------------------------------------------

    async def _client(self):
        from kubernetes_asyncio import config

        return await config.new_client_from_config(
            config_file=self.control_plane.kubeconfig, persist_config=False
        )

    async def _apply(self, crd_files: list[Path]) -> None:
        from kubernetes_asyncio import client
        from kubernetes_asyncio.client.exceptions import ApiException

        api = await self._client()
        try:
            ext = client.ApiextensionsV1Api(api)
            names = []
            for path in crd_files:
                for doc in yaml.safe_load_all(path.read_text()):
                    if not doc:
                        continue
                    names.append(doc["metadata"]["name"])
                    try:
                        await ext.create_custom_resource_definition(doc)
                    except ApiException as e:
                        if e.status != 409:
                            raise RuntimeError(f"applying {path.name}: {e.status} {e.body}") from e
            deadline = time.monotonic() + self.timeout

            def conditions(crd) -> dict:
                return {c.type: c.status for c in crd.status.conditions or []}

            for name in names:
                await wait_until(
                    lambda name=name: ext.read_custom_resource_definition(name),
                    until=lambda crd: conditions(crd).get("Established") == "True",
                    timeout=max(0.0, deadline - time.monotonic()),
                    what=f"CRD {name} Established",
                    seen=conditions,
                    interval=0.1,
                )
            custom = client.CustomObjectsApi(api)
            objects = [
                (
                    KWOK_GROUP,
                    "v1alpha1",
                    "kwoknodeclasses",
                    {
                        "apiVersion": f"{KWOK_GROUP}/v1alpha1",
                        "kind": "KWOKNodeClass",
                        "metadata": {"name": "default"},
                    },
                ),
                *((KARPENTER_GROUP, "v1", "nodepools", np) for np in self.nodepools),
            ]
            for group, version, plural, body in objects:
                # A CRD just Established may still 404 for a moment on its first create.
                for _ in range(50):
                    try:
                        await custom.create_cluster_custom_object(group, version, plural, body)
                        break
                    except ApiException as e:
                        if e.status == 409:
                            break
                        if e.status != 404:
                            raise RuntimeError(
                                f"creating {plural}/{body['metadata']['name']}: {e.status} {e.body}"
                            ) from e
                        await asyncio.sleep(0.1)
        finally:
            await api.close()

    def _launch(self, health_port: int, metrics_port: int) -> None:
        cp = self.control_plane
        log_path = cp.dir / "karpenter.log"
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": os.environ.get("HOME", "/tmp"),
            "KUBECONFIG": cp.kubeconfig,
            "DISABLE_LEADER_ELECTION": "true",
            "HEALTH_PROBE_PORT": str(health_port),
            "METRICS_PORT": str(metrics_port),
            "INSTANCE_TYPES_FILE_PATH": str(self.instance_types),
            "BATCH_MAX_DURATION": "1s",
            "BATCH_IDLE_DURATION": "200ms",
            "LOG_LEVEL": "debug",
            # Karpenter sizes its Go memory limit from this; keep it modest on a shared machine.
            "MEMORY_LIMIT": str(1 << 30),
        }
        self._component = _Component("karpenter", [str(self.bin)], log_path, env)
        self._component.start()
        self.log = str(log_path)
        self.metrics_port = metrics_port

    def _wait_ready(self, health_port: int) -> None:
        url = f"http://{HOST}:{health_port}/readyz"
        deadline = time.monotonic() + self.timeout
        last = None
        while time.monotonic() < deadline:
            if not self._component.alive():
                raise self._component.failure("exited before it was ready")
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError) as e:
                last = e
            time.sleep(0.2)
        raise self._component.failure(f"not ready (/readyz) within {self.timeout:.0f} s ({last!r})")

    async def _wait_nodepools_ready(self) -> None:
        from kubernetes_asyncio import client

        api = await self._client()
        try:
            custom = client.CustomObjectsApi(api)
            deadline = time.monotonic() + self.timeout
            pending = {np["metadata"]["name"] for np in self.nodepools}
            while pending:
                for name in sorted(pending):
                    np = await custom.get_cluster_custom_object(
                        KARPENTER_GROUP, "v1", "nodepools", name
                    )
                    conditions = {
                        c.get("type"): c.get("status")
                        for c in (np.get("status") or {}).get("conditions") or []
                    }
                    if conditions.get("Ready") == "True":
                        pending.discard(name)
                if pending and time.monotonic() > deadline:
                    raise self._component.failure(f"NodePools {sorted(pending)} never Ready")
                await asyncio.sleep(0.2)
        finally:
            await api.close()


# ---------------------------------------------------------------------------------------------
# Async helpers for tests and benchmarks (take a kubernetes_asyncio ApiClient)
# ---------------------------------------------------------------------------------------------


async def nodeclaims(api) -> list[dict]:
    from kubernetes_asyncio import client

    result = await client.CustomObjectsApi(api).list_cluster_custom_object(
        KARPENTER_GROUP, "v1", "nodeclaims"
    )
    return result.get("items", [])


async def karpenter_nodes(api, pool: str | None = None) -> list[dict]:
    """The Nodes Karpenter launched (of NodePool ``pool`` when given), as camelCase dicts."""
    from kubernetes_asyncio import client

    selector = f"{NODEPOOL_LABEL}={pool}" if pool else NODEPOOL_LABEL
    nodes = await client.CoreV1Api(api).list_node(label_selector=selector)
    return [api.sanitize_for_serialization(n) for n in nodes.items]


def metric(metrics: dict[tuple[str, frozenset], float], name: str, **labels: str) -> float:
    """The sum of the samples ``name`` of ``metrics`` (``Autoscaler.metrics()``) whose labels
    include ``labels``."""
    wanted = set(labels.items())
    return sum(v for (n, have), v in metrics.items() if n == name and wanted <= have)


async def wait_for(predicate, timeout: float, what: str, interval: float = 0.2):
    """Poll the async ``predicate`` until it returns something truthy; return it
    (:func:`tests.support.waiting.wait_until`, which says what it saw last when it gives up)."""
    return await wait_until(predicate, timeout=timeout, what=what, interval=interval)


async def clear_nodes(api, timeout: float = 60) -> None:
    """Delete every NodeClaim and wait until Karpenter has removed them and their Nodes."""
    from kubernetes_asyncio import client
    from kubernetes_asyncio.client.exceptions import ApiException

    custom = client.CustomObjectsApi(api)
    for claim in await nodeclaims(api):
        with contextlib.suppress(ApiException):
            await custom.delete_cluster_custom_object(
                KARPENTER_GROUP, "v1", "nodeclaims", claim["metadata"]["name"]
            )

    async def gone():
        return not await nodeclaims(api) and not await karpenter_nodes(api)

    await wait_for(gone, timeout, "Karpenter's nodes to be removed")


def describe(nodes: list[dict]) -> str:
    """One line per node for assertion messages: name, pool, instance type, hostname label."""
    lines = []
    for n in nodes:
        labels = n["metadata"].get("labels") or {}
        lines.append(
            f"{n['metadata']['name']} pool={labels.get(NODEPOOL_LABEL)} "
            f"type={labels.get('node.kubernetes.io/instance-type')} "
            f"hostname={labels.get('kubernetes.io/hostname')}"
        )
    return json.dumps(lines, indent=1)
