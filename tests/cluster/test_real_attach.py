"""Failure mode 3 (Multi-Attach) on the real attach/detach controller, stock KubeSpawner against
ColocatingKubeSpawner, side by side.

The volumes are static CSI PVs bound by kube-controller-manager's PV controller; its attach/detach
controller creates the VolumeAttachments of running pods (kwok acknowledges them, as a CSI
external-attacher would) and writes the FailedAttachVolume events. Nothing here writes an event.
Two nodes of 4 CPUs and servers that ask for 2 (``cpu_guarantee``): kube-scheduler's scoring puts
a second pod on the emptier node, as it does in a cluster.
"""

from __future__ import annotations

import asyncio

import pytest
from kubespawner import KubeSpawner

from nebari_colocate.config import EVENT_POLL_INTERVAL
from nebari_colocate.spawner import ColocationRefused
from nebari_colocate.wayout import WayOut
from tests.support import helpers
from tests.support.waiting import wait_until

from .test_spawner_cluster import grant_z2jh_hub_role, pod_of

SERVER = {"cpu_guarantee": 2, "start_timeout": 10}


async def two_nodes_and_a_home(kube, storage_class=helpers.IMMEDIATE_CLASS) -> None:
    await kube.create_node("node-a", cpu="4")
    await kube.create_node("node-b", cpu="4")
    if storage_class == helpers.WFFC_CLASS:
        await kube.create_claim("claim-alice", storage_class=storage_class)
    else:
        await kube.create_bound_claim("claim-alice", storage_class=storage_class)


async def attach_events(kube, pod_name: str, timeout: float = 30) -> list[str]:
    """The FailedAttachVolume messages about the pod, once there is at least one."""
    selector = f"involvedObject.name={pod_name},reason=FailedAttachVolume"
    events = await wait_until(
        lambda: kube.core.list_namespaced_event(kube.namespace, field_selector=selector),
        until=lambda events: bool(events.items),
        timeout=timeout,
        what=f"a FailedAttachVolume event for {pod_name}",
        seen=lambda events: "no such event",
        interval=0.1,
    )
    return [e.message for e in events.items]


async def no_attach_failures(kube) -> bool:
    events = await kube.core.list_namespaced_event(
        kube.namespace, field_selector="reason=FailedAttachVolume"
    )
    return not events.items


def home_pv(kube) -> str:
    return helpers._short_name("pv", kube.namespace, "claim-alice")


async def assert_stock_split(kube, spawners, lab, app) -> tuple[str, str]:
    """Start lab then app with stock KubeSpawner; the app lands on the other node, where the
    real controller refuses to attach the home; return (lab node, app node)."""
    await spawners.start(lab)
    lab_node = (await pod_of(kube, lab))["spec"]["nodeName"]
    start = asyncio.ensure_future(spawners.start(app))
    [message] = await attach_events(kube, app.pod_name)
    app_pod = await pod_of(kube, app)
    app_node = app_pod["spec"]["nodeName"]
    assert app_node != lab_node
    assert app_pod["status"]["phase"] == "Pending"  # its kubelet waits for the volume
    # kube-controller-manager v1.37.2's wording (kubernetes PR #138837).
    assert message == (
        f'Waiting for detach for volume "{home_pv(kube)}" Volume is already used by pod(s) '
        f"{lab.pod_name}"
    )
    print(f"real event on {app.pod_name}: {message}")
    # Stock KubeSpawner has nothing to end the spawn with: it waits out start_timeout.
    with pytest.raises(asyncio.TimeoutError):  # not builtin TimeoutError on Python 3.10
        await start
    [va] = await kube.volume_attachments(home_pv(kube))
    assert (va["spec"]["nodeName"], va["status"]["attached"]) == (lab_node, True)
    with pytest.raises(AssertionError, match="claim-alice"):
        await kube.assert_no_split_claims()
    return lab_node, app_node


async def test_stock_kubespawner_splits_a_users_servers_and_the_controller_reports_it(
    kube, spawners
):
    kube.check_split_claims = False  # the break this test shows
    await two_nodes_and_a_home(kube)
    lab = spawners.make("alice", cls=KubeSpawner, **SERVER)
    app = spawners.make("alice", "app", cls=KubeSpawner, **SERVER)
    await assert_stock_split(kube, spawners, lab, app)


