"""Nebari's shared ReadWriteMany home against the real kube-apiserver: do no harm.

Nebari mounts one claim, ``jupyterhub-<namespace>-share``, in every user's pod (a ``subPath`` per
user), always ReadWriteMany, and its hub creates no claims (``storage.type: static``).  A cluster
is needed because what is at stake is what the check reads from the API (the live view's watches,
the direct reads) and what it does when the API stops answering (SIGSTOP to the kube-apiserver
the fixture started: a fault on loopback only).
"""

from __future__ import annotations

import logging
import os
import signal

import pytest
from traitlets.config import Config

from nebari_colocate.affinity import apply_decision
from nebari_colocate.spawner import ColocatingKubeSpawner
from nebari_colocate.view import ClusterView, DirectReader
from tests.support import builders
from tests.support.waiting import wait_until

from .test_view import manifest_of

#: Nebari's node groups: labelled by the provider (AWS here), every group but general tainted
GENERAL = {"dedicated": "general"}
GPU_GROUP = {"dedicated": "gpu-1x-t4"}
NEBARI_TAINT = {"key": "dedicated", "value": "nebari", "effect": "NoSchedule"}
GPU_PROFILE = {
    "node_selector": GPU_GROUP,
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "nebari"}],
    "extra_resource_limits": {"nvidia.com/gpu": "1"},
}
OTHER_USERS = ("bob", "carol", "dan", "erin", "frank", "grace", "heidi", "ivan")


def share_name(kube) -> str:
    return f"jupyterhub-{kube.namespace}-share"


def nebari_config(kube, mode: str | None = "ReadWriteMany") -> Config:
    """What Nebari's ``02-spawner.py`` and z2jh's static storage amount to for these tests: the
    shared claim mounted with a subPath per user, no claim created by the hub, and the
    library's ``mode`` (None: ``custom.storage-access-mode`` not set) with no storage class."""
    c = Config()
    c.KubeSpawner.storage_pvc_ensure = False
    c.KubeSpawner.volumes = [
        {"name": "home", "persistentVolumeClaim": {"claimName": share_name(kube)}}
    ]
    c.KubeSpawner.volume_mounts = [
        {"name": "home", "mountPath": "/home/jovyan", "subPath": "home/{username}"}
    ]
    if mode is not None:
        c.ColocatingKubeSpawner.storage_access_mode = mode
    return c


async def nebari_nodes(kube, general: int = 1) -> None:
    for i in range(general):
        await kube.create_node(f"general-{i + 1}", labels=GENERAL, cpu="16")
    await kube.create_node(
        "gpu-1", labels=GPU_GROUP, taints=[NEBARI_TAINT], cpu="8", extra={"nvidia.com/gpu": "1"}
    )


async def other_users_servers(kube, nodes: list[str], per_node: int = 4) -> list[str]:
    """Servers of other users mounting the shared claim, bound to ``nodes`` (round robin)."""
    names = []
    for i in range(per_node * len(nodes)):
        user = f"{OTHER_USERS[i % len(OTHER_USERS)]}{i}"
        body = builders.kube_pod(
            f"jupyter-{user}",
            node_name=nodes[i % len(nodes)],
            claims=[share_name(kube)],
            user=user,
        )
        await kube.core.create_namespaced_pod(kube.namespace, body)
        names.append(body["metadata"]["name"])
    return names


def no_colocation(manifest: dict) -> bool:
    affinity = manifest["spec"].get("affinity") or {}
    return "podAffinity" not in affinity and "nodeAffinity" not in affinity


async def test_the_safe_side_never_pins_a_gpu_lab_on_nebaris_shared_home(kube, spawners, caplog):
    await nebari_nodes(kube)
    await kube.create_bound_claim(share_name(kube), access_modes=("ReadWriteMany",))
    others = await other_users_servers(kube, ["general-1"])

    # One server of another user started through the library: its check reads the shared claim,
    # and what it read is remembered (its access modes never change).
    ColocatingKubeSpawner._known_claim_modes.forget()
    judy = spawners.make("judy", config=nebari_config(kube))
    await spawners.start(judy)
    assert judy._colocation_decision.verdict == "skip"
    reflector = judy.pod_reflector
    await wait_until(
        lambda: len(reflector.pods) >= len(others) + 1,
        timeout=20,
        what="the pod reflector",
        interval=0.05,
    )

    lab = spawners.make(
        "alice", config=nebari_config(kube), colocation_check_timeout=0.5, **GPU_PROFILE
    )
    manifest = await manifest_of(lab)
    pid = kube.control_plane.pids["apiserver"]
    os.kill(pid, signal.SIGSTOP)
    try:
        # A view that cannot be trusted (a restarted watch, a new hub loop) and an API that does
        # not answer: the safe side.  The claim is known to be ReadWriteMany: nothing to pin on.
        await ClusterView.stop_all(kube.namespace)
        with caplog.at_level(logging.INFO):
            known = await lab.colocation_decide(manifest)

        # Nothing remembered (the hub's first check): other users' servers hold the claim, so it
        # is taken to be shared and their node does not pin alice's lab; the log says so.
        ColocatingKubeSpawner._known_claim_modes.forget()
        await ClusterView.stop_all(kube.namespace)
        with caplog.at_level(logging.INFO):
            unknown = await lab.colocation_decide(manifest)
    finally:
        os.kill(pid, signal.SIGCONT)

    assert (known.verdict, known.node, known.verified) == ("skip", None, False)
    assert no_colocation(apply_decision(manifest, known, lab.colocation_label_key, "alice"))
    assert (unknown.verdict, unknown.node, unknown.holders) == ("skip", None, [])
    assert no_colocation(apply_decision(manifest, unknown, lab.colocation_label_key, "alice"))
    log = "\n".join(r.getMessage() for r in caplog.records)
    assert "taking the safe side" in log
    assert "claims known to be shared" in log
    assert "server(s) of other users hold it, so it is taken to be shared: nothing required" in log

    # The API back: alice's GPU lab starts on the GPU node, beside nobody.
    lab = spawners.make("alice", config=nebari_config(kube), **GPU_PROFILE)
    await spawners.start(lab)
    pod = kube.api_client.sanitize_for_serialization(
        await kube.core.read_namespaced_pod(lab.pod_name, kube.namespace)
    )
    assert pod["spec"]["nodeName"] == "gpu-1"
    assert no_colocation(pod)


