"""The way out of a refusal (docs/decisions.md, "The way out"): the smallest set of the user's own
servers to stop, one row per mode, tie and dead end."""

from __future__ import annotations

import pytest

from nebari_colocate.placement import Policy, decide
from tests.support.builders import gpu_node, node, pod, pvc, state, taint, volume_attachment

HOME = "claim-alice"
CPU = {"nebari.dev/node-type": "cpu"}
GPU = {"nebari.dev/node-type": "gpu"}
RWO, RWX, RWOP = "ReadWriteOnce", "ReadWriteMany", "ReadWriteOncePod"


def server(name: str, node_name: str = "cpu-1", cpu: str = "1", **kwargs) -> dict:
    """One of alice's running servers on ``node_name``, mounting her home, asking ``cpu``."""
    kwargs.setdefault("claims", [HOME])
    kwargs.setdefault("user", "alice")
    pod_name = "jupyter-alice" + (f"--{name}" if name else "")
    return pod(
        pod_name,
        node_name=node_name,
        phase="Running",
        server=name,
        requests={"cpu": cpu},
        **kwargs,
    )


def gpu_lab(**kwargs) -> dict:
    """alice's default server with the GPU profile (selector + toleration + one GPU)."""
    return pod(
        "jupyter-alice",
        user="alice",
        server="",
        claims=[HOME],
        node_selector=GPU,
        tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        requests={"cpu": "1", "nvidia.com/gpu": "1"},
        **kwargs,
    )


def big_app(cpu: str, name: str = "big") -> dict:
    return pod(
        f"jupyter-alice--{name}", user="alice", server=name, claims=[HOME], requests={"cpu": cpu}
    )


CPU1 = node("cpu-1", labels=CPU)
GPU1 = gpu_node("gpu-1", labels=GPU, taints=[taint("nvidia.com/gpu", "true")])


def bob(node_name: str = "cpu-1", cpu: str = "1") -> dict:
    return pod(
        "jupyter-bob",
        user="bob",
        server="",
        node_name=node_name,
        phase="Running",
        requests={"cpu": cpu},
    )


@pytest.mark.parametrize(
    "test_variation_id, new, objects, expect_way_out",
    [
        (
            "gpu-lab-blocked-stops-every-holder",
            gpu_lab(),
            [CPU1, GPU1, pvc(HOME), server("pandas-app"), server("dash", cpu="0.5")],
            {"stop": ["dash", "pandas-app"], "start": ""},
        ),
        (
            "capacity-cap-stops-the-fewest-that-free-enough-room",
            big_app("3"),
            # 4 CPU: 1 + 0.5 + 0.5 in use, 3 asked: the 1-CPU server alone, or both others
            [CPU1, pvc(HOME), server("a", cpu="1"), server("b", cpu="0.5"), server("c", cpu="0.5")],
            {"stop": ["a"], "start": "big"},
        ),
        (
            "capacity-cap-tie-on-count-goes-to-the-least-requested",
            big_app("2"),
            # 4 CPU: 1.5 + 1 in use, 2 asked: either alone frees enough; the smaller request wins
            [CPU1, pvc(HOME), server("a", cpu="1.5"), server("b", cpu="1")],
            {"stop": ["b"], "start": "big"},
        ),
        (
            "capacity-cap-tie-on-count-and-requests-goes-to-the-names",
            big_app("3"),
            [CPU1, pvc(HOME), server("z", cpu="1"), server("m", cpu="1")],
            {"stop": ["m"], "start": "big"},
        ),
        (
            "capacity-cap-when-other-users-fill-the-node-stops-all-to-move",
            big_app("3"),
            # bob's 2 CPU stay; even with both of alice's servers gone 2 < 3 on cpu-1: stop all
            # (the volume is released and the new server may go to another node)
            [CPU1, pvc(HOME), bob(cpu="2"), server("a", cpu="0.5"), server("b", cpu="0.5")],
            {"stop": ["a", "b"], "start": "big"},
        ),
        (
            "too-many-pods-frees-one-slot",
            big_app("0.1"),
            [
                node("cpu-1", labels=CPU, allocatable={"pods": "2"}),
                pvc(HOME),
                server("a", cpu="0.2"),
                server("b", cpu="0.1"),
            ],
            {"stop": ["b"], "start": "big"},
        ),
        (
            "the-default-server-is-named-by-the-empty-string",
            big_app("3.5"),
            [CPU1, pvc(HOME), server("", cpu="1")],
            {"stop": [""], "start": "big"},
        ),
        (
            "claim-in-use-rwop-stops-the-holder",
            big_app("0.1"),
            [CPU1, pvc(HOME, modes=[RWOP]), server("a", cpu="0.1")],
            {"stop": ["a"], "start": "big"},
        ),
        (
            "a-jobs-pod-holding-the-home-is-no-way-out",
            gpu_lab(),
            [
                CPU1,
                GPU1,
                pvc(HOME),
                server("pandas-app"),
                pod("backup-x1", node_name="cpu-1", phase="Running", claims=[HOME]),
            ],
            None,
        ),
        (
            "another-users-pod-holding-the-claim-is-no-way-out",
            gpu_lab(),
            [
                CPU1,
                GPU1,
                pvc(HOME),
                server("pandas-app"),
                pod(
                    "jupyter-bob",
                    user="bob",
                    server="",
                    node_name="cpu-1",
                    phase="Running",
                    claims=[HOME],
                ),
            ],
            None,
        ),
        (
            "pinned-by-an-attachment-only-is-no-way-out-waiting-is",
            gpu_lab(),
            [
                CPU1,
                GPU1,
                pvc(HOME, volume="pv-alice"),
                volume_attachment("pv-alice", "cpu-1"),
            ],
            None,
        ),
        (
            "rwx-home-is-never-refused-so-no-way-out",
            gpu_lab(),
            [CPU1, GPU1, pvc(HOME, modes=[RWX]), server("pandas-app")],
            None,
        ),
    ],
)
def test_the_way_out_is_the_smallest_set_of_own_servers(
    test_variation_id, new, objects, expect_way_out
):
    decision = decide(new, state(*objects), Policy())
    got = decision.way_out.as_json() if decision.way_out is not None else None
    assert got == expect_way_out, (decision.verdict, decision.reasons)
    assert decision.as_json()["way_out"] == expect_way_out


