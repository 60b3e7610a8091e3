"""zero-to-jupyterhub's user placeholders under Karpenter: preempted for a pinned server, recreated
by their StatefulSet, given a new node by Karpenter (docs/failure-modes.md, "Schedulers").

The placeholders are the chart's StatefulSet (``tests/support/z2jh.py``: pause pods at priority
-10, ``podManagementPolicy: Parallel``, ``terminationGracePeriodSeconds: 0``, and the chart's PDB
``minAvailable: 0``), run by kube-controller-manager's real ``statefulset`` and ``disruption``
controllers, started on Karpenter's control plane for this module's tests only. Every eviction,
recreation, nomination and node here comes from the real components: kube-scheduler's
DefaultPreemption, the StatefulSet controller, Karpenter (kwok cloud provider).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import pytest
from kubernetes_asyncio import client

from nebari_colocate import fit, quantity
from tests.support.autoscaler import describe, karpenter_nodes
from tests.support.helpers import is_running, split_claims, to_dict
from tests.support.waiting import wait_until
from tests.support.z2jh import (
    PLACEHOLDER_MATCH_LABELS,
    PLACEHOLDER_NAME,
    USER_POD_TRAITS,
    ensure_priority_classes,
    placeholder_pdb,
    placeholder_statefulset,
)

from .test_karpenter import START_TIMEOUT, start_running
from .test_spawner_cluster import pod_of

#: kube-controller-manager's controllers behind the chart's placeholders: the StatefulSet's
#: pods (re)created, and the PDB's status (what kube-scheduler's preemption reads)
PLACEHOLDER_CONTROLLERS = ("statefulset", "disruption")
PLACEHOLDER_SELECTOR = ",".join(f"{k}={v}" for k, v in PLACEHOLDER_MATCH_LABELS.items())
LAB_CPU = 0.5
APP_CPU = 1.0
#: millicores left free on alice's node once the placeholders fill it
SLACK = 100
#: Karpenter launching a node for the recreated placeholders, and kwok running them there
RECREATED_TIMEOUT = 60


@pytest.fixture
def kube(karpenter_kube):
    """This module's cluster is the autoscaler's (the ``spawners`` fixture uses it)."""
    return karpenter_kube


@pytest.fixture
def placeholder_controllers(autoscaler, kube):
    """kube-controller-manager's StatefulSet and disruption controllers on Karpenter's control
    plane while the test runs (a second process beside the plane's own, whose controllers every
    other test keeps); stopped before the namespace is cleaned, so nothing recreates the pods
    the cleanup deletes."""
    plane = autoscaler.control_plane
    plane.start_controllers("placeholders", PLACEHOLDER_CONTROLLERS)
    yield
    plane.stop_component("controller-manager-placeholders")


class ClaimSamples:
    """The namespace's pods read every ``interval`` while a block runs: each sample's exclusive
    claims bound on more than one node (``helpers.split_claims``), and the nodes of each claim."""

    def __init__(self, kube, interval: float = 0.2) -> None:
        self.kube = kube
        self.interval = interval
        self.count = 0
        self.split: list[dict] = []
        self.nodes: dict[str, set[str]] = {}

    async def sample(self) -> None:
        api, core, ns = self.kube.api_client, self.kube.core, self.kube.namespace
        pods = to_dict(api, await core.list_namespaced_pod(ns))["items"]
        pvcs = to_dict(api, await core.list_namespaced_persistent_volume_claim(ns))["items"]
        self.count += 1
        if split := split_claims(pods, pvcs):
            self.split.append(split)
        for pod in pods:
            node = pod["spec"].get("nodeName")
            for volume in pod["spec"].get("volumes") or []:
                claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
                if claim and node:
                    self.nodes.setdefault(claim, set()).add(node)

    async def run(self) -> None:
        while True:
            await self.sample()
            await asyncio.sleep(self.interval)


@contextlib.asynccontextmanager
async def sampling_claims(kube) -> AsyncIterator[ClaimSamples]:
    """:class:`ClaimSamples` taken while the block runs (a failed read fails the test)."""
    samples = ClaimSamples(kube)
    task = asyncio.ensure_future(samples.run())
    try:
        yield samples
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    await samples.sample()


async def placeholder_pods(kube) -> list[dict]:
    pods = await kube.core.list_namespaced_pod(kube.namespace, label_selector=PLACEHOLDER_SELECTOR)
    return sorted(to_dict(kube.api_client, pods)["items"], key=lambda p: p["metadata"]["name"])


def placements(pods: list[dict]) -> list[tuple]:
    """(name, uid, node, running) of each pod: what a wait that gives up shows."""
    return [
        (p["metadata"]["name"], p["metadata"]["uid"][:8], p["spec"].get("nodeName"), is_running(p))
        for p in pods
    ]


async def free_millicores(kube, node: dict) -> int:
    """CPU left on ``node``: its allocatable less the requests of every pod bound to it."""
    name = node["metadata"]["name"]
    pods = await kube.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={name}")
    used = sum(fit.pod_requests(p).get("cpu", 0) for p in to_dict(kube.api_client, pods)["items"])
    return quantity.scheduler_units("cpu", node["status"]["allocatable"]["cpu"]) - used


async def test_placeholders_preempted_for_a_pinned_app_are_recreated_on_a_new_karpenter_node(
    kube, spawners, placeholder_controllers
):
    ns = kube.namespace
    await ensure_priority_classes(kube.api_client)
    await kube.create_bound_claim("claim-alice")
    apps = client.AppsV1Api(kube.api_client)
    policy = client.PolicyV1Api(kube.api_client)
    await policy.create_namespaced_pod_disruption_budget(ns, placeholder_pdb())

    async with sampling_claims(kube) as samples:
        # alice's lab holds her home on a node Karpenter launches for it
        lab = spawners.make(
            "alice", start_timeout=START_TIMEOUT, cpu_guarantee=LAB_CPU, **USER_POD_TRAITS
        )
        pinned = await start_running(spawners, lab, "cpu")
        pinned_name = pinned["metadata"]["name"]

        # two placeholders fill the rest of it; one alone gone would not make room for the app
        free = await free_millicores(kube, pinned)
        each = (free - SLACK) // 2
        app_millis = int(APP_CPU * 1000)
        assert SLACK + each < app_millis <= free, (free, each, describe([pinned]))
        await apps.create_namespaced_stateful_set(ns, placeholder_statefulset(2, cpu=f"{each}m"))
        held = await wait_until(
            lambda: placeholder_pods(kube),
            until=lambda pods: len(pods) == 2 and all(map(is_running, pods)),
            timeout=30,
            what="the StatefulSet's two placeholders running",
            seen=placements,
        )
        assert {p["spec"]["nodeName"] for p in held} == {pinned_name}, placements(held)
        assert {p["spec"]["priority"] for p in held} == {-10}
        first_uids = {p["metadata"]["uid"] for p in held}
        nodes_before = {n["metadata"]["name"] for n in await karpenter_nodes(kube.api_client)}
        assert nodes_before == {pinned_name}, nodes_before
        # the disruption controller's word on the chart's PDB: both may go
        await wait_until(
            lambda: policy.read_namespaced_pod_disruption_budget(PLACEHOLDER_NAME, ns),
            until=lambda pdb: pdb.status is not None and pdb.status.disruptions_allowed == 2,
            timeout=30,
            what="the placeholders' PDB allowing 2 disruptions",
            seen=lambda pdb: pdb.status,
        )

        # her app: decided colocate on the pinned node, preempting both placeholders
        app = spawners.make(
            "alice", "app", start_timeout=START_TIMEOUT, cpu_guarantee=APP_CPU, **USER_POD_TRAITS
        )
        started = time.perf_counter()
        await spawners.start(app)
        app_running = time.perf_counter() - started
        decision = app._colocation_decision
        assert (decision.verdict, decision.node, decision.reasons) == (
            "colocate",
            pinned_name,
            [],
        )
        assert decision.warnings == ["preempts:2"]
        assert sorted(decision.preemption.victim_keys) == [
            f"{ns}/{PLACEHOLDER_NAME}-0",
            f"{ns}/{PLACEHOLDER_NAME}-1",
        ]
        running = await pod_of(kube, app)
        assert running["spec"]["nodeName"] == pinned_name
        assert running["status"]["phase"] == "Running"

        # the StatefulSet recreates both; Karpenter launches a node for them and they run there
        recreated = await wait_until(
            lambda: placeholder_pods(kube),
            until=lambda pods: (
                len(pods) == 2
                and not first_uids & {p["metadata"]["uid"] for p in pods}
                and all(map(is_running, pods))
            ),
            timeout=RECREATED_TIMEOUT,
            what="both placeholders recreated and running on another node",
            seen=placements,
        )
        placeholders_running = time.perf_counter() - started

    new_nodes = {p["spec"]["nodeName"] for p in recreated}
    assert pinned_name not in new_nodes and not new_nodes & nodes_before, placements(recreated)
    launched = {n["metadata"]["name"]: n for n in await karpenter_nodes(kube.api_client, "cpu")}
    assert new_nodes <= set(launched), describe(list(launched.values()))
    # evicted by the real scheduler, for the app, on the pinned node: each of the first two
    preemptor = f"{running['metadata']['uid']} on node {pinned_name}"

    async def preempted() -> set[str]:
        events = await kube.core.list_namespaced_event(ns, field_selector="reason=Preempted")
        return {e.involved_object.uid for e in events.items if preemptor in (e.message or "")}

    await wait_until(
        preempted,
        until=lambda uids: uids == first_uids,
        timeout=10,
        what=f"kube-scheduler's Preempted events for {sorted(first_uids)}",
    )
    # the lab untouched, and alice's home never on two nodes
    assert (await pod_of(kube, lab))["spec"]["nodeName"] == pinned_name
    assert samples.count >= 5 and not samples.split, samples.split
    assert samples.nodes["claim-alice"] == {pinned_name}
    print(
        f"karpenter placeholders: 2 x {each}m at -10 on {describe([pinned])}; app ({app_millis}m)"
        f" running there {app_running:.1f}s after its start, placeholders recreated on "
        f"{describe([launched[n] for n in sorted(new_nodes)])} {placeholders_running:.1f}s after"
        f" it; {samples.count} samples, claim-alice on {sorted(samples.nodes['claim-alice'])}"
    )
