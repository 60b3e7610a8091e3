"""The move of the whole set (docs/decisions.md, "The move of the whole set") on the real control
plane (kube-scheduler, kube-controller-manager's attach/detach controller, kwok): the step the hub's
handler runs (:func:`~nebari_colocate.set_move_step.move_whole_set`) with real spawners for the
stop and the start.

alice's default server and 'pandas-app' (1 CPU each) and bob's server (2 CPU) fill node n1 (4
CPU); 'big' (3 CPU) is refused there for lack of room. Node n2 (8 CPU) holds alice's whole set,
so the refusal offers, beside the way out, the move of all three to n2:

- taken, every server of the set runs on n2, and the home's volume is attached there only;
- stale (n2's room taken after the refusal, no other node holds the set): 409, nothing
  stopped; with another node that holds it (n3), the set goes there;
- part way (n2's room taken after the stop): what was stopped starts again where it fits (n1),
  and the words say so.
"""

from __future__ import annotations

import pytest

from nebari_colocate.set_move_step import SetMoveFailed, move_whole_set
from tests.support.waiting import wait_until

PYTHON_WORDS = ("Error", "Exception", "Traceback", "RuntimeError")


async def refused_set(kube, spawners):
    """n1 full (alice's two servers, bob's), n2 with room; alice's 'big' refused on n1."""
    n1, n2 = f"{kube.namespace}-n1", f"{kube.namespace}-n2"
    await kube.create_node(n1, cpu="4")
    await kube.create_bound_claim("claim-alice")
    await kube.create_bound_claim("claim-bob")
    servers = {
        "": spawners.make("alice", cpu_guarantee=1),
        "pandas-app": spawners.make("alice", "pandas-app", cpu_guarantee=1),
    }
    for server in servers.values():
        await spawners.start(server)
    await spawners.start(spawners.make("bob", cpu_guarantee=1.5))
    await kube.create_node(n2, cpu="8")
    big = spawners.make("alice", "big", cpu_guarantee=3)
    servers["big"] = big

    async def refused():
        try:
            await spawners.start(big)
        except Exception as exc:
            return exc
        return None

    # the live view has seen n2 once the refusal offers the move there
    async def offered():
        error = await refused()
        failure = big.colocation_failure
        move = failure.way_out.move if failure is not None and failure.way_out else None
        return (error, move) if move is not None and move.node == n2 else None

    error, _ = await wait_until(offered, timeout=30, what="the refusal to offer the move")
    assert error.decision.reasons == ["insufficient:cpu"]
    assert big.colocation_failure.way_out_json()["move"] == {
        "restart": ["", "pandas-app"],
        "start": "big",
        "node": n2,
        "new_node": False,
    }
    return n1, n2, servers


def stepper(spawners, servers):
    """The stop and the start as JupyterHub's handler gives them (a failed start is stopped,
    as JupyterHub stops a server whose spawn failed)."""
    stopped: list[str] = []

    async def stop_server(name: str) -> None:
        stopped.append(name)
        await servers[name].stop(now=True)

    async def start_server(name: str, options: dict) -> None:
        try:
            await spawners.start(servers[name])
        except Exception:
            await servers[name].stop(now=True)
            raise

    return stopped, stop_server, start_server


async def take(servers, node, stopped, stop_server, start_server) -> None:
    """The move of 'big''s refusal, as the handler takes it: alice's two servers to ``node``."""
    await move_whole_set(
        servers["big"],
        ["", "pandas-app"],
        node,
        spawner_of=servers.__getitem__,
        is_running=lambda name: name not in stopped,
        stop_server=stop_server,
        start_server=start_server,
        words={"start": "big", "restart": ("", "pandas-app")},
    )


async def attached_only_on(kube, node: str) -> None:
    """Wait until alice's home is attached on ``node`` and nowhere else."""

    async def attached():
        pvc = await kube.core.read_namespaced_persistent_volume_claim("claim-alice", kube.namespace)
        found = await kube.volume_attachments(pvc.spec.volume_name)
        nodes = {va["spec"]["nodeName"] for va in found}
        return nodes if nodes == {node} else None

    await wait_until(attached, timeout=60, what=f"the home attached on {node} only")


async def view_knows(spawner, node: str) -> None:
    """Wait until the hub's live view (``spawner``'s) knows node ``node``."""

    async def known():
        state = spawner.whole_set_state({"metadata": {}, "spec": {}})
        return (state is not None and state.nodes is not None and node in state.nodes) or None

    await wait_until(known, timeout=30, what=f"the live view to know {node}")


