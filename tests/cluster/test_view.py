"""The live view (nebari_colocate.view) against the real kube-apiserver and kube-scheduler.

Every holder is seen (a Job's pod, not only servers), the safe side pins on an API freeze, a view
whose watch broke is not trusted and lists again once the API is back, and a pinned pod is judged
as admitted (RuntimeClass overhead).  Faults are injected on loopback only: SIGSTOP / SIGCONT to
the kube-apiserver the fixture started, and a TCP proxy on 127.0.0.1 that drops connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from pathlib import Path

import pytest
import yaml

from nebari_colocate.spawner import ColocationRefused
from nebari_colocate.view import ClusterView
from tests.support import builders
from tests.support.waiting import wait_until

from .test_spawner_cluster import grant_z2jh_hub_role, metric, pod_of


async def manifest_of(spawner) -> dict:
    """KubeSpawner's own manifest (what the check judges), with the profile applied."""
    from kubespawner import KubeSpawner

    await KubeSpawner.load_user_options(spawner)
    return spawner._serialize(await KubeSpawner.get_pod_manifest(spawner))


async def job_pod_holding(kube, claim: str, node: str, name: str = "backup-alice") -> dict:
    """A pod that is no server (a backup Job's) mounting ``claim``, bound to ``node``."""
    body = builders.kube_pod(
        name,
        node_name=node,
        labels={"job-name": "backup"},
        containers=[builders.container("backup", image="restic/restic")],
        claims=[claim],
    )
    await kube.core.create_namespaced_pod(kube.namespace, body)
    return body


async def test_a_job_pod_holding_the_claim_pins_the_next_server_with_only_the_z2jh_role(
    kube, spawners
):
    await kube.create_node("node-a", cpu="16")  # the scheduler alone would choose node-a
    await kube.create_node("node-b", cpu="2")
    await kube.create_bound_claim("claim-alice")
    await kube.create_bound_claim("claim-bob")
    await grant_z2jh_hub_role(kube, "hub")
    await spawners.use_credentials(kube.user_kubeconfig("hub"))

    # Warm: KubeSpawner's reflector and the live view are running before the Job's pod exists.
    bob = spawners.make("bob")
    await spawners.start(bob)
    view = bob.colocation_view()
    await wait_until(lambda: view.live, timeout=20, what="the live view", interval=0.05)
    assert view.nodes.forbidden and view.all_pods.forbidden  # the hub Role only
    # what preemption reads is optional too: forbidden, judged without it, the view still live
    hub = view.hub
    await wait_until(
        lambda: hub.priority_classes.forbidden and hub.pdbs.forbidden,
        timeout=20,
        what="403 on priorityclasses and poddisruptionbudgets",
        interval=0.05,
    )
    assert view.live

    await job_pod_holding(kube, "claim-alice", "node-b")
    await wait_until(
        lambda: view.has_pod(kube.namespace, "backup-alice"),
        timeout=20,
        what="the job pod",
        interval=0.05,
    )
    assert f"{kube.namespace}/backup-alice" not in bob.pod_reflector.pods  # servers only there

    lab = spawners.make("alice")
    await spawners.start(lab)
    assert (await pod_of(kube, lab))["spec"]["nodeName"] == "node-b"
    decision = lab._colocation_decision
    assert decision.node == "node-b" and decision.pinned_by == "holders"
    assert decision.holders == ["backup-alice"]


def _stop(pid: int) -> None:
    os.kill(pid, signal.SIGSTOP)


def _cont(pid: int) -> None:
    os.kill(pid, signal.SIGCONT)