async def test_ours_puts_the_second_server_beside_the_first_and_the_volume_attaches_once(
    kube, spawners
):
    await two_nodes_and_a_home(kube)
    lab = spawners.make("alice", **SERVER)
    app = spawners.make("alice", "app", **SERVER)
    await spawners.start(lab)
    await spawners.start(app)
    lab_node = (await pod_of(kube, lab))["spec"]["nodeName"]
    assert (await pod_of(kube, app))["spec"]["nodeName"] == lab_node
    [va] = await kube.volume_attachments(home_pv(kube))
    assert (va["spec"]["nodeName"], va["status"]["attached"]) == (lab_node, True)
    assert await no_attach_failures(kube)


async def test_wait_for_first_consumer_places_only_the_first_server(kube, spawners):
    """The suggestion "use volumeBindingMode: WaitForFirstConsumer", tried: the class delays the
    binding until the first pod is scheduled, then the claim is bound and nothing ties the second
    pod to the first one's node (docs/failure-modes.md)."""
    kube.check_split_claims = False  # the break this test shows
    await two_nodes_and_a_home(kube, helpers.WFFC_CLASS)
    pvc = await kube.core.read_namespaced_persistent_volume_claim("claim-alice", kube.namespace)
    assert pvc.status.phase == "Pending"  # waiting for its first consumer
    lab = spawners.make("alice", cls=KubeSpawner, **SERVER)
    app = spawners.make("alice", "app", cls=KubeSpawner, **SERVER)
    await assert_stock_split(kube, spawners, lab, app)
    pvc = await kube.core.read_namespaced_persistent_volume_claim("claim-alice", kube.namespace)
    assert pvc.status.phase == "Bound"


async def test_ours_with_wait_for_first_consumer_colocates_too(kube, spawners):
    await two_nodes_and_a_home(kube, helpers.WFFC_CLASS)
    lab = spawners.make("alice", **SERVER)
    app = spawners.make("alice", "app", **SERVER)
    await spawners.start(lab)
    await spawners.start(app)
    assert (await pod_of(kube, app))["spec"]["nodeName"] == (await pod_of(kube, lab))["spec"][
        "nodeName"
    ]
    assert await no_attach_failures(kube)


async def test_fail_fast_ends_the_spawn_on_the_real_event_naming_the_users_server(kube, spawners):
    """A server of alice's started by stock KubeSpawner (a hub not yet switched over) takes her
    home on node-b between our decision and our pod: the controller's real event ends our spawn
    at once, naming that server."""
    await kube.create_node("node-a", cpu="4")
    await kube.create_node("node-b", cpu="4")
    await kube.create_bound_claim("claim-alice")
    other = spawners.make(
        "alice",
        "pandas-app",
        cls=KubeSpawner,
        node_selector={"kubernetes.io/hostname": "node-b"},
        cpu_guarantee=3.5,  # node-b has no room left for the lab
    )

    async def start_the_other_one_after_the_decision(spawner, pod):
        await spawners.start(other)
        return pod

    lab = spawners.make("alice", modify_pod_hook=start_the_other_one_after_the_decision)
    with pytest.raises(ColocationRefused) as refused:
        await spawners.start(lab)
    verdict = refused.value.event_verdict
    assert verdict.reason == "multi-attach"
    assert verdict.raw == (
        f'Waiting for detach for volume "{home_pv(kube)}" Volume is already used by pod(s) '
        f"{other.pod_name}"
    )
    assert verdict.holders == (other.pod_name,)
    text = refused.value.jupyterhub_message
    assert "still in use by 'pandas-app' on another machine. Stop it" in text
    assert refused.value.status_code < 500
    # Every pod holding the home is alice's own server: the way out stops it (words, JSON, the
    # button's form, and what the handler re-checks).
    assert verdict.way_out == WayOut(("pandas-app",), "")
    assert refused.value.way_out == {"stop": ["pandas-app"], "start": ""}
    assert "Details:" in text and "Stop it" not in text.split("Details:")[1]
    shown = refused.value.jupyterhub_html_message
    assert 'class="colocate-way-out-form"' in shown and 'name="stop" value="pandas-app"' in shown
    assert 'colocate/way-out/alice/"' in shown  # the hub's base URL, then the handler
    blockers = lab.colocation_failure.blockers
    assert blockers.servers == ("pandas-app",) and "claim-alice" in blockers.claims
    assert blockers.node == "node-b", blockers  # where the app holds the home
    pods = await kube.core.list_namespaced_pod(kube.namespace)
    assert lab.pod_name not in {p.metadata.name for p in pods.items}
    print(f"real event, used by: {verdict.raw}; way out blockers: {blockers}")


