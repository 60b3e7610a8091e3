"""A way out or a move that ends part-way says exactly what it did (docs/decisions.md).

On the real control plane (kube-controller-manager, kube-scheduler, kwok): the steps the hub's
handlers run (:func:`~nebari_colocate.handlers.take_way_out`,
:func:`~nebari_colocate.handlers.move_off_premium`), with real spawners for the stop and the
start, end part-way for real reasons, and their words name which servers stopped, which did not
and which run again, with no Python exception in them:

- a server whose pod cannot go away (a finalizer nobody removes: a stuck unmount looks the
  same), so the way out stops one of its two servers;
- a move of two servers to the only standard node, which has room for one of them: the first
  starts there, the second is then refused by the check (pinned beside the first, no room).
"""

from __future__ import annotations

import contextlib

import pytest

from nebari_colocate.handlers import MoveFailed, WayOutFailed, move_off_premium, take_way_out
from tests.support.waiting import wait_until

#: what keeps a pod from being deleted (a finalizer nobody removes)
STUCK = "nebari.dev/test-stuck"
GPU = {"extra_resource_limits": {"nvidia.com/gpu": "1"}}
PYTHON_WORDS = ("Error", "Exception", "Traceback", "RuntimeError")


def stuck_on_delete(spawner, pod):
    """``modify_pod_hook``: the pod keeps a finalizer, so its delete never finishes."""
    pod.metadata.finalizers = [STUCK]
    return pod


def stopper(*spawners):
    by_name = {s.name: s for s in spawners}
    stopped: list[str] = []

    async def stop_server(name: str) -> None:
        stopped.append(name)
        await by_name[name].stop(now=True)

    return stop_server, stopped


async def unstick(kube, pod_name: str) -> None:
    with contextlib.suppress(Exception):
        await kube.core.patch_namespaced_pod(
            pod_name, kube.namespace, {"metadata": {"finalizers": None}}
        )


async def test_a_way_out_that_stopped_one_of_two_servers_says_which_stopped_and_which_did_not(
    kube, spawners
):
    small, big = f"{kube.namespace}-n1", f"{kube.namespace}-n2"
    await kube.create_node(small, cpu="4")
    await kube.create_node(big, cpu="32")
    await kube.create_bound_claim("claim-alice")
    here = {"node_selector": {"kubernetes.io/hostname": small}, "cpu_guarantee": 1}
    first = spawners.make("alice", "a-app", **here)
    second = spawners.make("alice", "b-app", modify_pod_hook=stuck_on_delete, **here)
    for app in (first, second):
        await spawners.start(app)
    lab = spawners.make("alice", cpu_guarantee=4, way_out_release_timeout=15)
    with pytest.raises(Exception) as refused:
        await spawners.start(lab)
    assert refused.value.decision.reasons == ["insufficient:cpu"]
    assert lab.colocation_failure.way_out_json() == {"stop": ["a-app", "b-app"], "start": ""}

    stop_server, stopped = stopper(first, second)
    try:
        with pytest.raises(WayOutFailed) as failed:
            await take_way_out(
                lab,
                ["a-app", "b-app"],
                is_running=lambda name: name not in stopped,
                stop_server=stop_server,
                start_server=lambda options: spawners.start(lab),
                words={"start": "", "stop": ("a-app", "b-app")},
            )
        assert (failed.value.status_code, failed.value.outcome) == (500, "stop-failed")
        text = failed.value.jupyterhub_message
        print(f"the way out's page says: {text}")
        assert text == (
            "'a-app' stopped, but 'b-app' did not stop (it took too long), so your default "
            "server was not started. Stop 'b-app' on the home page, then start your default "
            "server again."
        )
        assert not any(word in text for word in PYTHON_WORDS)
        pods = {
            p.metadata.name: p for p in (await kube.core.list_namespaced_pod(kube.namespace)).items
        }
        assert first.pod_name not in pods  # stopped, as said
        assert pods[second.pod_name].metadata.deletion_timestamp  # still there, as said
        assert lab.pod_name not in pods  # not started, as said
    finally:
        await unstick(kube, second.pod_name)


async def test_a_move_that_restarted_one_of_two_servers_says_which_runs(kube, spawners):
    cpu_node, gpu_node = f"{kube.namespace}-cpu", f"{kube.namespace}-gpu"
    await kube.create_node(cpu_node, cpu="2")
    await kube.create_node(gpu_node, cpu="32", extra={"nvidia.com/gpu": "1"})
    await kube.create_bound_claim("claim-alice")
    lab = spawners.make("alice", node_selector={"kubernetes.io/hostname": gpu_node}, **GPU)
    await spawners.start(lab)
    apps = [spawners.make("alice", name, cpu_guarantee=1.5) for name in ("app-1", "app-2")]
    for app in apps:
        await spawners.start(app)  # beside the lab, on the GPU node (premium_node_policy warn)
    await lab.stop(now=True)

    async def ride():
        return apps[0].premium_rides()

    rides = await wait_until(ride, timeout=30, what="the apps' ride on the GPU node")
    assert [(r.node, r.servers) for r in rides] == [(gpu_node, ("app-1", "app-2"))]

    stop_server, stopped = stopper(*apps)

    async def start_server(name: str, options: dict) -> None:
        await spawners.start({a.name: a for a in apps}[name])

    with pytest.raises(MoveFailed) as failed:
        await move_off_premium(
            apps[0],
            gpu_node,
            ["app-1", "app-2"],
            spawner_of={a.name: a for a in apps}.__getitem__,
            stop_server=stop_server,
            start_server=start_server,
            words={"servers": ("app-1", "app-2")},
        )
    assert stopped == ["app-1", "app-2"]
    assert (failed.value.status_code, failed.value.outcome) == (400, "start-failed")
    text = failed.value.jupyterhub_message
    print(f"the move's page says: {text}")
    assert text.startswith("'app-1' runs again; 'app-2' stopped, but did not start again. "), text
    assert "'app-2' cannot start" in text or "app-2" in text.split("again. ", 1)[1], text
    assert not any(word in text for word in PYTHON_WORDS)
    pods = {p.metadata.name: p for p in (await kube.core.list_namespaced_pod(kube.namespace)).items}
    assert pods[apps[0].pod_name].spec.node_name == cpu_node  # runs again, off the GPU node
    assert apps[1].pod_name not in pods  # did not start again, as said
