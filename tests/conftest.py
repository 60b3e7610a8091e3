"""Shared fixtures. Cluster tests run against a real control plane built from tests/kube/.

- ``kube_bin_dir`` (session): runs tests/kube/build.sh (idempotent, quick once built), returns the
  directory holding ``etcd``, ``kube`` and ``kwok``.
- ``control_plane`` (session): a started ``ControlPlane`` (etcd, kube-apiserver, kube-scheduler,
  kube-controller-manager, kwok and the volume gate), stopped at the end of the session.
- ``frozen_control_plane`` (session, started on first use): a second one whose cluster state stays
  as a test writes it: no kwok (a bound pod keeps the phase the test sets) and no attach/detach
  controller (the only VolumeAttachments are the test's own); the PV controller binds claims.
- ``kube`` (function, async): a ``Kube`` with an admin ApiClient, a fresh namespace, and factories
  that record what they create so teardown deletes it (and checks the claim invariant).
- ``autoscaler`` (session): Karpenter with its NodePools, on a control plane of its own
  (``tests/support/autoscaler.py``).

Any test that uses ``kube_bin_dir`` (so any test using ``control_plane`` or ``kube``) gets the
``cluster`` marker. A control plane that cannot be built or started fails those tests; it never
skips them.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
from pathlib import Path

import pytest

from tests.support import helpers
from tests.support.autoscaler import Autoscaler, clear_nodes
from tests.support.controlplane import CONTROLLERS, ControlPlane, tail

TESTS_DIR = Path(__file__).resolve().parent

BUILD_SCRIPT = TESTS_DIR / "kube" / "build.sh"
CLUSTER_FIXTURES = frozenset(
    {
        "kube_bin_dir",
        "control_plane",
        "frozen_control_plane",
        "kube",
        "autoscaler",
        "karpenter_kube",
    }
)
FROZEN_STATE_CONTROLLERS = tuple(c for c in CONTROLLERS if c != "attachdetach")


#: under pytest-xdist (``-n N --dist loadgroup``), the tests that share a costly session fixture
#: of their own run on one worker: Karpenter's control plane, the fault suite's, the frozen one
XDIST_GROUPS = (
    ("karpenter", frozenset({"autoscaler", "karpenter_kube"})),
    ("faults", frozenset({"fault_plane"})),
    ("frozen", frozenset({"frozen_control_plane"})),
)


def pytest_collection_modifyitems(config, items):
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if CLUSTER_FIXTURES.intersection(fixtures):
            item.add_marker(pytest.mark.cluster)
        for group, wanted in XDIST_GROUPS:
            if wanted & fixtures:
                item.add_marker(pytest.mark.xdist_group(group))
                break


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """On a failed cluster test, attach the tails of the control plane's logs to the report."""
    report = yield
    if report.failed and call.when in ("setup", "call", "teardown"):
        funcargs = getattr(item, "funcargs", {})
        control_plane = funcargs.get("control_plane") or funcargs.get("frozen_control_plane")
        karpenter = funcargs.get("autoscaler")
        if isinstance(karpenter, Autoscaler):
            control_plane = karpenter.control_plane
            report.sections.append((f"karpenter log ({karpenter.log})", tail(karpenter.log, 40)))
        if isinstance(control_plane, ControlPlane):
            for name, path in control_plane.logs.items():
                lines = 40 if name in ("scheduler", "controller-manager", "volume-gate") else 15
                report.sections.append((f"{name} log ({path})", tail(path, lines)))
    return report


