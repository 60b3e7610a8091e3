"""A pod watch that went silent (a dropped NAT or load-balancer flow: open, no error, no byte)
hides nothing a decision or a poll acts on, whatever how long ago its last event came.

The fault proxy holds the live view's cluster-wide watches open and silent; everything else
(the LISTs and reads by name a check or a poll makes) goes through.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.support import builders
from tests.support.waiting import wait_until

from .test_faults import VIEW_WATCHES, one_user_on_one_node, pinned_node

pytestmark = pytest.mark.faults

#: KubeSpawner's own pod reflector ends its watch and lists every server pod every 10 s; a poll
#: after a pod was deleted behind the hub's back reports it stopped within that, and one more
#: second for the poll's own turn
STOCK_RELIST_SECONDS = 10.0


async def test_a_watch_silent_for_two_seconds_does_not_hide_a_new_holder(hub):
    """The view's last event came 2 s before the check (fresh by the watch's own clock), but
    the watch went silent meanwhile and never brought the backup Job's pod that holds alice's
    home on node 1: the lab is still pinned to node 1."""
    node = await one_user_on_one_node(hub)
    await hub.create_node(f"{hub.namespace}-n2", cpu="32")  # the scheduler alone would choose it
    await hub.create_bound_claim("claim-bob")
    bob = hub.make("bob")
    assert (await hub.spawn(bob)).started
    view = bob.colocation_view()
    assert await view.wait_live(30)

    # a last event the view applies, then silence
    noise = builders.kube_pod("noise", node_name=f"{hub.namespace}-n2")
    await hub.core.create_namespaced_pod(hub.namespace, noise)
    await wait_until(lambda: view.has_pod(hub.namespace, "noise"), timeout=10, what="the noise pod")
    silent_since = time.monotonic()
    hub.proxy.blackhole = lambda path: path in VIEW_WATCHES
    backup = builders.kube_pod(
        "backup-alice",
        node_name=node,
        labels={"job-name": "backup"},
        containers=[builders.container("backup", image="restic/restic")],
        claims=["claim-alice"],
    )
    await hub.core.create_namespaced_pod(hub.namespace, backup)  # around the proxy
    try:
        await asyncio.sleep(max(0.0, silent_since + 2.0 - time.monotonic()))
        # the pod watch looks fresh (its last event within the old 3 s rule's bound)
        assert view.live and view.pods.quiet_seconds() < 3.0, view.pods.quiet_seconds()
        assert not view.has_pod(hub.namespace, "backup-alice")

        lab = hub.make("alice")
        outcome = await hub.spawn(lab)
        assert outcome.started, outcome.error
        decision = lab._colocation_decision
        assert (decision.node, decision.holders) == (node, ["backup-alice"])
        assert await pinned_node(hub, lab) == node
    finally:
        hub.proxy.blackhole = None
        for name in ("backup-alice", "noise"):
            await hub.core.delete_namespaced_pod(name, hub.namespace, grace_period_seconds=0)


async def test_poll_reports_a_server_deleted_behind_the_hubs_back_on_a_silent_watch(hub):
    """alice's lab runs; the view's pod watch goes silent, and the lab's pod is deleted around
    the hub (an eviction, a drain): ``poll()`` says it stopped within the time KubeSpawner's own
    reflector would, and said running before."""
    await one_user_on_one_node(hub)
    lab = hub.make("alice")
    assert (await hub.spawn(lab)).started
    assert await lab.poll() is None

    hub.proxy.blackhole = lambda path: path in VIEW_WATCHES
    try:
        deleted = time.monotonic()
        await hub.core.delete_namespaced_pod(lab.pod_name, hub.namespace, grace_period_seconds=0)
        await wait_until(
            lab.poll,
            until=lambda status: status is not None,
            timeout=3 * STOCK_RELIST_SECONDS,
            what="poll() to say the lab stopped",
            interval=1.0,
        )
        seconds = time.monotonic() - deleted
        assert seconds <= STOCK_RELIST_SECONDS + 1.0, seconds
        print(f"poll() said stopped {seconds:.1f} s after the pod was deleted")
        view = lab.colocation_view()
        assert view.has_pod(hub.namespace, lab.pod_name)  # the watch is still silent
    finally:
        hub.proxy.blackhole = None


async def test_poll_of_a_hung_api_answers_from_the_store_within_one_requests_time(hub):
    """The API server is frozen (SIGSTOP) and the view's pod watch quiet for 5 s: ``poll()``
    tries its read by name for one request's time (``k8s_api_request_timeout``, 3 s here), then
    answers from the store as KubeSpawner's own poll would: running."""
    await one_user_on_one_node(hub)
    lab = hub.make("alice")
    assert (await hub.spawn(lab)).started
    view = lab.colocation_view()
    hub.plane.pause("apiserver")
    try:
        await wait_until(
            lambda: view.pods.quiet_seconds() >= 5.5, timeout=20, what="a quiet pod watch"
        )
        began = time.monotonic()
        status = await lab.poll()
        seconds = time.monotonic() - began
    finally:
        hub.plane.resume("apiserver")
    assert status is None
    assert seconds <= lab.k8s_api_request_timeout + 1.0, seconds
