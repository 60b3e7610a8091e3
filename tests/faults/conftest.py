"""The fault suite's fixtures: a control plane of its own, the fault proxy, and a spawn harness.

- ``fault_plane`` (session): a ControlPlane (etcd, kube-apiserver, kube-scheduler, kubelet stub)
  that only this suite uses, because its tests stop, freeze and restart its processes.
- ``proxy`` (function): a :class:`~faults.proxy.FaultProxy` in front of its apiserver.
- ``hub`` (function): a fresh namespace, an admin client straight to the apiserver (set-up and
  checks go around the faults), spawners whose API client goes through the proxy, a monitor of
  the spawners' event loop (the hub's), and the teardown checks every fault test must pass: no
  RWO claim on two nodes, no pod left once every server is stopped, no claim but the users'
  homes, every per-user lock released, the loop never stalled. ``hub.start_dead_hub()`` runs a
  first hub in a process of its own (:class:`DeadHub`, to be killed mid-spawn); the fixture's
  spawners are then the hub that restarted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import sys
import time
from dataclasses import dataclass
from pathlib import Path

# What a JupyterHub process has imported before its loop serves a spawn (its handlers and
# metrics); imported lazily inside the loop, they cost the first refusal half a second of CPU.
import jupyterhub.apihandlers  # noqa: F401
import prometheus_client  # noqa: F401
import pytest

from nebari_colocate.spawner import ColocatingKubeSpawner, ColocationRefused, KubernetesApiFault
from tests.support import builders, helpers
from tests.support.controlplane import ControlPlane
from tests.support.spawning import make_spawner, stop_reflectors
from tests.support.waiting import WaitTimeout, wait_until

from .proxy import FaultProxy

#: words a raw client exception shows; a message a person reads has none of them
RAW_MARKERS = (
    "ClientConnectorError",
    "ClientOSError",
    "ServerDisconnectedError",
    "Could not create",
    "ApiException",
    "Traceback",
    "Errno",
    "HTTP response headers",
)
#: the most CPU time the hub's event loop may spend between two ticks of a 20 ms timer
MAX_LOOP_LAG = 0.5
TESTS_DIR = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def fault_plane(kube_bin_dir):
    keep = bool(os.environ.get("NEBARI_COLOCATE_KEEP_LOGS"))
    cp = ControlPlane(kube_bin_dir, kubelet_stub=True, keep_logs=keep)
    try:
        cp.start()
    except Exception as e:
        pytest.fail(f"the fault suite's control plane did not start: {e}", pytrace=False)
    yield cp
    for name in cp.pids:
        with contextlib.suppress(Exception):
            cp.resume(name)  # a test that failed while a process was stopped
    cp.stop()


@pytest.fixture
def proxy(fault_plane):
    p = FaultProxy(
        fault_plane.server,
        fault_plane.ca_file,
        fault_plane._admin_cert,
        fault_plane._admin_key,
    ).start()
    yield p
    p.stop()


@dataclass
class Outcome:
    """How one spawn ended: started (url), or the exception JupyterHub would show."""

    spawner: object
    url: str | None = None
    error: BaseException | None = None
    seconds: float = 0.0

    @property
    def started(self) -> bool:
        return self.error is None

    def readable(self) -> str:
        """The text a person reads; fails the test when it is a raw client exception."""
        assert isinstance(self.error, (ColocationRefused, KubernetesApiFault)), repr(self.error)
        text = getattr(self.error, "jupyterhub_message", "") or ""
        assert text, repr(self.error)
        for marker in RAW_MARKERS:
            assert marker not in text, text
        return text


class DeadHub:
    """A first hub in a process of its own (``dead_hub.py``), through the same proxy: the test
    asks it to spawn, reads what it says, and kills it with SIGKILL."""

    def __init__(self, process: asyncio.subprocess.Process):
        self.process = process
        self.facts: list[dict] = []

    @classmethod
    async def start(cls, kubeconfig: Path, namespace: str) -> DeadHub:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS_DIR), str(TESTS_DIR.parent)])}
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            str(Path(__file__).parent / "dead_hub.py"),
            str(kubeconfig),
            namespace,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env=env,
        )
        dead = cls(process)
        await dead.until(ready=True)
        return dead

    async def spawn(self, user: str, server: str = "", **traits) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"spawn": [user, server, traits]}).encode() + b"\n")
        await self.process.stdin.drain()

    async def until(self, timeout: float = 30.0, **fact) -> None:
        """Read what the hub says until it says ``fact``; fail if it says a spawn failed."""
        assert self.process.stdout is not None
        while fact not in self.facts:
            line = await asyncio.wait_for(self.process.stdout.readline(), timeout)
            assert line, f"the first hub exited (rc={self.process.returncode}) before {fact}"
            said = json.loads(line)
            assert "failed" not in said, f"the first hub's spawn failed: {said}"
            self.facts.append(said)

    async def kill(self) -> None:
        if self.process.returncode is None:
            self.process.kill()
        await self.process.wait()


class Hub:
    """Spawners as a hub runs them, on the fault plane, through the proxy."""

    def __init__(self, plane: ControlPlane, proxy: FaultProxy, api_client, namespace: str, tmp):
        from kubernetes_asyncio import client

        self.plane = plane
        self.proxy = proxy
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.namespace = namespace
        self.nodes: list[str] = []
        self.users: set[str] = set()
        self.spawners: list = []
        self.max_lag = 0.0  # CPU seconds the loop's thread spent between two ticks
        self.max_wall_lag = 0.0
        self.kubeconfig = tmp / "hub-through-proxy.kubeconfig"
        self.kubeconfig.write_text(json.dumps(proxy.kubeconfig()))
        self.dead_hubs: list[DeadHub] = []

    async def start_dead_hub(self) -> DeadHub:
        """A first hub, in a process of its own, on this namespace and through the proxy."""
        dead = await DeadHub.start(self.kubeconfig, self.namespace)
        self.dead_hubs.append(dead)
        return dead

    async def restart_check(self, spawner) -> bool:
        """What JupyterHub's ``init_spawners`` does, on start, with a server its database says
        was started (a spawn still pending when the hub died is one): poll; a pod that runs is
        taken over (its notebook would answer the hub's HTTP check; nothing answers on this
        plane, so running is the stand-in); else ``user.stop``: ``stop()`` if poll says the pod
        is there, then ``clear_state()``. True when taken over."""
        if await spawner.poll() is None:
            pod = (await self.pods()).get(spawner.pod_name)
            if pod is not None and helpers.is_running(pod):
                return True
            await spawner.stop()
        spawner.clear_state()
        return False

    async def create_node(self, name: str, **kwargs) -> None:
        self.nodes.append(name)
        await helpers.create_node(self.api_client, name, **kwargs)

    async def create_bound_claim(self, name: str, **kwargs) -> None:
        await helpers.create_bound_claim(self.api_client, self.namespace, name, **kwargs)

    def make(self, username: str, server: str = "", **traits):
        traits.setdefault("colocation_check_timeout", 1.0)
        traits.setdefault("k8s_api_request_timeout", 3)
        traits.setdefault("k8s_api_request_retry_timeout", 8)
        spawner = make_spawner(ColocatingKubeSpawner, self.namespace, username, server, **traits)
        spawner.api_fault_sweep_seconds = 60.0
        self.users.add(username)
        self.spawners.append(spawner)
        return spawner

    async def spawn(self, spawner) -> Outcome:
        """``start()`` as JupyterHub awaits it; after a failure JupyterHub stops the server."""
        started = time.monotonic()
        outcome = Outcome(spawner)
        try:
            outcome.url = await spawner.start()
        except Exception as exc:  # what JupyterHub would catch and show
            outcome.error = exc
            with contextlib.suppress(Exception):
                await spawner.stop(now=True)
        outcome.seconds = time.monotonic() - started
        return outcome

    async def wait_until_pods_run(self, node: str, timeout: float = 120.0) -> None:
        """After a restart: a pod pinned to ``node``, then a pod on a NEW node with a NEW bound
        claim, each go Running and are deleted. client-go's reflectors back off up to 30 s before
        they watch again, each collection on its own, so the first probe proves the scheduler's and
        kwok's pod watches and the second their node watches and kube-controller-manager's claim
        binding and attach. The next test starts on a new node with a new claim; without the
        second probe its first server did not start in 30 s.

        The attach/detach controller adds a pod's volumes when it sees the pod, only if it
        already knows the pod's node; otherwise it finds the pod only on its next full list of
        pods, every 3 minutes (``DesiredStateOfWorldPopulatorListPodsRetryDuration``). So while
        its node watch is still backing off, a probe pod is never attached: it is replaced by a
        new pod (a new add event) every 15 s until one runs."""
        await self._probe(node, [], timeout)
        token = secrets.token_hex(4)
        fresh, user = f"{self.namespace}-probe-{token}", f"probe-{token}"
        await self.create_node(fresh)
        self.users.add(user)  # its claim is a home: the teardown's claim check allows it
        await self.create_bound_claim(f"claim-{user}", timeout=timeout)

        async def probe() -> bool:
            try:
                await self._probe(fresh, [f"claim-{user}"], 15.0)
            except AssertionError as stuck:
                print(f"restart probe replaced: {stuck}")
                raise
            return True

        await wait_until(
            probe,
            timeout=timeout,
            what=f"a probe pod running on {fresh} (a new one every 15 s)",
            retry_on=(AssertionError,),
            interval=0,
        )

    async def _probe(self, node: str, claims: list[str], timeout: float) -> None:
        name = f"probe-{secrets.token_hex(4)}"
        body = builders.kube_pod(
            name,
            claims=claims,
            node_selector={"kubernetes.io/hostname": node},
            containers=[builders.container("probe", image="probe")],
        )
        await self.core.create_namespaced_pod(self.namespace, body)
        try:
            await wait_until(
                lambda: self.core.read_namespaced_pod(name, self.namespace),
                until=lambda pod: pod.status.phase == "Running",
                timeout=timeout,
                what=f"probe {name} Running on {node}",
                seen=lambda pod: pod.status.phase,
                interval=0.5,
            )
        except WaitTimeout:
            raise AssertionError(
                f"no pod ran on {node} within {timeout} s of the restart: "
                f"{await self._probe_facts(name, node)}"
            ) from None
        finally:
            with contextlib.suppress(Exception):
                await self.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0)

    async def _probe_facts(self, name: str, node: str) -> str:
        """What a stuck probe shows: the pod's node and conditions, the node's Ready and attached
        volumes, and the VolumeAttachments on the node (which component did not come back)."""
        facts = []
        with contextlib.suppress(Exception):
            pod = await self.core.read_namespaced_pod(name, self.namespace)
            conditions = [(c.type, c.status) for c in pod.status.conditions or []]
            facts.append(f"pod node={pod.spec.node_name} phase={pod.status.phase} {conditions}")
        with contextlib.suppress(Exception):
            n = await self.core.read_node(node)
            ready = [c.status for c in n.status.conditions or [] if c.type == "Ready"]
            attached = [v.name for v in n.status.volumes_attached or []]
            facts.append(f"node ready={ready} volumesAttached={attached}")
        with contextlib.suppress(Exception):
            from kubernetes_asyncio import client

            listing = await client.StorageV1Api(self.api_client).list_volume_attachment()
            vas = [
                (va.metadata.name, va.status.attached if va.status else None)
                for va in listing.items
                if va.spec.node_name == node
            ]
            facts.append(f"attachments={vas}")
        return "; ".join(facts)

    async def pods(self) -> dict[str, dict]:
        listing = await self.core.list_namespaced_pod(self.namespace)
        return {
            p.metadata.name: self.api_client.sanitize_for_serialization(p) for p in listing.items
        }

    async def claims(self) -> set[str]:
        listing = await self.core.list_namespaced_persistent_volume_claim(self.namespace)
        return {p.metadata.name for p in listing.items}

    async def wait_for_locks(self, timeout: float = 15.0) -> None:
        await wait_until(
            lambda: self.users & set(ColocatingKubeSpawner._colocation_locks),
            until=lambda held: not held,
            timeout=timeout,
            what="every per-user lock released",
            seen=lambda held: f"still held: {sorted(held)}",
            interval=0.1,
        )

    async def stop_all_and_check(self, timeout: float = 40.0) -> None:
        """Stop every server, then: no pod left (a pod a stalled API created late included),
        no claim but the users' homes, no lock held, no RWO claim on two nodes."""
        await asyncio.gather(*(s.stop(now=True) for s in self.spawners), return_exceptions=True)
        await self.wait_for_locks()
        await wait_until(
            self.pods,
            until=lambda pods: not pods,
            timeout=timeout,
            what="no pod left",
            seen=lambda pods: f"orphan pods: {sorted(pods)}",
            interval=0.5,
        )
        homes = {f"claim-{u}" for u in self.users}
        stray = await self.claims() - homes
        assert not stray, f"claims left that are no user's home: {sorted(stray)}"