async def test_an_api_freeze_with_a_known_holder_pins(kube, spawners, caplog):
    await kube.create_node("node-a", cpu="16")
    await kube.create_node("node-b", cpu="4")
    await kube.create_bound_claim("claim-alice")
    lab = spawners.make("alice", node_selector={"kubernetes.io/hostname": "node-b"})
    await spawners.start(lab)
    # 3 s, not less: on a loaded 2-core machine (CI runs this beside three other suites) a
    # check of 1 s ran out before its dry run was sent and took the safe side, which also
    # pins node-b but is not what this test is about
    app = spawners.make("alice", "app", colocation_check_timeout=3.0)
    manifest = await manifest_of(app)
    assert not (manifest.get("metadata") or {}).get("namespace")  # as KubeSpawner writes it
    view = app.colocation_view()
    await wait_until(lambda: view.live, timeout=20, what="the live view", interval=0.05)

    pid = kube.control_plane.pids["apiserver"]
    safe_before = metric("nebari_colocate_safe_side_total", mode="enforce")
    _stop(pid)
    try:
        # The view is warm: it decides without the API; the dry run cannot answer in time.
        with caplog.at_level(logging.WARNING):
            warm = await app.colocation_decide(manifest)
        assert (warm.verdict, warm.node) == ("colocate", "node-b")
        said = [r.getMessage() for r in caplog.records]
        assert any("dry run of pod" in m for m in said), said
        assert metric("nebari_colocate_safe_side_total", mode="enforce") == safe_before, said

        # A view that has not listed yet (a restarted hub) cannot help: the safe side must pin
        # from what is known (KubeSpawner's reflector cache) although the manifest has no
        # namespace.
        await ClusterView.stop_all(kube.namespace)
        cold = await app.colocation_decide(manifest)
    finally:
        _cont(pid)
    assert metric("nebari_colocate_safe_side_total", mode="enforce") == safe_before + 1
    assert (cold.verdict, cold.node, cold.verified) == ("colocate", "node-b", False)
    assert cold.holders == [lab.pod_name]


class Proxy:
    """A TCP proxy on 127.0.0.1 to the kube-apiserver that can drop every connection and
    refuse new ones (a broken network path, as the hub sees an API restart)."""

    def __init__(self, target_port: int):
        self.target_port = target_port
        self.broken = False
        self.port = 0
        self._server: asyncio.AbstractServer | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _pipe(self, reader, writer) -> None:
        with contextlib.suppress(Exception):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        with contextlib.suppress(Exception):
            writer.close()

    async def _handle(self, reader, writer) -> None:
        if self.broken:
            writer.close()
            return
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self._writers |= {writer, up_writer}
        try:
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        finally:
            self._writers -= {writer, up_writer}

    def break_(self) -> None:
        self.broken = True
        for writer in list(self._writers):
            with contextlib.suppress(Exception):
                writer.transport.abort()

    def heal(self) -> None:
        self.broken = False

    async def stop(self) -> None:
        self.break_()
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()


def kubeconfig_through(kubeconfig: str, port: int, path) -> str:
    config = yaml.safe_load(Path(kubeconfig).read_text())
    for cluster in config["clusters"]:
        cluster["cluster"]["server"] = f"https://127.0.0.1:{port}"
    path.write_text(yaml.safe_dump(config))
    return str(path)