async def home_left_attached_to_node_b(kube) -> None:
    """alice's home attached to node-b, where no pod uses it any more but node-b's kubelet still
    reports it in use (volumesInUse), so the controller does not detach it; node-a is the node
    the scheduler prefers."""
    await kube.create_node("node-a", cpu="16")
    await kube.create_node("node-b", cpu="1")  # the scheduler alone prefers node-a
    await kube.create_bound_claim("claim-alice")
    # (A pod of the test's own: the spawners must not talk to the API before they get the
    # hub's credentials.)
    await kube.create_pod(
        "jupyter-alice--old",
        claims=["claim-alice"],
        node_selector={"kubernetes.io/hostname": "node-b"},
    )
    await kube.wait_for_running("jupyter-alice--old")
    node = await kube.core.read_node("node-b")
    in_use = [v.name for v in node.status.volumes_attached]
    await kube.core.patch_node_status("node-b", {"status": {"volumesInUse": in_use}})
    await kube.core.delete_namespaced_pod("jupyter-alice--old", kube.namespace)
    await wait_until(
        lambda: kube.core.list_namespaced_pod(kube.namespace),
        until=lambda pods: not pods.items,
        timeout=10,
        what="the old pod gone",
        seen=lambda pods: [p.metadata.name for p in pods.items],
    )


async def test_fail_fast_ends_the_spawn_when_a_volume_stays_attached_and_the_hub_cannot_see_it(
    kube, spawners
):
    """alice's server on node-b stopped, but node-b's kubelet still reports her volume in use
    (an unmount that hangs), so the controller does not detach it. A hub with only
    zero-to-jupyterhub's Role cannot read VolumeAttachments, so nothing pins the next server to
    node-b: the controller's other wording ("exclusively attached": no pod holds it, a detach
    under way) ends the spawn once that has lasted detach_grace_seconds (here 3)."""
    await home_left_attached_to_node_b(kube)

    await grant_z2jh_hub_role(kube, "hub")
    await spawners.use_credentials(kube.user_kubeconfig("hub"))
    lab = spawners.make("alice", detach_grace_seconds=3)
    with pytest.raises(ColocationRefused) as refused:
        await spawners.start(lab)
    verdict = refused.value.event_verdict
    assert verdict.reason == "multi-attach"
    assert verdict.raw == (
        f'Waiting for detach for volume "{home_pv(kube)}" Volume is already exclusively attached '
        "to one node, waiting on detach before it can be attached to another node"
    )
    assert "still attached to another node" in refused.value.jupyterhub_message
    [va] = await kube.volume_attachments(home_pv(kube))
    assert (va["spec"]["nodeName"], va["status"]["attached"]) == ("node-b", True)
    print(f"real event, exclusively attached: {verdict.raw}")


async def test_a_detach_that_ends_within_the_grace_lets_the_spawn_run(kube, spawners):
    """The same home left attached to node-b, but node-b's kubelet finishes its unmount a few
    seconds into the spawn (volumesInUse cleared): the controller detaches it and attaches it
    to node-a, and the spawn, which waited on "exclusively attached", runs there."""
    await home_left_attached_to_node_b(kube)
    await grant_z2jh_hub_role(kube, "hub")
    await spawners.use_credentials(kube.user_kubeconfig("hub"))
    lab = spawners.make("alice", detach_grace_seconds=60, start_timeout=60)
    start = asyncio.ensure_future(spawners.start(lab))
    texts = await attach_events(kube, lab.pod_name)
    assert any("exclusively attached" in t for t in texts), texts
    await asyncio.sleep(2 * EVENT_POLL_INTERVAL)  # the spawn has read the event
    assert not start.done(), "the spawn ended on a detach under way"
    await kube.core.patch_node_status("node-b", {"status": {"volumesInUse": []}})
    await start
    pod = await kube.core.read_namespaced_pod(lab.pod_name, kube.namespace)
    assert pod.spec.node_name == "node-a"
    assert pod.status.phase == "Running"