def test_a_colocate_verdict_has_no_way_out():
    decision = decide(big_app("0.5"), state(CPU1, pvc(HOME), server("a")), Policy())
    assert decision.verdict == "colocate"
    assert decision.way_out is None


# --------------------------------------------------------------------------------------------------
# what the handler re-checks before it stops anything, and waits for after


def job(node_name: str = "cpu-1") -> dict:
    return pod("etl", claims=[HOME], node_name=node_name, phase="Running")


@pytest.mark.parametrize(
    "test_variation_id, pods, expect",
    [
        ("one-app", [server("pandas-app")], (("pandas-app",), 0)),
        ("app-and-default-server", [server("app"), server("")], (("", "app"), 0)),
        ("a-job-too", [server("app"), job()], (("app",), 1)),
        (
            "another-users-server-on-the-claim",
            [
                server("app"),
                pod(
                    "jupyter-bob",
                    user="bob",
                    server="",
                    claims=[HOME],
                    node_name="cpu-1",
                    phase="Running",
                ),
            ],
            (("app",), 1),
        ),
        (
            "a-finished-pod-holds-nothing",
            [dict(server("app"), status={"phase": "Succeeded"})],
            ((), 0),
        ),
        ("nothing", [], ((), 0)),
    ],
)
def test_the_home_holders_are_the_users_servers_and_a_count_of_the_rest(
    test_variation_id, pods, expect
):
    from nebari_colocate.wayout import home_holders

    assert home_holders(pods, [HOME], "alice", None) == expect


@pytest.mark.parametrize(
    "test_variation_id, pods, attached, stopped, all_holders, expect",
    [
        ("stopped-pod-still-there", [server("app")], set(), ["app"], True, False),
        (
            "terminating-pod-still-holds",
            [server("app", deleting=True)],
            set(),
            ["app"],
            True,
            False,
        ),
        ("gone-but-still-attached-on-the-old-node", [], {"cpu-1"}, ["app"], True, False),
        ("gone-and-detached", [], set(), ["app"], True, True),
        ("attached-elsewhere-only", [], {"gpu-1"}, ["app"], True, True),
        ("attachments-unreadable", [], None, ["app"], True, True),
        ("capacity-subset-stopped-others-stay", [server("other")], {"cpu-1"}, ["app"], False, True),
        (
            "capacity-subset-not-yet-gone",
            [server("app"), server("other")],
            None,
            ["app"],
            False,
            False,
        ),
        ("another-pod-came-meanwhile", [server("new")], set(), ["app"], True, False),
    ],
)
def test_the_home_is_released_once_the_stopped_servers_are_gone_and_detached(
    test_variation_id, pods, attached, stopped, all_holders, expect
):
    from nebari_colocate.wayout import home_released

    released = home_released(
        pods, attached, claims=[HOME], stopped=stopped, all_holders=all_holders, node="cpu-1"
    )
    assert released is expect


# --------------------------------------------------------------------------------------------------
# whether stopping servers can help, declared beside every reason code (placement.STOPPING_HELPS)


def test_every_reason_code_declares_whether_stopping_servers_can_help():
    from nebari_colocate.placement import REASON_CODES, STOPPING_HELPS
    from nebari_colocate.wayout import REMEDIES

    assert sorted(STOPPING_HELPS) == sorted(REASON_CODES)
    assert set(STOPPING_HELPS.values()) <= set(REMEDIES)


@pytest.mark.parametrize(
    "test_variation_id, code, expect",
    [
        ("a-cordon-is-left-by-stopping-every-holder", "node-unschedulable", "release"),
        ("any-resource-is-room-on-the-node", "insufficient:example.com/fpga", "room"),
        ("a-pod-count-is-room-on-the-node", "too-many-pods", "room"),
        ("a-split-volume-needs-an-administrator", "split-attachment", "unresolvable"),
        ("the-volumes-own-node-affinity-is-no-stop-away", "volume-node-affinity", "unresolvable"),
        ("a-scheduler-fragment-that-is-no-reason-code", "insufficient", None),
        ("a-code-from-the-future", "a-code-from-the-future", None),
        ("no-cause-at-all", None, None),
    ],
)
def test_what_stopping_servers_can_do_is_read_from_the_code(test_variation_id, code, expect):
    from nebari_colocate.placement import stopping_helps

    assert stopping_helps(code) == expect


@pytest.mark.parametrize(
    "code, expect_stop",
    [
        ("node-selector", ("app",)),
        ("premium-node", ("app",)),
        ("volume-node-affinity", None),
        ("split-attachment", None),
        ("node-not-found", None),
        ("home-being-moved", None),
    ],
)
def test_a_way_out_is_offered_only_for_a_code_stopping_servers_can_change(code, expect_stop):
    from nebari_colocate.placement import stopping_helps
    from nebari_colocate.wayout import way_out

    holders = [server("app")]
    found = way_out(
        gpu_lab(),
        remedies=[stopping_helps(code)],
        holder_pods=holders,
        node_name="cpu-1",
        pinned_by_holders=True,
        state=state(node("cpu-1"), pvc(HOME), *holders),
        namespace="jhub",
    )
    assert (found.stop if found else None) == expect_stop, code