async def test_a_view_whose_watch_broke_is_not_trusted_and_lists_again(
    kube, spawners, tmp_path, caplog
):
    from urllib.parse import urlparse

    await kube.create_node("node-a", cpu="16")
    await kube.create_node("node-b", cpu="4")
    await kube.create_bound_claim("claim-alice")
    proxy = Proxy(urlparse(kube.control_plane.server).port)
    await proxy.start()
    try:
        await spawners.use_credentials(
            kubeconfig_through(kube.kubeconfig, proxy.port, tmp_path / "kubeconfig")
        )
        lab = spawners.make("alice", node_selector={"kubernetes.io/hostname": "node-b"})
        await spawners.start(lab)
        app = spawners.make("alice", "app", colocation_check_timeout=2.0)
        manifest = await manifest_of(app)
        view = app.colocation_view()
        await wait_until(lambda: view.live, timeout=20, what="the live view", interval=0.05)
        resyncs = metric("nebari_colocate_view_resyncs_total", collection=view.pods.name)
        fallbacks = metric("nebari_colocate_view_fallbacks_total")

        proxy.break_()
        await wait_until(
            lambda: not view.live,
            timeout=20,
            what="the view noticing its broken watch",
            interval=0.05,
        )
        assert metric("nebari_colocate_view_live", collection=view.pods.name) == 0
        # Meanwhile the lab goes away (the view cannot see it).
        await kube.core.delete_namespaced_pod(lab.pod_name, kube.namespace, grace_period_seconds=0)
        with caplog.at_level(logging.WARNING):
            broken = await app.colocation_decide(manifest)
        assert metric("nebari_colocate_view_fallbacks_total") == fallbacks + 1
        assert any("is not live" in r.getMessage() for r in caplog.records)
        # Not trusted: direct reads fail too, so the safe side (pinned to the last known
        # holder, never skipped).
        assert broken.verified is False and broken.verdict == "colocate"

        proxy.heal()
        await wait_until(
            lambda: view.live, timeout=30, what="the view listing again", interval=0.05
        )
        assert metric("nebari_colocate_view_resyncs_total", collection=view.pods.name) > resyncs
        healed = await app.colocation_decide(manifest)
        # Listed again: the lab deleted while the watch was down is gone from the view.
        assert (healed.verdict, healed.node, healed.holders) == ("colocate", None, [])
        assert healed.verified is True
    finally:
        await proxy.stop()


@contextlib.asynccontextmanager
async def runtime_class_with_overhead(kube, cpu: str):
    """A RuntimeClass ``kata-<namespace>`` whose pods carry ``cpu`` of fixed overhead (added by
    admission, as kube-apiserver's RuntimeClass plugin does); its name, deleted afterwards."""
    from kubernetes_asyncio import client

    node_api = client.NodeV1Api(kube.api_client)
    name = f"kata-{kube.namespace}"
    await node_api.create_runtime_class(
        {"metadata": {"name": name}, "handler": "kata", "overhead": {"podFixed": {"cpu": cpu}}}
    )
    try:
        yield name
    finally:
        await node_api.delete_runtime_class(name)


