"""KubeSpawner's start(), poll() and stop() through the pod reflector on the live view's watch
(nebari_colocate.shared_reflector), against the real kube-apiserver, kube-scheduler and kwok; and
KubeSpawner's own reflector where the watch is not shared.

Every test ends with the invariant (checked by the ``kube`` fixture's teardown): no two pods that
mount the same exclusive claim are bound to different nodes.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from kubespawner import KubeSpawner
from kubespawner.spawner import PodReflector

from nebari_colocate.shared_reflector import SharedPodReflector
from nebari_colocate.view import ClusterView
from tests.cluster.test_spawner_cluster import grant_z2jh_hub_role
from tests.support import helpers
from tests.support.waiting import wait_until


def reflectors_of(namespace: str) -> dict:
    return {k: r for k, r in KubeSpawner.reflectors.items() if k[0] == "pods" and k[1] == namespace}


async def exit_container(kube, spawner, code: int) -> None:
    """What the kubelet reports when the server's container exits with ``code``."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    await kube.core.patch_namespaced_pod_status(
        spawner.pod_name,
        kube.namespace,
        {
            "status": {
                "phase": "Failed",
                "conditions": [{"type": "Ready", "status": "False", "reason": "PodFailed"}],
                "containerStatuses": [
                    {
                        "name": "notebook",
                        "image": spawner.image,
                        "imageID": "",
                        "ready": False,
                        "restartCount": 0,
                        "started": False,
                        "state": {
                            "terminated": {
                                "exitCode": code,
                                "reason": "Error",
                                "startedAt": now,
                                "finishedAt": now,
                            }
                        },
                    }
                ],
            }
        },
    )


async def test_start_and_poll_read_the_live_views_watch_and_no_second_watch_runs(kube, spawners):
    await kube.create_node("cpu-1", cpu="8")
    await kube.create_bound_claim("claim-alice")
    lab = spawners.make("alice", colocation_share_pod_watch=True)
    url = await spawners.start(lab)
    assert url.startswith("http://127.")  # start() read the pod's IP from the reflector
    reflector = lab.pod_reflector
    assert isinstance(reflector, SharedPodReflector)
    assert list(reflectors_of(kube.namespace).values()) == [reflector]
    key = f"{kube.namespace}/{lab.pod_name}"
    view = ClusterView.shared(lab.api.api_client, kube.namespace)
    assert reflector.pods[key] is view.pods.items[key]  # the very objects of the view's store
    assert lab.pod_id == reflector.pods[key]["metadata"]["uid"]
    assert await lab.poll() is None

    # a pod without KubeSpawner's component label is in the view, not in the reflector
    await kube.create_pod("backup", claims=["claim-alice"], node_name="cpu-1")
    await wait_until(
        lambda: view.has_pod(kube.namespace, "backup"), timeout=30, what="backup in the view"
    )
    assert f"{kube.namespace}/backup" not in reflector.pods
    assert sorted(reflector.pods) == [key]

    app = spawners.make("alice", "app", colocation_share_pod_watch=True)
    await spawners.start(app)
    assert app.pod_reflector is reflector  # one reflector for every spawner of the namespace
    await app.stop(now=True)  # returns once the reflector no longer has the pod
    assert f"{kube.namespace}/{app.pod_name}" not in reflector.pods
    assert await app.poll() == 1
    assert await lab.poll() is None


async def test_start_and_stop_end_on_the_pods_own_change_not_on_kubespawners_next_look(
    kube, spawners
):
    """KubeSpawner's wait for the pod (running, then gone) looks at the reflector with a
    backoff of full jitter up to 5 s apart; the spawner waits first, woken by the pod's change
    in the shared reflector, so KubeSpawner's wait finds it at its first look."""
    await kube.create_node("cpu-1", cpu="8")
    await kube.create_bound_claim("claim-alice")
    lab = spawners.make("alice", colocation_share_pod_watch=True)
    kubespawners_looks: list[bool] = []
    ours = {"looking": False}
    is_pod_running, pod_started = lab.is_pod_running, lab._pod_started

    def looked(pod):
        running = is_pod_running(pod)
        if not ours["looking"]:
            kubespawners_looks.append(running)
        return running

    def spawners_look(pod):
        ours["looking"] = True
        try:
            return pod_started(pod)
        finally:
            ours["looking"] = False

    lab.is_pod_running, lab._pod_started = looked, spawners_look
    await spawners.start(lab)
    reflector = lab.pod_reflector
    assert isinstance(reflector, SharedPodReflector)
    assert reflector.waits_timed_out == 0
    # KubeSpawner's wait looked once and found it running (alone, it looks right after the
    # create, finds it Pending, and sleeps)
    assert kubespawners_looks == [True]
    key = f"{kube.namespace}/{lab.pod_name}"
    met = reflector.waits_met
    await lab.stop(now=True)
    assert key not in reflector.pods
    assert (reflector.waits_met - met, reflector.waits_timed_out) == (1, 0)  # the wait for gone