async def _watch_loop_lag(hub: Hub) -> None:
    """How long the loop went without running this task: in wall time, and in CPU time of the
    loop's thread (work the loop did meanwhile; on a machine this loaded the OS alone can
    withhold the CPU for a second, so the CPU figure is the one checked)."""
    tick = 0.02
    while True:
        before, cpu_before = time.monotonic(), time.thread_time()
        await asyncio.sleep(tick)
        hub.max_wall_lag = max(hub.max_wall_lag, time.monotonic() - before - tick)
        hub.max_lag = max(hub.max_lag, time.thread_time() - cpu_before)


@pytest.fixture
async def hub(fault_plane, proxy, monkeypatch, tmp_path):
    from kubernetes_asyncio import client, config
    from kubernetes_asyncio.config import kube_config

    admin = await config.new_client_from_config(
        config_file=fault_plane.kubeconfig, persist_config=False
    )
    namespace = f"f-{secrets.token_hex(4)}"
    h = Hub(fault_plane, proxy, admin, namespace, tmp_path)
    await h.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    # KubeSpawner's shared client reads the default kubeconfig: point it at the proxy.
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(h.kubeconfig))
    await config.load_kube_config(config_file=str(h.kubeconfig))
    monitor = asyncio.ensure_future(_watch_loop_lag(h))
    try:
        yield h
        for dead in h.dead_hubs:
            await dead.kill()
        proxy.clear()
        for name in ("etcd", "apiserver"):
            with contextlib.suppress(Exception):
                fault_plane.resume(name)
        await h.stop_all_and_check()
        await helpers.assert_no_split_claims(admin, namespace)
        print(f"loop: longest gap {h.max_wall_lag:.3f} s wall, {h.max_lag:.3f} s of CPU")
        assert h.max_lag < MAX_LOOP_LAG, f"the hub's event loop ran {h.max_lag:.3f} s at a stretch"
    finally:
        monitor.cancel()
        for dead in h.dead_hubs:
            await dead.kill()
        for task in list(ColocatingKubeSpawner._api_fault_sweeps):
            task.cancel()
        await stop_reflectors(namespace)
        try:
            await helpers.cleanup(admin, namespace, h.nodes)
            await helpers.delete_namespace(admin, namespace)
        finally:
            await admin.close()
