"""The way out and the move off a GPU node on a quiet watch: nothing half done
(docs/decisions.md, "The way out").

With the live view's watches of pods and VolumeAttachments silent on a dead flow (the fault
proxy keeps them open and carries nothing), the way out stops the server that blocks, waits
for the home's release and starts the server asked for: the wait reads the stopped pod and the
attachments by name while the view is not fresh, as the stop itself does, instead of waiting on
a view that will show the stopped pod until its watch is listed again.  The real
kube-controller-manager attaches and detaches the volume; kwok plays the kubelets.
"""

from __future__ import annotations

import time

import pytest

from nebari_colocate.handlers import move_off_premium, take_way_out
from nebari_colocate.objects import csi_attachment_name
from tests.support import helpers
from tests.support.waiting import wait_until

from .test_faults import VIEW_WATCHES

pytestmark = pytest.mark.faults

#: what the way out may wait for the release here: far below the view's own relist of a quiet
#: watch (``colocation_watch_stale_seconds``), so only a read by name can see the release
RELEASE_SECONDS = 25


async def attached_nodes(hub, claim: str) -> set[str]:
    pvc = await hub.core.read_namespaced_persistent_volume_claim(claim, hub.namespace)
    return {
        a["spec"]["nodeName"]
        for a in await helpers.list_volume_attachments(hub.api_client, pvc.spec.volume_name)
        if (a.get("status") or {}).get("attached")
    }


async def test_the_way_out_on_a_silent_watch_stops_the_app_sees_the_release_and_starts_the_lab(
    hub,
):
    small, big = f"{hub.namespace}-n1", f"{hub.namespace}-n2"
    await hub.create_node(small, cpu="2")
    await hub.create_node(big, cpu="32")
    await hub.create_bound_claim("claim-alice")
    app = hub.make("alice", "app", node_selector={"kubernetes.io/hostname": small}, cpu_guarantee=1)
    assert (await hub.spawn(app)).started
    await helpers.wait_for_running(hub.api_client, hub.namespace, app.pod_name)

    await wait_until(
        lambda: attached_nodes(hub, "claim-alice"),
        until=lambda nodes: nodes == {small},
        timeout=30,
        what=f"claim-alice attached to {small}",
    )
    # the name the wait reads it by is the attach/detach controller's own
    pvc = await hub.core.read_namespaced_persistent_volume_claim("claim-alice", hub.namespace)
    pv = await hub.core.read_persistent_volume(pvc.spec.volume_name)
    (attachment,) = await helpers.list_volume_attachments(hub.api_client, pv.metadata.name)
    expected = csi_attachment_name(hub.api_client.sanitize_for_serialization(pv), small)
    assert attachment["metadata"]["name"] == expected

    lab = hub.make(
        "alice",
        cpu_guarantee=4,
        way_out_release_timeout=RELEASE_SECONDS,
        colocation_check_timeout=5.0,
    )
    refused = await hub.spawn(lab)
    assert not refused.started
    assert refused.error.decision.reasons == ["insufficient:cpu"]
    assert lab.colocation_failure.way_out_json() == {"stop": ["app"], "start": ""}
    view = lab.colocation_view()
    assert view.live and view.has_pod(hub.namespace, app.pod_name)

    hub.proxy.blackhole = lambda path: path in VIEW_WATCHES
    stopped: list[str] = []
    try:
        await wait_until(  # till the view's last event is older than "fresh"
            lambda: not view.fresh(), timeout=30, what="the live view no longer fresh", interval=0.1
        )

        async def stop_server(name: str) -> None:
            stopped.append(name)
            await app.stop(now=True)

        async def start_server(options: dict) -> None:
            outcome = await hub.spawn(lab)
            assert outcome.started, outcome.error

        clicked = time.monotonic()
        await take_way_out(
            lab,
            ["app"],
            is_running=lambda name: name == "app" and name not in stopped,
            stop_server=stop_server,
            start_server=start_server,
            words={"start": "", "stop": ("app",)},
        )
        took = time.monotonic() - clicked
        print(f"way out on a silent watch: click to the lab running {took:.1f} s")
        assert stopped == ["app"]
        pods = await hub.pods()
        assert app.pod_name not in pods
        assert pods[lab.pod_name]["spec"]["nodeName"] == big
        assert small not in await attached_nodes(hub, "claim-alice")
        await helpers.assert_no_split_claims(hub.api_client, hub.namespace)
    finally:
        hub.proxy.blackhole = None


async def test_the_move_off_a_gpu_node_on_a_silent_watch_sees_the_release_and_restarts_the_app(
    hub,
):
    gpu, cpu = f"{hub.namespace}-gpu", f"{hub.namespace}-cpu"
    await hub.create_node(gpu, cpu="32", extra={"nvidia.com/gpu": "1"})
    await hub.create_node(cpu, cpu="8")
    await hub.create_bound_claim("claim-alice")
    lab = hub.make(
        "alice",
        node_selector={"kubernetes.io/hostname": gpu},
        extra_resource_limits={"nvidia.com/gpu": "1"},
    )
    assert (await hub.spawn(lab)).started
    app = hub.make("alice", "app", cpu_guarantee=0.5, way_out_release_timeout=RELEASE_SECONDS)
    assert (await hub.spawn(app)).started  # beside the lab (premium_node_policy warn)
    await lab.stop(now=True)
    rides = await wait_until(
        lambda: app.premium_rides(), timeout=30, what="the app's ride on the GPU node"
    )
    assert [(r.node, r.servers) for r in rides] == [(gpu, ("app",))]
    await wait_until(
        lambda: attached_nodes(hub, "claim-alice"),
        until=lambda nodes: nodes == {gpu},
        timeout=30,
        what=f"claim-alice attached to {gpu} only",
    )
    view = app.colocation_view()

    hub.proxy.blackhole = lambda path: path in VIEW_WATCHES
    stopped: list[str] = []
    try:
        await wait_until(  # till the view's last event is older than "fresh"
            lambda: not view.fresh(), timeout=30, what="the live view no longer fresh", interval=0.1
        )

        async def stop_server(name: str) -> None:
            stopped.append(name)
            await app.stop(now=True)

        async def start_server(name: str, options: dict) -> None:
            outcome = await hub.spawn(app)
            assert outcome.started, outcome.error

        clicked = time.monotonic()
        await move_off_premium(
            app,
            gpu,
            ["app"],
            spawner_of={"app": app}.__getitem__,
            stop_server=stop_server,
            start_server=start_server,
            words={"servers": ("app",)},
        )
        took = time.monotonic() - clicked
        print(f"move on a silent watch: click to the app running off the GPU node {took:.1f} s")
        assert stopped == ["app"]
        pods = await hub.pods()
        assert pods[app.pod_name]["spec"]["nodeName"] == cpu
        assert gpu not in await attached_nodes(hub, "claim-alice")
        await helpers.assert_no_split_claims(hub.api_client, hub.namespace)
    finally:
        hub.proxy.blackhole = None
