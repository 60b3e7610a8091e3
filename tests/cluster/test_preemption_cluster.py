"""Preemption on the pinned node against the real kube-scheduler (docs/decisions.md, "Priority
and preemption"): zero-to-jupyterhub's priority classes and user placeholders fill alice's pinned
node; her app starts there through the real spawner, and the real scheduler evicts the
placeholder.  The ``kube`` fixture's teardown checks that no claim is used on two nodes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import pytest
from kubernetes_asyncio import client

from nebari_colocate.spawner import ColocationRefused
from tests.support import builders
from tests.support.helpers import wait_for_running
from tests.support.waiting import wait_until

from .test_spawner_cluster import pod_of

PLACEHOLDER_LABELS = {"component": "user-placeholder", "app": "jupyterhub"}


@contextlib.asynccontextmanager
async def z2jh_priority_classes(kube, *, pdb: bool = True):
    """zero-to-jupyterhub's classes with ``scheduling.podPriority.enabled`` (release named after
    the test's namespace, as the classes are cluster-scoped): default 0, user placeholders -10;
    and the placeholders' PDB (``minAvailable: 0``).  Yields the two class names."""
    scheduling = client.SchedulingV1Api(kube.api_client)
    policy = client.PolicyV1Api(kube.api_client)
    default = f"{kube.namespace}-default-priority"
    placeholder = f"{kube.namespace}-user-placeholder-priority"
    for name, value in ((default, 0), (placeholder, -10)):
        await scheduling.create_priority_class(
            {"metadata": {"name": name}, "value": value, "globalDefault": False}
        )
    if pdb:
        await policy.create_namespaced_pod_disruption_budget(
            kube.namespace,
            {
                "metadata": {"name": "user-placeholder"},
                "spec": {"minAvailable": 0, "selector": {"matchLabels": PLACEHOLDER_LABELS}},
            },
        )
    try:
        yield default, placeholder
    finally:
        for name in (default, placeholder):
            with contextlib.suppress(client.ApiException):
                await scheduling.delete_priority_class(name)


async def placeholder(kube, name: str, priority_class: str, cpu: str) -> dict:
    """One of z2jh's user placeholders: a pause pod at the placeholder priority, left to the
    scheduler (plain pods: no StatefulSet controller runs here; kwok runs them)."""
    body = builders.kube_pod(
        name,
        labels=PLACEHOLDER_LABELS,
        containers=[builders.container("pause", requests={"cpu": cpu}, image="pause:3.10")],
        spec_fields={"priorityClassName": priority_class},
    )
    await kube.core.create_namespaced_pod(kube.namespace, body)
    return await wait_for_running(kube.api_client, kube.namespace, name)


async def test_a_placeholder_on_the_pinned_node_is_preempted_for_the_users_app(
    kube, spawners, caplog
):
    await kube.create_node("cpu-1", cpu="4")
    await kube.create_bound_claim("claim-alice")
    async with z2jh_priority_classes(kube) as (default, placeholder_class):
        lab = spawners.make("alice", cpu_guarantee=1, priority_class_name=default)
        await spawners.start(lab)
        assert (await pod_of(kube, lab))["spec"]["nodeName"] == "cpu-1"
        held = await placeholder(kube, "user-placeholder-0", placeholder_class, "2500m")
        assert held["spec"]["nodeName"] == "cpu-1" and held["spec"]["priority"] == -10

        caplog.set_level(logging.INFO)
        app = spawners.make("alice", "app", cpu_guarantee=2, priority_class_name=default)
        await spawners.start(app)  # before: refused insufficient:cpu, "stop your default server"

        decision = app._colocation_decision
        assert (decision.verdict, decision.node, decision.reasons) == ("colocate", "cpu-1", [])
        assert decision.warnings == ["preempts:1"]
        assert decision.preemption is not None
        assert decision.preemption.victim_keys == [f"{kube.namespace}/user-placeholder-0"]
        assert any("warnings=preempts:1" in r.getMessage() for r in caplog.records)
        # the live view reads the classes and the PDB (admin credentials here)
        hub = app.colocation_view().hub
        assert default in {c["metadata"]["name"] for c in hub.priority_classes.items.values()}
        mine = [p for p in hub.pdbs.items.values() if p["metadata"]["namespace"] == kube.namespace]
        assert [p["metadata"]["name"] for p in mine] == ["user-placeholder"]

        running = await pod_of(kube, app)
        assert running["spec"]["nodeName"] == "cpu-1"
        assert running["status"]["phase"] == "Running"
        # the real scheduler evicted the placeholder
        names = {
            p.metadata.name for p in (await kube.core.list_namespaced_pod(kube.namespace)).items
        }
        assert "user-placeholder-0" not in names
        assert (await pod_of(kube, lab))["status"]["phase"] == "Running"  # the lab untouched
        await kube.assert_no_split_claims()