async def test_a_pod_that_never_runs_ends_the_start_with_kubespawners_timeout(kube, spawners):
    """The spawner's wait ends after ``start_timeout`` as KubeSpawner's own does: its words,
    and the pod is left to JupyterHub's stop (here: the teardown's)."""
    await kube.create_node("cpu-1", cpu="8")
    await kube.create_bound_claim("claim-alice")
    lab = spawners.make(
        "alice",
        colocation_share_pod_watch=True,
        fail_fast_on_events=False,
        start_timeout=3,
        extra_annotations=helpers.HOLD,  # scheduled, never run (the kubelet stub holds it)
    )
    with pytest.raises(asyncio.TimeoutError, match="did not start in 3 seconds"):
        await spawners.start(lab)
    reflector = lab.pod_reflector
    assert reflector.waits_timed_out == 1
    assert f"{kube.namespace}/{lab.pod_name}" in reflector.pods  # shown, not running


async def test_a_reflector_replaced_while_a_start_waits_is_not_that_starts_timeout(kube, spawners):
    """Another spawn's timeout (or a fallback) replaces the shared reflector while this start
    waits for its pod: the wait ends, not met, and the start goes on with KubeSpawner's own
    wait on the new reflector, instead of failing at once with a timeout it did not have."""
    await kube.create_node("cpu-1", cpu="8")
    await kube.create_bound_claim("claim-alice")
    lab = spawners.make(
        "alice",
        colocation_share_pod_watch=True,
        fail_fast_on_events=False,
        start_timeout=60,
        extra_annotations=helpers.HOLD,  # Pending until the annotation is removed
    )
    start = asyncio.ensure_future(spawners.start(lab))
    key = f"{kube.namespace}/{lab.pod_name}"
    await wait_until(
        lambda: lab.pod_reflector is not None and key in lab.pod_reflector.pods,
        timeout=30,
        what="the held pod in the reflector",
    )
    old = lab.pod_reflector
    new = await lab._start_watching_pods(replace=True)
    assert new is not old and old.stopped
    await asyncio.sleep(0.5)
    assert not start.done(), start  # no timeout of its own
    await kube.core.patch_namespaced_pod(
        lab.pod_name,
        kube.namespace,
        {"metadata": {"annotations": {helpers.HOLD_ANNOTATION: None}}},
    )
    url = await asyncio.wait_for(start, 60)
    assert url.startswith("http://127.")
    assert lab.pod_reflector is new and lab.is_pod_running(new.pods[key])


async def test_a_server_pod_deleted_behind_the_hubs_back_polls_as_stopped(kube, spawners):
    await kube.create_node("cpu-1", cpu="8")
    await kube.create_bound_claim("claim-alice")
    lab = spawners.make("alice", colocation_share_pod_watch=True)
    await spawners.start(lab)
    assert isinstance(lab.pod_reflector, SharedPodReflector)
    await kube.core.delete_namespaced_pod(lab.pod_name, kube.namespace, grace_period_seconds=0)
    await wait_until(lab.poll, until=lambda code: code == 1, timeout=30, what="poll() says 1")


async def test_a_server_whose_container_exited_polls_its_exit_code(kube, spawners):
    await kube.create_node("cpu-1", cpu="8")
    await kube.create_bound_claim("claim-alice")
    lab = spawners.make("alice", delete_stopped_pods=False, colocation_share_pod_watch=True)
    await spawners.start(lab)
    assert isinstance(lab.pod_reflector, SharedPodReflector)
    await exit_container(kube, lab, 3)
    await wait_until(lab.poll, until=lambda code: code == 3, timeout=30, what="poll() says 3")


async def test_with_only_the_z2jh_role_the_reflector_reads_the_namespaces_own_watch(kube, spawners):
    await kube.create_node("cpu-1", cpu="8")
    await kube.create_bound_claim("claim-alice")
    await grant_z2jh_hub_role(kube, "hub")
    await spawners.use_credentials(kube.user_kubeconfig("hub"))
    lab = spawners.make("alice", colocation_share_pod_watch=True)
    await spawners.start(lab)
    reflector = lab.pod_reflector
    assert isinstance(reflector, SharedPodReflector)
    assert reflector.hub.all_pods.forbidden  # the cluster-wide LIST is not allowed here
    assert reflector.source() is reflector.hub.namespace(kube.namespace).own_pods
    assert await lab.poll() is None
    await lab.stop(now=True)
    assert await lab.poll() == 1


async def test_with_sharing_off_kubespawners_own_reflector_watches_and_works(kube, spawners):
    await kube.create_node("cpu-1", cpu="8")
    await kube.create_bound_claim("claim-alice")
    lab = spawners.make("alice", colocation_share_pod_watch=False)
    await spawners.start(lab)
    assert type(lab.pod_reflector) is PodReflector
    assert await lab.poll() is None
    await lab.stop(now=True)
    assert await lab.poll() == 1


async def test_a_hook_that_reads_the_whole_pod_gets_kubespawners_own_reflector(kube, spawners):
    await kube.create_node("cpu-1", cpu="8")
    await kube.create_bound_claim("claim-alice")
    seen = []
    lab = spawners.make(
        "alice",
        colocation_share_pod_watch=True,
        after_pod_created_hook=lambda spawner, pod: seen.append(pod["spec"]["containers"][0]),
    )
    await spawners.start(lab)
    assert type(lab.pod_reflector) is PodReflector
    assert seen and "image" in seen[0]  # the whole pod, as KubeSpawner's own reflector has it
    assert await lab.poll() is None