@pytest.mark.parametrize(
    ("other_users", "assumed"),
    [
        pytest.param(0, "co-location with this user's servers preferred, not required", id="alone"),
        pytest.param(4, "so it is taken to be shared: nothing required", id="beside-others"),
    ],
)
async def test_the_safe_side_gives_a_gpu_lab_no_required_colocation_with_the_users_cpu_app(
    kube, spawners, caplog, other_users, assumed
):
    """Nebari with no ``storage-access-mode`` set (the library's default ReadWriteOnce), the
    hub's first check of the shared claim (nothing remembered, the API not answering): alice's
    GPU lab must still reach the GPU node, not be held to the node of her CPU app."""
    await nebari_nodes(kube)
    await kube.create_bound_claim(share_name(kube), access_modes=("ReadWriteMany",))
    await other_users_servers(kube, ["general-1"], per_node=other_users)
    app = spawners.make("alice", "app", config=nebari_config(kube, mode=None))
    await spawners.start(app)
    reflector = app.pod_reflector
    await wait_until(
        lambda: len(reflector.pods) >= other_users + 1,
        timeout=20,
        what="the pod reflector",
        interval=0.05,
    )

    lab = spawners.make(
        "alice", config=nebari_config(kube, mode=None), colocation_check_timeout=0.5, **GPU_PROFILE
    )
    manifest = await manifest_of(lab)
    pid = kube.control_plane.pids["apiserver"]
    ColocatingKubeSpawner._known_claim_modes.forget()
    os.kill(pid, signal.SIGSTOP)
    try:
        await ClusterView.stop_all(kube.namespace)
        with caplog.at_level(logging.INFO):
            decision = await lab.colocation_decide(manifest)
    finally:
        os.kill(pid, signal.SIGCONT)

    log = "\n".join(r.getMessage() for r in caplog.records)
    assert "taking the safe side" in log
    assert assumed in log
    assert decision.node is None
    placed = apply_decision(manifest, decision, lab.colocation_label_key, "alice")
    affinity = placed["spec"].get("affinity") or {}
    assert "nodeAffinity" not in affinity
    assert not (affinity.get("podAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )

    # The real scheduler places the lab so decided: on the GPU node, away from the CPU app.
    await kube.core.create_namespaced_pod(kube.namespace, placed)

    async def node_of_lab() -> str | None:
        pod = await kube.core.read_namespaced_pod(placed["metadata"]["name"], kube.namespace)
        return pod.spec.node_name

    assert await wait_until(node_of_lab, timeout=30, what="the lab bound", interval=0.1) == "gpu-1"
    app_pod = await kube.core.read_namespaced_pod(app.pod_name, kube.namespace)
    assert app_pod.spec.node_name == "general-1"


async def test_holders_of_a_shared_claim_are_not_gathered_only_those_of_exclusive_ones(
    kube, spawners
):
    await nebari_nodes(kube, general=3)
    await kube.create_bound_claim(share_name(kube), access_modes=("ReadWriteMany",))
    await kube.create_bound_claim("workspace-alice")  # a per-user ReadWriteOnce claim
    general = ["general-1", "general-2", "general-3"]
    others = await other_users_servers(kube, general)
    workspace = builders.kube_pod(
        "jupyter-alice--app", node_name="general-2", claims=["workspace-alice"], user="alice"
    )
    await kube.core.create_namespaced_pod(kube.namespace, workspace)

    share = share_name(kube)
    only_shared = builders.pod("jupyter-alice", namespace=None, claims=[share], user="alice")
    both = builders.pod(
        "jupyter-alice", namespace=None, claims=[share, "workspace-alice"], user="alice"
    )

    # Direct reads: no Node read and no per-node pod list for the shared claim's many holders.
    direct = await DirectReader(kube.api_client, kube.namespace).state_for(only_shared)
    assert direct.nodes == {}
    direct = await DirectReader(kube.api_client, kube.namespace).state_for(both)
    assert sorted(direct.nodes) == ["general-2"]

    # The live view: the shared claim's holders are not gathered at all.
    view = ClusterView.shared(kube.api_client, kube.namespace)
    view.start()
    await wait_until(lambda: view.live, timeout=20, what="the live view", interval=0.05)
    await wait_until(
        lambda: all(view.has_pod(kube.namespace, name) for name in others),
        timeout=20,
        what="the pods",
        interval=0.05,
    )
    live = await view.state_for(only_shared)
    assert live.pods_mounting(kube.namespace, share) == ()
    assert live.nodes == {}
    live = await view.state_for(both)
    # (general-2's own pods are gathered for its capacity, whatever they mount)
    assert sorted(live.nodes or {}) == ["general-2"]
    assert len(live.pods_mounting(kube.namespace, "workspace-alice")) == 1
    assert {p["spec"]["nodeName"] for p in live.pods_mounting(kube.namespace, share)} <= {
        "general-2"
    }
