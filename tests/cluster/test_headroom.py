"""Headroom for the first server on the real control plane (docs/decisions.md, "Headroom for the
first server"): the real kube-scheduler, and a second one serving zero-to-jupyterhub's
user-scheduler profile (NodeResourcesFit ``MostAllocated`` at weight 121, NodeAffinity at 14631,
``tests/support/z2jh.py``), real spawners, kwok running the pods.

Two nodes of 4 CPU: ``full`` already runs another user's server of 2 CPU, ``roomy`` nothing.
alice's lab asks 1 CPU, her app 1.5 CPU later.  The user-scheduler packs the lab onto ``full``
(3 of 4 CPU), and the app no longer fits beside it: failure mode 3, refused at once.  With
headroom the lab prefers ``roomy``, and the app starts beside it.
"""

from __future__ import annotations

import pytest

from nebari_colocate.headroom import STATE_KEY
from nebari_colocate.spawner import ColocationRefused
from tests.support.waiting import wait_until

FOOTPRINT = {"cpu": "2500m"}


async def two_nodes_one_of_them_busy(kube, busy_cpu: str = "2") -> None:
    await kube.create_node("full", cpu="4")
    await kube.create_node("roomy", cpu="4")
    await kube.create_pod("bob-server", node_name="full", requests={"cpu": busy_cpu})
    await kube.create_bound_claim("claim-alice")


def preferred_nodes(pod) -> list[str]:
    affinity = pod.spec.affinity
    node_affinity = affinity.node_affinity if affinity else None
    terms = (
        (node_affinity.preferred_during_scheduling_ignored_during_execution or [])
        if node_affinity
        else []
    )
    return [v for t in terms for f in t.preference.match_fields or [] for v in f.values]


@pytest.mark.parametrize("headroom", [False, True], ids=["without-headroom", "with-headroom"])
async def test_headroom_turns_the_capacity_cap_into_a_start_under_the_user_scheduler(
    kube, spawners, user_scheduler, headroom
):
    await two_nodes_one_of_them_busy(kube)
    traits = {
        "scheduler_name": user_scheduler,
        "colocation_headroom": headroom,
        "colocation_headroom_footprint": FOOTPRINT,
    }
    lab = spawners.make("alice", cpu_guarantee=1, **traits)
    await spawners.start(lab)
    pod = await kube.core.read_namespaced_pod(lab.pod_name, kube.namespace)
    app = spawners.make("alice", "app", cpu_guarantee=1.5, **traits)
    if not headroom:
        # MostAllocated: the fullest node that takes the lab
        assert pod.spec.node_name == "full"
        assert preferred_nodes(pod) == []
        with pytest.raises(ColocationRefused) as refused:
            await spawners.start(app)
        assert refused.value.decision.reasons == ["insufficient:cpu"]
        return
    # the preferred term outweighs MostAllocated: NodeAffinity 14631 against NodeResourcesFit 121
    assert preferred_nodes(pod) == ["roomy"]
    assert pod.spec.node_name == "roomy"
    await spawners.start(app)
    assert (await kube.wait_for_binding(app.pod_name)) == "roomy"
    # the set alice ran is kept in the app's spawner state (JupyterHub saves get_state())
    assert app.get_state()[STATE_KEY]["cpu"] == 2500


async def test_the_largest_set_a_user_ran_before_gives_her_next_lab_room(
    kube, spawners, user_scheduler
):
    await two_nodes_one_of_them_busy(kube, busy_cpu="2500m")
    traits = {"scheduler_name": user_scheduler, "colocation_headroom": True}
    # the first session: no history, no footprint configured, so no preference
    lab = spawners.make("alice", cpu_guarantee=1, **traits)
    app = spawners.make("alice", "app", cpu_guarantee=0.5, **traits)
    await spawners.start(lab)
    await spawners.start(app)
    assert (await kube.wait_for_binding(app.pod_name)) == "full"  # 4 of 4 CPU
    saved = {"": lab.get_state(), "app": app.get_state()}
    assert saved["app"][STATE_KEY]["cpu"] == 1500
    await app.stop(now=True)
    await lab.stop(now=True)
    pvc = await kube.core.read_namespaced_persistent_volume_claim("claim-alice", kube.namespace)

    async def attached() -> list:
        found = await kube.volume_attachments(pvc.spec.volume_name)
        return [a for a in found if (a.get("status") or {}).get("attached")]

    await wait_until(attached, until=lambda left: not left, timeout=60, what="the home detached")
    # meanwhile the node filled up a little more (another of bob's servers)
    await kube.create_pod("bob-app", node_name="full", requests={"cpu": "500m"})

    # the next session, after a hub restart: the states come back from the hub's database
    lab = spawners.make("alice", cpu_guarantee=1, **traits)
    app = spawners.make("alice", "app", cpu_guarantee=0.5, **traits)
    app.load_state(saved["app"])
    lab.load_state(saved[""])
    lab.user.spawners = {"": lab, "app": app}  # JupyterHub's User holds them so
    await spawners.start(lab)
    pod = await kube.core.read_namespaced_pod(lab.pod_name, kube.namespace)
    assert preferred_nodes(pod) == ["roomy"]  # 'full' has 1 CPU free: the lab, not the set
    assert pod.spec.node_name == "roomy"
    await spawners.start(app)
    assert (await kube.wait_for_binding(app.pod_name)) == "roomy"


async def test_a_preferred_node_that_cannot_take_the_pod_blocks_nothing(kube, spawners):
    """The preference names 'roomy'; it is cordoned after the check and before the pod is
    created: the lab starts on 'full', the node it could still go to."""
    await two_nodes_one_of_them_busy(kube)

    async def cordon_the_preferred_node(spawner, pod):
        await kube.cordon_seen_by_scheduler("roomy")
        return pod

    lab = spawners.make(
        "alice",
        cpu_guarantee=1,
        colocation_headroom=True,
        colocation_headroom_footprint=FOOTPRINT,
        modify_pod_hook=cordon_the_preferred_node,
    )
    await spawners.start(lab)
    pod = await kube.core.read_namespaced_pod(lab.pod_name, kube.namespace)
    assert preferred_nodes(pod) == ["roomy"]
    assert pod.spec.node_name == "full"
    assert pod.status.phase == "Running"
