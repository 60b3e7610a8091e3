"""Fail fast's late refusal offers the move of the whole set onto a node Karpenter adds
(docs/failure-modes.md, mode 3), on the real control plane with Karpenter (kwok provider,
tests/support/autoscaler.py).

Every node comes from Karpenter: alice's lab and app run on a small machine; the check says 'big'
fits there, and another team's pod takes the room before 'big''s pod is created.  kube-scheduler
cannot place 'big' (Karpenter leaves a pod pinned by ``matchFields`` alone), the fail fast ends
the spawn, and no other node exists: its refusal offers the move onto a new machine (``node``
null).  Taken, Karpenter adds a machine that holds the set, and the set starts there together.
"""

from __future__ import annotations

import pytest

from nebari_colocate.jupyterhub import ColocationRefused
from tests.support.autoscaler import NODEPOOL_LABEL, describe
from tests.support.builders import name_is, required_affinity, term

from .test_karpenter import node_of
from .test_karpenter_set_move import APP
from .test_set_move import stepper, take


@pytest.fixture
def kube(karpenter_kube):
    return karpenter_kube


async def test_the_late_refusal_offers_a_new_machine_for_the_set_and_the_set_runs_there(
    kube, spawners
):
    await kube.create_bound_claim("claim-alice")
    servers = {
        "": spawners.make("alice", cpu_guarantee=1, **APP),
        "pandas-app": spawners.make("alice", "pandas-app", cpu_guarantee=0.5, **APP),
    }
    for server in servers.values():
        await spawners.start(server)
    small = (await node_of(kube, servers[""].pod_name))["metadata"]["name"]
    assert (await node_of(kube, servers["pandas-app"].pod_name))["metadata"]["name"] == small
    filled: list[str] = []

    async def fill_after_the_check(spawner, pod):
        # the check found room for 'big' on the small machine; another team's pod, bound there
        # by kube-scheduler, takes it before 'big''s pod is created (once: the move starts it)
        if not filled:
            filled.append("other-team")
            pin = required_affinity(term(fields=[name_is(small)]))
            await kube.create_pod("other-team", requests={"cpu": "0.3"}, affinity=pin)
            assert await kube.wait_for_binding("other-team") == small
        return pod

    big = servers["big"] = spawners.make(
        "alice", "big", cpu_guarantee=0.3, modify_pod_hook=fill_after_the_check, **APP
    )
    with pytest.raises(ColocationRefused) as refused:
        await spawners.start(big)
    assert filled == ["other-team"]
    assert refused.value.event_verdict.reason == "unschedulable-pinned"
    assert big.colocation_failure.way_out_json()["move"] == {
        "restart": ["", "pandas-app"],
        "start": "big",
        "node": None,
        "new_node": True,
    }
    assert "on a new machine with room for all three" in refused.value.jupyterhub_message
    assert '<input type="hidden" name="node" value="">' in refused.value.jupyterhub_html_message

    stopped, stop_server, start_server = stepper(spawners, servers)
    await take(servers, "", stopped, stop_server, start_server)
    nodes = {name: (await node_of(kube, s.pod_name)) for name, s in servers.items()}
    names = {name: n["metadata"]["name"] for name, n in nodes.items()}
    print(f"the set runs together on {describe([nodes['big']])}")
    assert len(set(names.values())) == 1 and names["big"] != small, names
    assert nodes["big"]["metadata"]["labels"][NODEPOOL_LABEL] == "cpu"