async def test_a_runtime_class_with_overhead_is_judged_as_the_scheduler_judges_it(kube, spawners):
    await kube.create_node("node-a", cpu="2")
    await kube.create_node("node-b", cpu="8")
    await kube.create_bound_claim("claim-alice")
    async with runtime_class_with_overhead(kube, cpu="1") as name:
        lab = spawners.make(
            "alice", node_selector={"kubernetes.io/hostname": "node-a"}, cpu_guarantee=0.5
        )
        await spawners.start(lab)
        # As written: 0.5 + 0.75 = 1.25 of 2 CPUs fits.  As admitted: + 1 CPU of overhead.
        app = spawners.make(
            "alice", "app", cpu_guarantee=0.75, extra_pod_config={"runtimeClassName": name}
        )
        with pytest.raises(ColocationRefused) as refused:
            await spawners.start(app)
        assert refused.value.decision.reasons == ["insufficient:cpu"]
        assert refused.value.decision.node == "node-a"

        # The scheduler, given the same pod pinned there, says the same.
        manifest = await manifest_of(app)
        manifest["metadata"]["name"] = "scheduler-judges"
        manifest["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "node-a"}
        await kube.core.create_namespaced_pod(kube.namespace, manifest)
        message = await kube.wait_for_failed_scheduling("scheduler-judges")
        assert "Insufficient cpu" in message
        await kube.core.delete_namespaced_pod(
            "scheduler-judges", kube.namespace, grace_period_seconds=0
        )


async def test_pinned_checks_of_one_shape_at_once_share_one_dry_run_and_judge_its_overhead(
    kube, spawners
):
    """Two users' apps of one profile, checked at once: one dry run (the other check waits for
    it, then takes its admitted fields), and each is judged with the RuntimeClass's overhead;
    the refusal taken on the shared fields is judged again on a dry run of its own (a model is
    never the only ground of a refusal)."""
    from nebari_colocate.informer import HubWatches

    users = ("alice", "bob")
    for user in users:
        await kube.create_node(f"node-{user}", cpu="2")
        await kube.create_bound_claim(f"claim-{user}")
    async with runtime_class_with_overhead(kube, cpu="1") as name:
        for user in users:
            lab = spawners.make(
                user, node_selector={"kubernetes.io/hostname": f"node-{user}"}, cpu_guarantee=0.5
            )
            await spawners.start(lab)
        apps = [
            spawners.make(u, "app", cpu_guarantee=0.75, extra_pod_config={"runtimeClassName": name})
            for u in users
        ]
        admission = HubWatches.of_running_loop(apps[0].api.api_client).admission
        made, reused = admission.made, admission.reused
        outcomes = await asyncio.gather(*(spawners.start(a) for a in apps), return_exceptions=True)
        for user, outcome in zip(users, outcomes, strict=True):
            assert isinstance(outcome, ColocationRefused), (user, outcome)
            # as written 0.5 + 0.75 of 2 CPUs fits; with the overhead it does not
            assert outcome.decision.reasons == ["insufficient:cpu"], user
            assert outcome.decision.node == f"node-{user}"
        assert (admission.made - made, admission.reused - reused) == (2, 1)
        # A third check of the shape, later, takes the kept fields, and confirms the refusal.
        again = spawners.make(
            "alice", "app", cpu_guarantee=0.75, extra_pod_config={"runtimeClassName": name}
        )
        with pytest.raises(ColocationRefused) as refused:
            await spawners.start(again)
        assert refused.value.decision.reasons == ["insufficient:cpu"]
        assert (admission.made - made, admission.reused - reused) == (3, 2)


async def test_a_first_servers_created_pod_teaches_its_shape_so_the_next_makes_no_dry_run(
    kube, spawners
):
    """A user's first server (an RWO home, not pinned, no dry run): the pod kube-apiserver
    stored, with its RuntimeClass's overhead, teaches the profile's shape; the user's app of that
    profile, pinned next to it, is judged with the overhead at no dry run, and its refusal is
    confirmed by one dry run of its own before it is told."""
    from nebari_colocate.informer import HubWatches

    await kube.create_node("node-a", cpu="2")
    await kube.create_bound_claim("claim-alice")
    async with runtime_class_with_overhead(kube, cpu="1") as name:
        profile = {"cpu_guarantee": 0.75, "extra_pod_config": {"runtimeClassName": name}}
        lab = spawners.make("alice", **profile)
        admission = HubWatches.of_running_loop(lab.api.api_client).admission
        made, reused, learned = admission.made, admission.reused, admission.learned
        await spawners.start(lab)
        assert lab.colocation_timings["dry_runs_made"] == 0
        await wait_until(
            lambda: admission.learned == learned + 1, timeout=20, what="the shape learnt"
        )
        app = spawners.make("alice", "app", **profile)
        with pytest.raises(ColocationRefused) as refused:
            await spawners.start(app)
        decision = refused.value.decision
        # as written 0.75 + 0.75 of 2 CPUs fits; with the overhead (1 CPU each) it does not
        assert (decision.node, decision.reasons) == ("node-a", ["insufficient:cpu"])
        assert app.colocation_timings["dry_runs_made"] == 1
        assert (admission.made - made, admission.reused - reused) == (1, 1)


async def test_a_holder_on_a_deleted_node_is_refused_as_node_not_found(kube, spawners):
    from tests.support import helpers

    await kube.create_node("node-a", cpu="16")
    await kube.create_node("spot-1", cpu="16")
    await kube.create_bound_claim("claim-alice")
    # A pod of alice's left on a spot node that was reclaimed (no pod GC runs here).
    lab = spawners.make("alice", node_selector={"kubernetes.io/hostname": "spot-1"})
    await spawners.start(lab)
    view = lab.colocation_view()
    await wait_until(lambda: view.live, timeout=20, what="the live view", interval=0.05)
    await helpers.delete_nodes(kube.api_client, ["spot-1"])
    kube.nodes.remove("spot-1")
    await wait_until(
        lambda: "spot-1" not in view.nodes.items,
        timeout=20,
        what="the node's deletion",
        interval=0.05,
    )

    app = spawners.make("alice", "app")
    with pytest.raises(ColocationRefused) as refused:
        await spawners.start(app)
    decision = refused.value.decision
    assert (decision.node, decision.reasons) == ("spot-1", ["node-not-found"])
    message = refused.value.jupyterhub_message
    assert "no longer exists" in message and "administrator" in message
    assert "stop your default server" not in message


async def _other_namespace(kube, suffix: str) -> str:
    from kubernetes_asyncio import client

    namespace = f"{kube.namespace}-{suffix}"
    await kube.core.create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace))
    )
    return namespace