async def nodes_of(kube, servers) -> dict[str, str | None]:
    pods = {p.metadata.name: p for p in (await kube.core.list_namespaced_pod(kube.namespace)).items}
    return {
        name: (pods[s.pod_name].spec.node_name if s.pod_name in pods else None)
        for name, s in servers.items()
    }


async def test_the_whole_set_moves_to_a_node_with_room_for_all_of_it(kube, spawners):
    _, n2, servers = await refused_set(kube, spawners)
    stopped, stop_server, start_server = stepper(spawners, servers)
    await take(servers, n2, stopped, stop_server, start_server)
    assert stopped == ["", "pandas-app"]
    assert await nodes_of(kube, servers) == {"": n2, "pandas-app": n2, "big": n2}
    for server in servers.values():
        await kube.wait_for_running(server.pod_name)

    await attached_only_on(kube, n2)


async def test_a_stale_move_stops_nothing(kube, spawners):
    n1, n2, servers = await refused_set(kube, spawners)
    # another pod takes n2's room after the refusal
    await kube.create_pod("other-team", node_name=n2, requests={"cpu": "6"})

    async def seen():
        state = servers["big"].whole_set_state({"metadata": {}, "spec": {}})
        pods = state.pods_on_node(n2) if state is not None else ()
        return bool(pods) or None

    await wait_until(seen, timeout=30, what="the live view to see n2 taken")
    stopped, stop_server, start_server = stepper(spawners, servers)
    with pytest.raises(SetMoveFailed) as failed:
        await take(servers, n2, stopped, stop_server, start_server)
    assert (failed.value.status_code, failed.value.outcome) == (409, "stale")
    assert stopped == []
    assert await nodes_of(kube, servers) == {"": n1, "pandas-app": n1, "big": None}


async def test_a_move_whose_node_filled_up_starts_the_set_again_where_it_fits(kube, spawners):
    n1, n2, servers = await refused_set(kube, spawners)
    stopped, stop_server, start_server = stepper(spawners, servers)

    async def stop_then_fill(name: str) -> None:
        await stop_server(name)
        if len(stopped) == 2:  # n2's room taken between the stop and the start
            await kube.create_pod("other-team", node_name=n2, requests={"cpu": "7.5"})

    with pytest.raises(SetMoveFailed) as failed:
        await take(servers, n2, stopped, stop_then_fill, start_server)
    assert (failed.value.status_code, failed.value.outcome) == (409, "no-room")
    text = failed.value.jupyterhub_message
    print(f"the move's page says: {text}")
    assert text == (
        "No machine had room for all your servers when they started, so nothing was "
        "moved. Your default server and 'pandas-app' run again. 'big' was not started."
    )
    assert not any(word in text for word in PYTHON_WORDS)
    assert "&#x27;pandas-app&#x27; run again" in failed.value.jupyterhub_html_message
    assert await nodes_of(kube, servers) == {"": n1, "pandas-app": n1, "big": None}


async def room_holders(kube) -> list[str]:
    pods = await kube.core.list_namespaced_pod(kube.namespace, label_selector="nebari.dev/room-for")
    return [p.metadata.name for p in pods.items]


async def test_another_users_pod_scheduled_during_the_move_does_not_take_the_sets_room(
    kube, spawners
):
    """The room is held on n2 before anything is stopped: another user's pod that the
    scheduler would place on n2 while the set is stopped and its home released (n2 is the only
    node with room for it then) stays Pending, and the whole set runs on n2.  (It is bigger
    than n2's room beside the set plus its largest server: each server's room is let go just
    before that server starts, and a pod pending since then may take it first.)"""
    _, n2, servers = await refused_set(kube, spawners)
    stopped, stop_server, start_server = stepper(spawners, servers)

    async def stop_then_schedule(name: str) -> None:
        if not stopped:  # between the click and the restart, through the scheduler
            await kube.create_pod("other-team", requests={"cpu": "6.5"})
        await stop_server(name)

    await take(servers, n2, stopped, stop_then_schedule, start_server)
    assert await nodes_of(kube, servers) == {"": n2, "pandas-app": n2, "big": n2}
    other = await kube.core.read_namespaced_pod("other-team", kube.namespace)
    assert other.spec.node_name is None  # no room for it anywhere: n2's was held for the set
    assert await room_holders(kube) == []


async def test_a_move_whose_room_cannot_be_held_stops_nothing(kube, spawners):
    """n2 taken (a pod bound there by name) after the refusal, the move taken at once: the pods
    that would hold its room are not bound, so nothing is stopped (409)."""
    n1, n2, servers = await refused_set(kube, spawners)
    await kube.create_pod("other-team", node_name=n2, requests={"cpu": "6"})
    stopped, stop_server, start_server = stepper(spawners, servers)
    with pytest.raises(SetMoveFailed) as failed:
        await take(servers, n2, stopped, stop_server, start_server)
    assert (failed.value.status_code, failed.value.outcome) == (409, "stale")
    assert stopped == []
    assert await nodes_of(kube, servers) == {"": n1, "pandas-app": n1, "big": None}
    assert await room_holders(kube) == []


