"""Fail fast's late refusal offers the move of the whole set (docs/failure-modes.md, mode 3), on
the real control plane (kube-scheduler, kube-controller-manager's attach/detach controller,
kwok).

alice's default server and 'pandas-app' (1 CPU each) run on node n1 (4 CPU); node n2 (8 CPU) is
empty.  The check says 'big' (1.5 CPU) fits n1; between the check and the creation of its pod
(KubeSpawner's ``modify_pod_hook`` runs there), another team's pod is scheduled onto n1 and
takes the room.  kube-scheduler then cannot place 'big' on n1: the fail fast ends the spawn
(``unschedulable-pinned``) and its refusal offers, beside the way out, the move of all three to
n2.  Taken, the set runs together on n2.
"""

from __future__ import annotations

from nebari_colocate.jupyterhub import ColocationRefused
from nebari_colocate.refusing import move_url
from nebari_colocate.setmove import Move
from nebari_colocate.wayout import WayOut
from tests.support.builders import name_is, required_affinity, term

from .test_set_move import PYTHON_WORDS, attached_only_on, nodes_of, stepper, take, view_knows

MOVE_WORDS = (
    "Or: Restart your default server and 'pandas-app' together on a machine with room for all "
    "three, then start 'big'. Running kernels restart."
)


async def test_a_node_filled_after_the_check_ends_the_spawn_offering_the_move_which_runs_the_set(
    kube, spawners
):
    n1, n2 = f"{kube.namespace}-n1", f"{kube.namespace}-n2"
    await kube.create_node(n1, cpu="4")
    await kube.create_bound_claim("claim-alice")
    servers = {
        "": spawners.make("alice", cpu_guarantee=1),
        "pandas-app": spawners.make("alice", "pandas-app", cpu_guarantee=1),
    }
    for server in servers.values():
        await spawners.start(server)
    await kube.create_node(n2, cpu="8")

    await view_knows(servers[""], n2)

    filled: list[str] = []

    async def fill_n1_after_the_check(spawner, pod):
        # After the check said 'big' fits n1 (2 CPU free), before its pod is created: another
        # team's pod, bound to n1 by kube-scheduler itself, so the scheduler counts it when it
        # places 'big' (a pod created with nodeName reaches the scheduler's cache by a watch of
        # its own, which could come late).  Once only: the move starts 'big' again.
        if not filled:
            filled.append("other-team")
            await kube.create_pod(
                "other-team",
                requests={"cpu": "1.5"},
                affinity=required_affinity(term(fields=[name_is(n1)])),
            )
            assert await kube.wait_for_binding("other-team") == n1
        return pod

    big = spawners.make("alice", "big", cpu_guarantee=1.5, modify_pod_hook=fill_n1_after_the_check)
    servers["big"] = big
    try:
        await spawners.start(big)
    except ColocationRefused as exc:
        refused = exc
    else:
        raise AssertionError("'big' started on a full n1")
    assert filled == ["other-team"]  # the check passed: the pod was created

    verdict = refused.event_verdict
    assert verdict is not None and verdict.reason == "unschedulable-pinned"
    assert verdict.way_out == WayOut(("", "pandas-app"), "big", Move(("", "pandas-app"), "big", n2))
    text = refused.jupyterhub_message
    print(f"the late refusal says: {text}")
    assert MOVE_WORDS in text and not any(word in text for word in PYTHON_WORDS)
    shown = refused.jupyterhub_html_message
    assert 'class="colocate-way-out-form colocate-set-move-form"' in shown
    assert move_url(big).endswith("/colocate/move-set/alice/big")
    assert f'action="{move_url(big)}"' in shown
    assert f'<input type="hidden" name="node" value="{n2}">' in shown
    assert '<div class="colocate-set-move-note">Running kernels restart.</div>' in shown

    # what the move's handler re-checks (set_move_step._recheck)
    failure = big.colocation_failure
    assert failure is not None and failure.way_out.move.node == n2
    assert failure.blockers.servers == ("", "pandas-app") and failure.blockers.node == n1
    assert failure.way_out_json()["move"] == {
        "restart": ["", "pandas-app"],
        "start": "big",
        "node": n2,
        "new_node": False,
    }

    # the progress stream of the ended spawn carries it in its way_out field
    stream = [event async for event in big.progress()]
    with_way_out = [e for e in stream if "way_out" in e]
    assert with_way_out, stream
    assert all(e["way_out"] == failure.way_out_json() for e in with_way_out)
    assert any(e.get("html_message") == shown for e in stream)

    # taken: the set runs together on n2, the home attached there only
    stopped, stop_server, start_server = stepper(spawners, servers)
    await take(servers, n2, stopped, stop_server, start_server)
    assert stopped == ["", "pandas-app"]
    assert await nodes_of(kube, servers) == {"": n2, "pandas-app": n2, "big": n2}
    for server in servers.values():
        await kube.wait_for_running(server.pod_name)

    await attached_only_on(kube, n2)