async def _drop_namespace(kube, namespace: str) -> None:
    from tests.support import helpers
    from tests.support.spawning import stop_reflectors

    await stop_reflectors(namespace)
    await helpers.cleanup(kube.api_client, namespace)
    await helpers.delete_namespace(kube.api_client, namespace)


async def test_the_same_disk_held_in_another_namespace_through_a_second_pv_pins(kube, spawners):
    from tests.support import helpers

    await kube.create_node("node-a", cpu="16")  # the scheduler alone would choose node-a
    await kube.create_node("node-b", cpu="4")
    _, home = await kube.create_bound_claim("claim-alice")
    backups = await _other_namespace(kube, "backups")
    try:
        # A second PV of alice's disk (same CSI driver and volume handle), bound to a claim of
        # another namespace, mounted there by a backup pod on node-b.
        second = {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {
                "name": f"pv2-{kube.namespace}",
                "labels": {helpers.LABEL_NAMESPACE: backups},  # the cleanup deletes it
            },
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": home["spec"]["storageClassName"],
                "volumeMode": "Filesystem",
                "csi": dict(home["spec"]["csi"]),
                "claimRef": {"namespace": backups, "name": "alice-home"},
            },
        }
        await kube.core.create_persistent_volume(second)
        await kube.core.create_namespaced_persistent_volume_claim(
            backups,
            {
                "metadata": {"name": "alice-home"},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "1Gi"}},
                    "storageClassName": home["spec"]["storageClassName"],
                    "volumeName": second["metadata"]["name"],
                },
            },
        )
        await helpers.wait_for_claim_bound(kube.api_client, backups, "alice-home")
        body = builders.kube_pod(
            "backup-alice",
            node_name="node-b",
            containers=[builders.container("backup", image="restic/restic")],
            claims=["alice-home"],
        )
        await kube.core.create_namespaced_pod(backups, body)

        lab = spawners.make("alice")
        await spawners.start(lab)
        assert (await pod_of(kube, lab))["spec"]["nodeName"] == "node-b"
        decision = lab._colocation_decision
        assert (decision.node, decision.pinned_by) == ("node-b", "holders")
        assert decision.holders == ["backup-alice"]
    finally:
        await spawners.stop_all()
        await _drop_namespace(kube, backups)