async def test_a_move_whose_node_lost_its_room_goes_to_the_next_node_that_holds_the_set(
    kube, spawners
):
    """n2 taken after the refusal, n3 (8 CPU) added: the person consented to restart the set
    on a machine with room, so the move holds the room on n3 instead, and the set runs there
    (before: 409 stale, the person had to click again)."""
    _, n2, servers = await refused_set(kube, spawners)
    await kube.create_pod("other-team", node_name=n2, requests={"cpu": "6"})
    n3 = f"{kube.namespace}-n3"
    await kube.create_node(n3, cpu="8")

    await view_knows(servers["big"], n3)
    stopped, stop_server, start_server = stepper(spawners, servers)
    await take(servers, n2, stopped, stop_server, start_server)
    assert stopped == ["", "pandas-app"]
    assert await nodes_of(kube, servers) == {"": n3, "pandas-app": n3, "big": n3}
    assert await room_holders(kube) == []


async def move_with_a_thief(kube, spawners, before: str, cpu: str):
    """'big''s refusal (n1 full, n2 chosen) and n3 (8 CPU) added, then the move taken with
    another pod bound to n2 by kube-scheduler itself (its cache counts it at once) just before
    ``before`` starts there the first time, taking ``cpu`` of n2's room; (stopped, starts, n2,
    n3, servers)."""
    from tests.support.builders import name_is, required_affinity, term

    _, n2, servers = await refused_set(kube, spawners)
    n3 = f"{kube.namespace}-n3"
    await kube.create_node(n3, cpu="8")
    await view_knows(servers["big"], n3)
    stopped, stop_server, start_server = stepper(spawners, servers)
    running = {"", "pandas-app"}
    starts: list[str] = []

    async def stop_one(name: str) -> None:
        running.discard(name)
        await stop_server(name)

    async def start_after_a_thief(name: str, options: dict) -> None:
        starts.append(name)
        if name == before and starts.count(before) == 1:
            await kube.create_pod(
                "other-team",
                requests={"cpu": cpu},
                affinity=required_affinity(term(fields=[name_is(n2)])),
            )
            assert await kube.wait_for_binding("other-team") == n2
        await start_server(name, options)
        running.add(name)

    await move_whole_set(
        servers["big"],
        ["", "pandas-app"],
        n2,
        spawner_of=servers.__getitem__,
        is_running=running.__contains__,
        stop_server=stop_one,
        start_server=start_after_a_thief,
        words={"start": "big", "restart": ("", "pandas-app")},
    )
    return stopped, starts, n3, servers


async def test_a_move_whose_new_servers_room_is_taken_at_the_last_moment_is_taken_again(
    kube, spawners
):
    """The set restarted on n2; just before 'big' starts there (its room let go), another pod
    is bound to n2 and takes that room (a pod pending at that moment is served first).  'big''s
    start ends late (fail fast, ``unschedulable-pinned``) with the move of the set, which runs
    on n2 now, to n3; the move takes it at once, once: the set and 'big' run on n3 (before:
    ``start-failed``, 'big' a dead end)."""
    stopped, starts, n3, servers = await move_with_a_thief(kube, spawners, "big", cpu="4.5")
    assert stopped == ["", "pandas-app", "", "pandas-app"]  # stopped on n1, then on n2
    assert starts == ["", "pandas-app", "big", "", "pandas-app", "big"]
    assert await nodes_of(kube, servers) == {"": n3, "pandas-app": n3, "big": n3}
    assert await room_holders(kube) == []


async def test_a_move_whose_restarted_servers_room_is_taken_at_the_last_moment_moves_on(
    kube, spawners
):
    """The default server restarted on n2; just before 'pandas-app' starts there (its room let
    go), another pod is bound to n2 and takes most of n2's room.  'pandas-app' starts again
    where it fits (beside the home, on n2, in the room let go for 'big'); 'big' no longer fits
    beside the set, and its refusal offers the move of the set to n3, which is taken at once:
    all three run on n3 (before: ``no-room``, 'big' a dead end)."""
    stopped, _, n3, servers = await move_with_a_thief(kube, spawners, "pandas-app", cpu="3.5")
    assert stopped == ["", "pandas-app", "", "pandas-app"]  # stopped on n1, then on n2
    assert await nodes_of(kube, servers) == {"": n3, "pandas-app": n3, "big": n3}
    assert await room_holders(kube) == []
