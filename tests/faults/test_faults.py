"""Faults on the real control plane: the hub never crashes or stalls, and nothing is lost.

Each test injects one fault while real ColocatingKubeSpawners spawn (signals to the fault
plane's own processes, or the fault proxy between the spawners and the apiserver).  Every spawn
must end started, or with a reason a person can read (never a raw client exception); the
``hub`` fixture's teardown then checks the rest: no RWO claim on two nodes, no pod left once the
servers are stopped, no claim but the users' homes, every per-user lock released, the event loop
never stalled.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from nebari_colocate import faults
from nebari_colocate.messages import API_FAULTS
from nebari_colocate.shared_reflector import SharedPodReflector
from nebari_colocate.spawner import ColocatingKubeSpawner
from nebari_colocate.view import ClusterView
from tests.support import helpers
from tests.support.spawning import make_spawner
from tests.support.waiting import wait_until

pytestmark = pytest.mark.faults


def metric(name: str, **labels) -> float:
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value(name, labels) or 0.0


SAFE_SIDE = "nebari_colocate_safe_side_total"


async def one_user_on_one_node(hub, user: str = "alice") -> str:
    node = f"{hub.namespace}-n1"
    await hub.create_node(node)
    await hub.create_bound_claim(f"claim-{user}")
    return node


async def running_app(hub, node: str, user: str = "alice"):
    """A server of ``user`` already running on ``node`` before the fault (a holder of the RWO
    home that the pod reflector knows)."""
    app = hub.make(user, "app", node_selector={"kubernetes.io/hostname": node})
    outcome = await hub.spawn(app)
    assert outcome.started, outcome.error
    return app


async def pinned_node(hub, spawner) -> str:
    pods = await hub.pods()
    return pods[spawner.pod_name]["spec"].get("nodeName")


def safe_side_logged(caplog) -> bool:
    return any("taking the safe side" in r.getMessage() for r in caplog.records)


async def later(seconds: float, action, *args):
    await asyncio.sleep(seconds)
    await asyncio.to_thread(action, *args)


# --------------------------------------------------------------------------------------------------
# the apiserver frozen (SIGSTOP)


async def test_a_frozen_apiserver_past_the_check_timeout_takes_the_safe_side_then_starts(
    hub, caplog
):
    node = await one_user_on_one_node(hub)
    await running_app(hub, node)
    lab = hub.make("alice")
    before = metric(SAFE_SIDE, mode="enforce")
    # A hub whose live view has not listed yet (just restarted): the check must ask the API.
    # (A warm view answers from memory: tests/cluster/test_view.py.)
    await ClusterView.stop_all(hub.namespace)
    with caplog.at_level(logging.WARNING):
        hub.plane.pause("apiserver")
        thaw = asyncio.ensure_future(later(3.0, hub.plane.resume, "apiserver"))
        outcome = await hub.spawn(lab)
        await thaw
    assert outcome.started, outcome.error
    # The check gave up after 1 s; the pod reflector knew the app: pinned to its node.
    assert metric(SAFE_SIDE, mode="enforce") == before + 1
    assert safe_side_logged(caplog)
    assert await pinned_node(hub, lab) == node


async def test_a_freeze_past_the_retry_timeout_ends_the_spawn_in_words(hub, caplog):
    node = await one_user_on_one_node(hub)
    await running_app(hub, node)  # the hub's reflectors run, as they do in a hub
    lab = hub.make("alice", k8s_api_request_retry_timeout=4)
    before = metric("nebari_colocate_api_faults_total", fault="timeout")
    # A hub whose live view has not listed yet (just restarted): the check must ask the API.
    # (A warm view answers from memory: tests/cluster/test_view.py.)
    await ClusterView.stop_all(hub.namespace)
    with caplog.at_level(logging.WARNING):
        hub.plane.pause("apiserver")
        try:
            outcome = await hub.spawn(lab)
        finally:
            hub.plane.resume("apiserver")
    assert not outcome.started
    text = outcome.readable()
    assert "did not answer in time" in text and "try again" in text
    assert outcome.error.fault == "timeout"
    assert "Could not create PVC" in str(outcome.error.__cause__)  # although the PVC exists
    assert metric("nebari_colocate_api_faults_total", fault="timeout") == before + 1
    assert safe_side_logged(caplog)


async def test_a_pod_the_api_creates_after_the_spawn_gave_up_is_deleted(hub):
    """A create request that reached a stalled API server is carried out when it resumes."""
    await one_user_on_one_node(hub)
    lab = hub.make("alice", k8s_api_request_retry_timeout=4, k8s_api_request_timeout=2)
    hub.proxy.hold = lambda method, path: method == "POST" and path.endswith("/pods")
    outcome = await hub.spawn(lab)
    assert not outcome.started
    assert outcome.error.fault == "timeout", outcome.error
    assert "Could not create pod" in str(outcome.error.__cause__)
    outcome.readable()
    hub.proxy.release()  # the held creates now reach the apiserver: the pod appears
    await wait_until(
        hub.pods,
        until=lambda pods: lab.pod_name in pods,
        timeout=5,
        what="the held create to make the pod (else the test proves nothing)",
        seen=sorted,
        interval=0.1,
    )
    # The sweep deletes it (the teardown waits until no pod is left).


# --------------------------------------------------------------------------------------------------
# restarts


@pytest.mark.parametrize("component, down", [("apiserver", 2.0), ("etcd", 3.0)])
async def test_a_restart_mid_spawn_ends_started_or_in_words(hub, component, down, caplog):
    node = await one_user_on_one_node(hub)
    await running_app(hub, node)
    lab = hub.make("alice")
    with caplog.at_level(logging.WARNING):
        restart = asyncio.ensure_future(later(0.2, hub.plane.restart, component, down))
        outcome = await hub.spawn(lab)
        await restart
    if outcome.started:
        assert await pinned_node(hub, lab) == node
    else:
        outcome.readable()
    # Once it is back, the same server starts, on the holder's node.
    if not outcome.started:
        outcome = await hub.spawn(lab)
        assert outcome.started, outcome.error
        assert await pinned_node(hub, lab) == node
    await hub.wait_until_pods_run(node)


# --------------------------------------------------------------------------------------------------
# watches reset


async def test_watches_cut_again_and_again_while_servers_start(hub):
    node = await one_user_on_one_node(hub)
    lab = hub.make("alice")

    async def cut_watches():
        cut = 0
        for _ in range(15):
            await asyncio.sleep(0.3)
            cut += await asyncio.to_thread(hub.proxy.reset_watches)
        return cut

    cutter = asyncio.ensure_future(cut_watches())
    lab_outcome = await hub.spawn(lab)
    app = hub.make("alice", "app")
    app_outcome = await hub.spawn(app)
    cut = await cutter
    assert cut > 0, "no watch was open to cut: the test proves nothing"
    assert lab_outcome.started, lab_outcome.error
    assert app_outcome.started, app_outcome.error
    assert await pinned_node(hub, lab) == await pinned_node(hub, app) == node


# --------------------------------------------------------------------------------------------------
# 429 and 5xx answers, latency


@pytest.mark.parametrize("status", [429, 500, 503])
async def test_error_answers_end_every_spawn_started_or_in_words(hub, status, caplog):
    node = await one_user_on_one_node(hub)
    for user in ("bob", "carol"):
        await hub.create_bound_claim(f"claim-{user}")
    await running_app(hub, node)
    hub.proxy.fail_status, hub.proxy.fail_probability = status, 0.5
    spawners = [hub.make(u) for u in ("alice", "bob", "carol")]
    with caplog.at_level(logging.WARNING):
        outcomes = await asyncio.gather(*(hub.spawn(s) for s in spawners))
    print(f"{status}: {hub.proxy.counts}")
    for outcome in outcomes:
        print(f"  {outcome.spawner.user.name}: {outcome.url or outcome.error!r}")
    assert hub.proxy.counts.by_status.get(status), "no fault injected: the test proves nothing"
    hub.proxy.clear()
    for outcome in outcomes:
        if outcome.started:
            continue
        text = outcome.readable()
        # the words a user reads for the fault (messages.API_FAULTS), or the timeout's
        expected = API_FAULTS[faults.OVERLOADED if status == 429 else faults.SERVER_ERROR]
        assert expected in text or API_FAULTS[faults.TIMEOUT] in text, text
    alice = outcomes[0]
    if alice.started:
        assert await pinned_node(hub, alice.spawner) == node


async def test_two_seconds_of_latency_take_the_safe_side_and_the_spawn_starts(hub, caplog):
    node = await one_user_on_one_node(hub)
    await running_app(hub, node)
    lab = hub.make("alice")
    # A hub whose live view has not listed yet (just restarted): the check must ask the API.
    # (A warm view answers from memory: tests/cluster/test_view.py.)
    await ClusterView.stop_all(hub.namespace)
    hub.proxy.latency = 2.0
    before = metric(SAFE_SIDE, mode="enforce")
    with caplog.at_level(logging.WARNING):
        outcome = await hub.spawn(lab)
    hub.proxy.clear()
    assert outcome.started, outcome.error
    assert metric(SAFE_SIDE, mode="enforce") == before + 1
    assert safe_side_logged(caplog)
    assert await pinned_node(hub, lab) == node


# --------------------------------------------------------------------------------------------------
# a watch that goes silent (a dropped NAT or load-balancer flow: open, no error, no byte)

#: the live view's cluster-wide watches of pods and of VolumeAttachments (KubeSpawner's own
#: reflectors watch namespaced paths and keep working)
VIEW_WATCHES = {"/api/v1/pods", "/apis/storage.k8s.io/v1/volumeattachments"}


async def test_a_silent_watch_does_not_hide_a_pod_that_starts_holding_the_home(hub):
    from tests.support import builders

    node = await one_user_on_one_node(hub)
    await hub.create_node(f"{hub.namespace}-n2", cpu="32")  # the scheduler alone would choose it
    await hub.create_bound_claim("claim-bob")
    bob = hub.make("bob")  # warms the hub: its reflectors and its live view are running
    assert (await hub.spawn(bob)).started
    view = bob.colocation_view()
    assert await view.wait_live(30)

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
        await wait_until(  # till the view's last event is older than "fresh"
            lambda: not view.fresh(), timeout=30, what="the live view no longer fresh", interval=0.1
        )
        assert view.live and not view.has_pod(hub.namespace, "backup-alice")  # silent, trusted

        lab = hub.make("alice", colocation_check_timeout=5.0)
        outcome = await hub.spawn(lab)
        assert outcome.started, outcome.error
        # KubeSpawner's pod reflector is the view's (one watch of the pods): the silent watch
        # never showed the lab's pod, so the start saw it Running by reading it by name
        reflector = lab.pod_reflector
        assert isinstance(reflector, SharedPodReflector), reflector
        assert reflector.close_reads > 0
        assert reflector.source().name == "pods (all namespaces)"
        assert not view.has_pod(hub.namespace, lab.pod_name)  # the watch is still silent
        decision = lab._colocation_decision
        assert (decision.node, decision.holders) == (node, ["backup-alice"])
        assert await pinned_node(hub, lab) == node
    finally:
        hub.proxy.blackhole = None
        await hub.core.delete_namespaced_pod("backup-alice", hub.namespace, grace_period_seconds=0)


# --------------------------------------------------------------------------------------------------
# an API server restart shorter than k8s_api_request_retry_timeout


async def test_a_two_second_api_restart_during_the_check_does_not_fail_the_spawn(hub):
    node = await one_user_on_one_node(hub)
    await running_app(hub, node)  # pins the lab: its check makes the dry run
    lab = hub.make("alice")  # k8s_api_request_retry_timeout 8 s
    # From the dry run on: every connection cut, new ones refused, for 2 s.
    hub.proxy.refuse_on(lambda method, path, query: query.get("dryRun") == "All", 2.0)
    outcome = await hub.spawn(lab)
    assert hub.proxy.refusals == 1, "the restart never happened: the test proves nothing"
    assert outcome.started, outcome.error
    assert await pinned_node(hub, lab) == node


# --------------------------------------------------------------------------------------------------
# the hub restarted while spawns are pending


async def wait_for_pods(hub, names: set[str], timeout: float = 30.0) -> dict[str, dict]:
    return await wait_until(
        hub.pods,
        until=lambda pods: names <= set(pods),
        timeout=timeout,
        what=f"pods {sorted(names)}",
        seen=lambda pods: {"missing": sorted(names - set(pods))},
    )


async def test_a_hub_killed_while_spawns_are_pending_leaves_nothing_the_next_hub_cannot_take_over(
    hub,
):
    """kill -9 of a hub whose spawns are at every step: alice's app runs and her lab's pod is
    Pending on its node; bob's and carol's checks are done and their pod creates are on their
    way to the apiserver, which carries out bob's before the next hub starts and carol's after
    that hub gave her server up. The next hub starts with nothing of the first (no lock, no
    view, no reflector): JupyterHub's start-up check takes over what runs and stops the rest;
    then each user's next spawn starts, or is refused in words, and every pod is a server's."""
    n1, n2 = f"{hub.namespace}-n1", f"{hub.namespace}-n2"
    for node in (n1, n2):
        await hub.create_node(node)
    for user in ("alice", "bob", "carol"):
        await hub.create_bound_claim(f"claim-{user}")
    servers = [("alice", "app"), ("alice", ""), ("bob", ""), ("carol", "")]
    pod_name = {
        key: make_spawner(ColocatingKubeSpawner, hub.namespace, *key).pod_name for key in servers
    }

    first = await hub.start_dead_hub()
    await first.spawn("alice", "app", node_selector={"kubernetes.io/hostname": n1})
    await first.until(started=["alice", "app"])
    await first.spawn("alice", "", extra_annotations=helpers.HOLD)  # its pod stays Pending
    await wait_for_pods(hub, {pod_name["alice", ""]})
    hub.proxy.hold = lambda method, path: method == "POST" and path.endswith("/pods")
    await first.spawn("bob")
    await first.spawn("carol")
    late = {pod_name["bob", ""], pod_name["carol", ""]}
    await wait_until(
        lambda: set(hub.proxy.held()),
        until=lambda held: held == late,
        timeout=30,
        what=f"the creates of {sorted(late)} held",
        seen=sorted,
        interval=0.1,
    )
    await first.kill()
    hub.proxy.release({pod_name["bob", ""]})
    await wait_for_pods(hub, {pod_name["bob", ""]})
    await helpers.wait_for_running(hub.api_client, hub.namespace, pod_name["bob", ""])
    await helpers.assert_no_split_claims(hub.api_client, hub.namespace)

    # The next hub: every server its database says was started is checked as JupyterHub does.
    restarted = {key: hub.make(*key) for key in servers}
    taken_over = {key for key, s in restarted.items() if await hub.restart_check(s)}
    assert taken_over == {("alice", "app"), ("bob", "")}
    hub.proxy.release()  # carol's create reaches the apiserver after her server was given up
    stale = (await wait_for_pods(hub, {pod_name["carol", ""]}))[pod_name["carol", ""]]
    assert pod_name["alice", ""] not in await hub.pods()  # the Pending lab was stopped
    await helpers.assert_no_split_claims(hub.api_client, hub.namespace)

    # Each user's next spawn.
    lab, carol = restarted["alice", ""], restarted["carol", ""]
    big = hub.make("alice", "big", cpu_guarantee=8)
    bob_app = hub.make("bob", "app")
    outcomes = await asyncio.gather(*(hub.spawn(s) for s in (lab, big, bob_app, carol)))
    for outcome in outcomes:
        print(
            f"  {outcome.spawner.user.name}/{outcome.spawner.name}: "
            f"{outcome.url or outcome.error!r}"
        )
    lab_outcome, big_outcome, bob_outcome, carol_outcome = outcomes
    assert lab_outcome.started, lab_outcome.error
    assert bob_outcome.started, bob_outcome.error
    assert carol_outcome.started, carol_outcome.error
    assert not big_outcome.started
    print(f"  alice/big: {big_outcome.readable()}")
    assert big_outcome.error.decision.reasons == ["insufficient:cpu"]
    await helpers.assert_no_split_claims(hub.api_client, hub.namespace)
    pods = await hub.pods()
    assert pods[lab.pod_name]["spec"]["nodeName"] == n1  # beside the app the hub took over
    bob_lab = pods[pod_name["bob", ""]]["spec"]["nodeName"]
    assert pods[bob_app.pod_name]["spec"]["nodeName"] == bob_lab
    # carol's stale pod was replaced by her new server's
    assert pods[carol.pod_name]["metadata"]["uid"] != stale["metadata"]["uid"]
    # No pod without a server.
    serving = {
        s.pod_name for s in (restarted["alice", "app"], restarted["bob", ""], lab, bob_app, carol)
    }
    assert set(pods) == serving