@pytest.fixture(scope="session")
def kube_bin_dir() -> Path:
    """tests/kube/bin, built by tests/kube/build.sh (which prints the bin dir last)."""
    try:
        result = subprocess.run(
            ["bash", str(BUILD_SCRIPT)],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except OSError as e:
        pytest.fail(f"cannot run {BUILD_SCRIPT}: {e}", pytrace=False)
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        err = "\n".join(result.stderr.strip().splitlines()[-40:])
        pytest.fail(
            f"{BUILD_SCRIPT} failed (exit {result.returncode}):\n{err}",
            pytrace=False,
        )
    bin_dir = Path(lines[-1])
    for binary in ("etcd", "kube", "kwok"):
        if not os.access(bin_dir / binary, os.X_OK):
            pytest.fail(f"{BUILD_SCRIPT} did not produce {bin_dir / binary}", pytrace=False)
    return bin_dir


def _started(kube_bin_dir, **kwargs):
    """Start a ControlPlane, yield it, stop it; a start that fails fails the test."""
    keep = bool(os.environ.get("NEBARI_COLOCATE_KEEP_LOGS"))
    cp = ControlPlane(kube_bin_dir, keep_logs=keep, **kwargs)
    try:
        cp.start()
    except Exception as e:
        pytest.fail(f"the test control plane did not start: {e}", pytrace=False)
    yield cp
    cp.stop()
    if keep:
        print(f"\ncontrol plane logs kept in {cp.dir}")


@pytest.fixture(scope="session")
def control_plane(kube_bin_dir):
    """A running control plane for the whole session (logs kept if NEBARI_COLOCATE_KEEP_LOGS)."""
    yield from _started(kube_bin_dir)


@pytest.fixture(scope="session")
def frozen_control_plane(kube_bin_dir):
    """A control plane whose state changes only by the test's hand (see the module docstring)."""
    yield from _started(kube_bin_dir, kwok=False, controllers=FROZEN_STATE_CONTROLLERS)


class Kube:
    """What a cluster test gets: clients, its own namespace, and recording factories."""

    def __init__(self, control_plane: ControlPlane, api_client, namespace: str) -> None:
        from kubernetes_asyncio import client

        self.control_plane = control_plane
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.storage = client.StorageV1Api(api_client)
        self.rbac = client.RbacAuthorizationV1Api(api_client)
        self.namespace = namespace
        self.kubeconfig = control_plane.kubeconfig
        self.nodes: list[str] = []
        # Set False in a test that breaks the invariant on purpose.
        self.check_split_claims = True

    async def create_node(self, name: str, **kwargs) -> dict:
        """``helpers.create_node``, waiting until kwok reports the Node Ready."""
        self.nodes.append(name)
        kwargs.setdefault("wait_ready", 30)
        return await helpers.create_node(self.api_client, name, **kwargs)

    async def cordon(self, name: str) -> dict:
        return await helpers.cordon(self.api_client, name)

    async def cordon_seen_by_scheduler(self, name: str) -> dict:
        return await helpers.cordon_seen_by_scheduler(self.api_client, self.namespace, name)

    async def create_bound_claim(
        self, name: str, access_modes=("ReadWriteOnce",), **kwargs
    ) -> tuple[dict, dict]:
        return await helpers.create_bound_claim(
            self.api_client, self.namespace, name, access_modes, **kwargs
        )

    async def create_claim(
        self, name: str, access_modes=("ReadWriteOnce",), **kwargs
    ) -> tuple[dict, dict]:
        return await helpers.create_claim(
            self.api_client, self.namespace, name, access_modes, **kwargs
        )

    async def wait_for_claim_bound(self, name: str, timeout: float = 30) -> dict:
        return await helpers.wait_for_claim_bound(self.api_client, self.namespace, name, timeout)

    async def volume_attachments(self, pv_name: str) -> list[dict]:
        return await helpers.list_volume_attachments(self.api_client, pv_name)

    async def create_volume_attachment(self, pv_name: str, node_name: str, attached=True):
        return await helpers.create_volume_attachment(self.api_client, pv_name, node_name, attached)

    async def create_pod(self, name: str, **kwargs) -> dict:
        return await helpers.create_pod(self.api_client, self.namespace, name, **kwargs)

    async def wait_for_binding(self, pod_name: str, timeout: float = 30) -> str:
        return await helpers.wait_for_binding(self.api_client, self.namespace, pod_name, timeout)

    async def wait_for_running(self, pod_name: str, timeout: float = 30) -> dict:
        return await helpers.wait_for_running(self.api_client, self.namespace, pod_name, timeout)

    async def wait_for_failed_scheduling(self, pod_name: str, timeout: float = 30) -> str:
        return await helpers.wait_for_failed_scheduling(
            self.api_client, self.namespace, pod_name, timeout
        )

    async def assert_no_split_claims(self) -> None:
        await helpers.assert_no_split_claims(self.api_client, self.namespace)

    def user_kubeconfig(self, username: str, groups=()) -> str:
        return self.control_plane.user_kubeconfig(username, groups)

    async def user_client(self, username: str, groups=()):
        """An ApiClient authenticated as `username` (caller closes it)."""
        from kubernetes_asyncio import config

        return await config.new_client_from_config(
            config_file=self.user_kubeconfig(username, groups), persist_config=False
        )


@contextlib.asynccontextmanager
async def kube_namespace(control_plane: ControlPlane):
    """A ``Kube`` in a fresh namespace of ``control_plane``; deleted (claims checked) on exit."""
    from kubernetes_asyncio import client, config

    api_client = await config.new_client_from_config(
        config_file=control_plane.kubeconfig, persist_config=False
    )
    namespace = f"t-{secrets.token_hex(4)}"
    k = Kube(control_plane, api_client, namespace)
    try:
        await k.core.create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace))
        )
        yield k
        if k.check_split_claims:
            await k.assert_no_split_claims()
    finally:
        try:
            await helpers.cleanup(api_client, namespace, k.nodes)
            await helpers.delete_namespace(api_client, namespace)
        finally:
            await api_client.close()


@pytest.fixture
async def kube(control_plane):
    async with kube_namespace(control_plane) as k:
        yield k


@pytest.fixture(scope="session")
def autoscaler(kube_bin_dir):
    """Karpenter (kwok cloud provider) with NodePools ``cpu`` and ``gpu``, on a control plane of
    its own: Karpenter adds nodes for every pending pod it sees, so it must not see the pods
    other cluster tests leave unschedulable on purpose. ``autoscaler.control_plane`` is that
    control plane; tests use it through ``karpenter_kube`` (tests/cluster/test_karpenter*.py)."""
    keep = bool(os.environ.get("NEBARI_COLOCATE_KEEP_LOGS"))
    cp = ControlPlane(kube_bin_dir, keep_logs=keep)
    karpenter = Autoscaler(kube_bin_dir, cp)
    try:
        cp.start()
        karpenter.start()
    except Exception as e:
        karpenter.stop()
        cp.stop()
        pytest.fail(f"Karpenter and its control plane did not start: {e}", pytrace=False)
    yield karpenter
    karpenter.stop()
    cp.stop()


@pytest.fixture
async def karpenter_kube(autoscaler):
    """A ``Kube`` on the autoscaler's control plane; on exit, after the namespace is gone, every
    node Karpenter launched is removed so the next test starts from an empty cluster."""
    from kubernetes_asyncio import config

    try:
        async with kube_namespace(autoscaler.control_plane) as k:
            yield k
    finally:
        api_client = await config.new_client_from_config(
            config_file=autoscaler.control_plane.kubeconfig, persist_config=False
        )
        try:
            await clear_nodes(api_client)
        finally:
            await api_client.close()