async def test_servers_in_many_namespaces_share_one_set_of_cluster_wide_watches(kube, spawners):
    from tests.support import helpers

    await kube.create_node("node-a", cpu="16")
    users = ["alice", "bob", "carol"]
    namespaces = {}
    for user in users:
        namespaces[user] = await _other_namespace(kube, user)
        await helpers.create_bound_claim(kube.api_client, namespaces[user], f"claim-{user}")
    per_user = {
        "enable_user_namespaces": True,
        "user_namespace_template": f"{kube.namespace}-{{username}}",
    }
    try:
        servers = [spawners.make(user, **per_user) for user in users]
        for server in servers:
            await spawners.start(server)
        views = [server.colocation_view() for server in servers]
        assert [v.namespace for v in views] == [namespaces[u] for u in users]

        # One hub, one set of cluster-wide watches: not one per namespace.
        assert len(ClusterView.hubs()) == 1
        hub = views[0].hub
        assert all(v.hub is hub for v in views)
        watching = [c.name for c in hub.collections() if c._task and not c._task.done()]
        # and priorityclasses, poddisruptionbudgets, the migration leases
        assert len(watching) == 8, watching
        per_namespace = [
            c.name for v in views for c in (v.watches.own_pods, v.watches.own_pvcs) if c._task
        ]
        assert per_namespace == []

        # Each namespace still decides on its own pods: alice's app joins her lab.
        app = spawners.make("alice", "app", **per_user)
        await spawners.start(app)
        lab_pod = await kube.core.read_namespaced_pod(servers[0].pod_name, namespaces["alice"])
        decision = app._colocation_decision
        assert decision.node == lab_pod.spec.node_name
        assert decision.holders == [servers[0].pod_name]
        assert len(ClusterView.hubs()) == 1
    finally:
        await spawners.stop_all()
        await ClusterView.stop_all()
        for namespace in namespaces.values():
            await _drop_namespace(kube, namespace)


async def test_unpinned_checks_at_once_on_a_quiet_view_share_one_confirming_list(
    kube, spawners, monkeypatch
):
    # A class at nine o'clock: the hub's watches were quiet, every first server is unpinned and
    # confirmed by a LIST; one LIST (of pods, and of VolumeAttachments) serves them all.
    from nebari_colocate import view as view_module
    from nebari_colocate.informer import NamespaceWatches
    from tests.support import helpers

    await kube.create_node("node-a", cpu="16")
    users = [f"user{i}" for i in range(5)]
    for user in users:
        await helpers.create_bound_claim(kube.api_client, kube.namespace, f"claim-{user}")
    servers = [spawners.make(user) for user in users]
    view = servers[0].colocation_view()
    view.start()
    assert await view.wait_live(10)
    monkeypatch.setattr(NamespaceWatches, "fresh_seconds", 0.0)  # quiet: every check confirms
    assert not view.fresh()
    pods = [await manifest_of(server) for server in servers]

    decisions = await asyncio.gather(
        *(server.colocation_decide(pod) for server, pod in zip(servers, pods, strict=True))
    )

    assert [(d.verdict, d.node) for d in decisions] == [("colocate", None)] * len(users)
    assert view_module._POD_LISTS[view.watches].sent == 1
    assert view_module._ATTACHMENT_LISTS[view.hub].sent == 1


async def test_an_unpinned_check_in_a_spawn_sends_its_confirmation_without_yielding(
    kube, spawners, monkeypatch
):
    # In a burst every yield waits behind all the other spawns' work: a check from memory
    # makes none; its confirming LIST is sent and awaited later, in get_pod_manifest.
    from nebari_colocate.informer import NamespaceWatches
    from tests.support import helpers

    await kube.create_node("node-a", cpu="16")
    await helpers.create_bound_claim(kube.api_client, kube.namespace, "claim-alice")
    server = spawners.make("alice")
    view = server.colocation_view()
    view.start()
    assert await view.wait_live(10)
    monkeypatch.setattr(NamespaceWatches, "fresh_seconds", 1e9)  # fresh: no attachments LIST
    pod = await manifest_of(server)
    others = []
    asyncio.get_running_loop().call_soon(others.append, "another spawn's step")

    decision = await server.colocation_decide(pod, admit_later=True)

    assert (decision.verdict, decision.node) == ("colocate", None)
    assert others == []
    late = server._late_check
    assert late is not None  # the confirmation, sent
    settled = await server._settle_check(late)
    server._late_check = None
    assert (settled.verdict, settled.node) == ("colocate", None)