async def test_a_placeholder_of_equal_priority_is_not_preempted_and_the_app_is_refused(
    kube, spawners
):
    await kube.create_node("cpu-1", cpu="4")
    await kube.create_bound_claim("claim-alice")
    async with z2jh_priority_classes(kube) as (default, _):
        lab = spawners.make("alice", cpu_guarantee=1, priority_class_name=default)
        await spawners.start(lab)
        # a placeholder a careless operator put at the users' own priority: nothing to preempt
        await placeholder(kube, "user-placeholder-0", default, "2500m")
        app = spawners.make("alice", "app", cpu_guarantee=2, priority_class_name=default)
        with pytest.raises(ColocationRefused) as refused:
            await spawners.start(app)
        assert refused.value.decision.reasons == ["insufficient:cpu"]
        assert refused.value.decision.preemption is None
        pod = await kube.core.read_namespaced_pod("user-placeholder-0", kube.namespace)
        assert pod.metadata.deletion_timestamp is None


async def test_a_blocking_pdb_makes_the_scheduler_evict_the_other_placeholder_as_predicted(
    kube, spawners
):
    """Two placeholders of equal priority, one must go: without a PDB the scheduler keeps the
    older one; a PDB that allows no disruption of the newer one makes it keep that one and evict
    the older instead.  The decision names that victim before the pod exists."""
    await kube.create_node("cpu-1", cpu="4")
    await kube.create_bound_claim("claim-alice")
    policy = client.PolicyV1Api(kube.api_client)
    async with z2jh_priority_classes(kube, pdb=False) as (default, placeholder_class):
        lab = spawners.make("alice", cpu_guarantee=0.5, priority_class_name=default)
        await spawners.start(lab)
        await placeholder(kube, "placeholder-old", placeholder_class, "1500m")
        await asyncio.sleep(1.1)  # start times have a resolution of one second
        newer = builders.kube_pod(
            "placeholder-new",
            labels={**PLACEHOLDER_LABELS, "pdb": "blocking"},
            containers=[builders.container("pause", requests={"cpu": "1500m"}, image="pause")],
            spec_fields={"priorityClassName": placeholder_class},
        )
        await kube.core.create_namespaced_pod(kube.namespace, newer)
        await wait_for_running(kube.api_client, kube.namespace, "placeholder-new")
        # no disruption controller runs here: the budget's status is written as it would write it
        await policy.create_namespaced_pod_disruption_budget(
            kube.namespace,
            {
                "metadata": {"name": "blocking"},
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"pdb": "blocking"}}},
            },
        )
        status = {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1}
        await policy.patch_namespaced_pod_disruption_budget_status(
            "blocking", kube.namespace, {"status": {**status, "expectedPods": 1}}
        )
        app = spawners.make("alice", "app", cpu_guarantee=1.5, priority_class_name=default)
        view = app.colocation_view()
        view.start()
        await wait_until(
            lambda: any(
                (p.get("status") or {}).get("disruptionsAllowed") == 0
                and p["metadata"]["name"] == "blocking"
                for p in view.hub.pdbs.items.values()
            ),
            timeout=20,
            what="the PDB's status in the view",
            interval=0.05,
        )
        await spawners.start(app)

        decision = app._colocation_decision
        assert decision.warnings == ["preempts:1"]
        assert decision.preemption.victim_keys == [f"{kube.namespace}/placeholder-old"]
        assert decision.preemption.pdb_violations == 0
        left = {
            p.metadata.name for p in (await kube.core.list_namespaced_pod(kube.namespace)).items
        }
        assert "placeholder-old" not in left and "placeholder-new" in left
        assert (await pod_of(kube, app))["spec"]["nodeName"] == "cpu-1"
