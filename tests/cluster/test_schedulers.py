"""The fail fast under the schedulers deployments run: preemption of z2jh's placeholders, z2jh's
user-scheduler, and a scheduler nobody runs.

Everything here is the real kube-scheduler v1.37 (the cluster's own, and a second process of the
same binary serving zero-to-jupyterhub's user-scheduler profile, ``tests/support/z2jh.py``):
its DefaultPreemption evicts the placeholders at priority -10 for a user pod at 0, nominates the
pod to the node and binds it once they are gone.  A victim that is slow to go is one with a
finalizer the test removes, so the wait on the preemption is observed, not raced.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import pytest

from nebari_colocate.spawner import ColocationRefused
from tests.support import helpers
from tests.support.z2jh import (
    USER_POD_TRAITS,
    USER_SCHEDULER,
    create_placeholders,
    ensure_priority_classes,
)

#: keeps a preempted placeholder terminating until the test lets it go
SLOW_TO_GO = "colocate.test/slow-to-go"


@pytest.fixture(params=["default-scheduler", USER_SCHEDULER])
def scheduler_name(request) -> str:
    """Each test runs under the cluster's scheduler and under z2jh's user-scheduler."""
    if request.param == USER_SCHEDULER:
        request.getfixturevalue("user_scheduler")
    return request.param


def pod_traits(scheduler_name: str) -> dict:
    """The KubeSpawner traits z2jh sets: the priority class, and its scheduler when enabled."""
    traits = dict(USER_POD_TRAITS)
    if scheduler_name != "default-scheduler":
        traits["scheduler_name"] = scheduler_name
    return traits


async def pod_events(kube, pod_name: str) -> list:
    events = await kube.core.list_namespaced_event(
        kube.namespace, field_selector=f"involvedObject.name={pod_name}"
    )
    return events.items


def component(event) -> str:
    return event.reporting_component or (event.source.component if event.source else "") or ""


async def fill_node(kube, node: str, count: int, cpu: str, scheduler_name: str) -> list[str]:
    """z2jh placeholders (pause pods at -10) on ``node``, bound before this returns; each holds
    a finalizer, so once preempted it stays terminating until :func:`let_go`."""
    names = await create_placeholders(
        kube.api_client,
        kube.namespace,
        count,
        cpu=cpu,
        scheduler_name=None if scheduler_name == "default-scheduler" else scheduler_name,
        node_selector={"kubernetes.io/hostname": node},
    )
    for name in names:
        await kube.core.patch_namespaced_pod(
            name, kube.namespace, {"metadata": {"finalizers": [SLOW_TO_GO]}}
        )
        await kube.wait_for_binding(name)
    return names


async def let_go(kube, names: list[str]) -> None:
    for name in names:
        await kube.core.patch_namespaced_pod(
            name, kube.namespace, {"metadata": {"finalizers": None}}
        )


async def nominated_to(kube, pod_name: str, node: str) -> None:
    await helpers.wait_for_pod(
        kube.api_client,
        kube.namespace,
        pod_name,
        lambda pod: (pod.get("status") or {}).get("nominatedNodeName") == node,
        timeout=20,
        what=f"nominated to {node}",
    )


@contextlib.asynccontextmanager
async def running(task: asyncio.Future):
    """The spawn ``task``, cancelled (and awaited) if the test ends before it does."""
    try:
        yield task
    finally:
        if not task.done():
            task.cancel()
        with contextlib.suppress(BaseException):
            await task


async def start_pinned_app_on_full_node(kube, spawners, scheduler_name, **app_traits):
    """alice's lab (1 CPU) on cpu-1 (4 CPU); after the app's check said it fits there, z2jh
    placeholders fill cpu-1 (2 x 1.5 CPU at -10), as a class being prepared does meanwhile;
    cpu-2 has room, but the pin keeps the app on cpu-1.  Returns (app, its start task,
    the placeholders)."""
    await ensure_priority_classes(kube.api_client)
    await kube.create_node("cpu-1", cpu="4")
    await kube.create_bound_claim("claim-alice")
    traits = pod_traits(scheduler_name)
    lab = spawners.make("alice", cpu_guarantee=1, **traits)
    await spawners.start(lab)
    assert (await kube.wait_for_binding(lab.pod_name)) == "cpu-1"
    await kube.create_node("cpu-2", cpu="4")
    placeholders: list[str] = []

    async def fill_after_the_check(spawner, pod):
        placeholders.extend(await fill_node(kube, "cpu-1", 2, "1500m", scheduler_name))
        return pod

    app = spawners.make(
        "alice", "app", cpu_guarantee=2, modify_pod_hook=fill_after_the_check, **traits
    )
    for name, value in app_traits.items():
        setattr(app, name, value)
    task = asyncio.ensure_future(spawners.start(app))
    return app, task, placeholders


async def waits_on_the_preemption(kube, spawner, task, node: str, scheduler_name: str):
    """The spawn is nominated to ``node`` and, while the victims stay terminating (their
    finalizer; the scheduler says "not eligible due to a terminating pod on the nominated node"
    on every attempt), waits on the preemption instead of ending on "Insufficient cpu"."""
    await nominated_to(kube, spawner.pod_name, node)
    await asyncio.sleep(3)
    assert not task.done(), task.exception() or task.result()
    verdict = spawner.classify_events()
    assert verdict.code == "preempting", verdict
    assert verdict.node == node
    assert verdict.scheduler == scheduler_name


async def test_a_pinned_app_waits_while_the_scheduler_evicts_placeholders_then_runs(
    kube, spawners, scheduler_name
):
    app, task, placeholders = await start_pinned_app_on_full_node(kube, spawners, scheduler_name)
    async with running(task):
        try:
            await waits_on_the_preemption(kube, app, task, "cpu-1", scheduler_name)
        finally:
            await let_go(kube, placeholders)
        await asyncio.wait_for(task, 30)
    pod = await kube.core.read_namespaced_pod(app.pod_name, kube.namespace)
    assert pod.spec.node_name == "cpu-1"
    said = [e for e in await pod_events(kube, app.pod_name) if e.reason == "FailedScheduling"]
    preempting = [e for e in said if "preemption: found a potential placement" in e.message]
    assert preempting, [e.message for e in said]
    assert {component(e) for e in said} == {scheduler_name}
    assert "on node cpu-1, preempting 2 victims" in preempting[0].message
    left = await kube.core.list_namespaced_pod(
        kube.namespace, label_selector="component=user-placeholder"
    )
    assert not left.items, [p.metadata.name for p in left.items]
    print(f"\n{scheduler_name}: " + " | ".join(sorted({e.message for e in said})))


async def test_a_preemption_whose_victims_do_not_go_ends_the_spawn_in_words(
    kube, spawners, scheduler_name
):
    app, task, placeholders = await start_pinned_app_on_full_node(
        kube, spawners, scheduler_name, preemption_grace_seconds=4
    )
    started = time.perf_counter()
    async with running(task):
        try:
            with pytest.raises(ColocationRefused) as refused:
                await asyncio.wait_for(task, 30)
        finally:
            await let_go(kube, placeholders)
    elapsed = time.perf_counter() - started
    verdict = refused.value.event_verdict
    assert verdict.reason == "preemption-stalled", verdict
    assert verdict.node == "cpu-1" and verdict.scheduler == scheduler_name
    assert "making room for it on node cpu-1" in refused.value.jupyterhub_message
    assert "after 4 seconds" in refused.value.jupyterhub_message
    assert 4 <= elapsed < 25
    pods = await kube.core.list_namespaced_pod(kube.namespace)
    assert app.pod_name not in {p.metadata.name for p in pods.items}


async def test_a_first_server_starts_on_a_node_full_of_placeholders(kube, spawners, scheduler_name):
    await ensure_priority_classes(kube.api_client)
    await kube.create_node("cpu-1", cpu="4")
    await kube.create_bound_claim("claim-alice")
    placeholders = await fill_node(kube, "cpu-1", 4, "1", scheduler_name)
    lab = spawners.make("alice", cpu_guarantee=1, **pod_traits(scheduler_name))
    async with running(asyncio.ensure_future(spawners.start(lab))) as task:
        try:
            await waits_on_the_preemption(kube, lab, task, "cpu-1", scheduler_name)
        finally:
            await let_go(kube, placeholders)
        await asyncio.wait_for(task, 30)
    assert (await kube.wait_for_binding(lab.pod_name)) == "cpu-1"


async def test_a_pinned_pod_the_user_scheduler_refuses_ends_in_words(
    kube, spawners, user_scheduler
):
    await kube.create_node("cpu-1", cpu="4")
    await kube.create_node("cpu-2", cpu="4")
    await kube.create_bound_claim("claim-alice")
    traits = pod_traits(user_scheduler)
    await ensure_priority_classes(kube.api_client)
    lab = spawners.make("alice", **traits)
    await spawners.start(lab)
    pinned = await kube.wait_for_binding(lab.pod_name)
    scheduled = [e for e in await pod_events(kube, lab.pod_name) if e.reason == "Scheduled"]
    assert {component(e) for e in scheduled} == {user_scheduler}

    async def cordon_after_the_check(spawner, pod):
        await kube.cordon_seen_by_scheduler(pinned)
        return pod

    app = spawners.make("alice", "app", modify_pod_hook=cordon_after_the_check, **traits)
    with pytest.raises(ColocationRefused) as refused:
        await spawners.start(app)
    verdict = refused.value.event_verdict
    assert verdict.reason == "unschedulable-pinned"
    assert verdict.scheduler == user_scheduler
    assert pinned in refused.value.jupyterhub_message
    assert "cordoned" in refused.value.jupyterhub_message


async def test_a_pod_naming_a_scheduler_nobody_runs_ends_in_words_after_the_bound(
    kube, spawners, caplog
):
    await kube.create_node("cpu-1", cpu="4")
    await kube.create_bound_claim("claim-alice")
    lab = spawners.make(
        "alice", scheduler_name="jhub-user-schedular", colocation_unscheduled_timeout=5
    )
    started = time.perf_counter()
    with caplog.at_level(logging.WARNING), pytest.raises(ColocationRefused) as refused:
        await spawners.start(lab)
    elapsed = time.perf_counter() - started
    verdict = refused.value.event_verdict
    assert verdict.reason == "no-scheduler"
    assert verdict.scheduler == "jhub-user-schedular"
    assert (
        "Nothing in the cluster is placing new servers right now. Please tell your administrator. "
        "Trying again will not help until it is fixed. Details: No scheduler has picked up your "
        "server: the cluster's scheduler 'jhub-user-schedular' may not be running."
    ) in refused.value.jupyterhub_message
    assert 5 <= elapsed < 15, elapsed
    log = "\n".join(r.getMessage() for r in caplog.records)
    assert "reason=no-scheduler" in log and "scheduler='jhub-user-schedular'" in log
    pods = await kube.core.list_namespaced_pod(kube.namespace)
    assert lab.pod_name not in {p.metadata.name for p in pods.items}
    print(f"no scheduler, 5 s bound: verdict {elapsed:.2f}s after the spawn request")


async def test_a_pod_of_a_running_scheduler_is_never_ended_by_the_bound(
    kube, spawners, scheduler_name
):
    """A pod its scheduler cannot place (no node of the kind it asks for) is not
    'unscheduled': the scheduler said why (PodScheduled False, FailedScheduling); with the
    unschedulable grace off it waits for start_timeout as before."""
    await kube.create_node("cpu-1", labels={"node-type": "cpu"})
    await kube.create_bound_claim("claim-alice")
    lab = spawners.make(
        "alice",
        node_selector={"node-type": "gpu"},
        colocation_unscheduled_timeout=5,
        unschedulable_grace_seconds=0,
        start_timeout=9,
        **pod_traits(scheduler_name),
    )
    with pytest.raises(asyncio.TimeoutError):
        await spawners.start(lab)
