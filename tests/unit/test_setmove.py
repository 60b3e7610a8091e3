"""The move of a user's whole set (docs/decisions.md, "The move of the whole set"): the node that
holds every server of the set at once, one row per fit, dead end, premium rule and tie."""

from __future__ import annotations

import pytest

from nebari_colocate.placement import Policy, decide
from nebari_colocate.setmove import (
    Move,
    choose_target,
    next_target,
    pinned_holder,
    room_holder,
    whole_set_move,
    without_node_pin,
)
from tests.support.builders import (
    expr,
    gpu_node,
    name_is,
    node,
    pod,
    pvc,
    required_affinity,
    state,
    taint,
    term,
)

HOME = "claim-alice"
KARPENTER = {"karpenter.sh/nodepool": "cpu"}


def server(name: str, node_name: str | None = "cpu-1", cpu: str = "1", **kwargs) -> dict:
    """One of alice's servers mounting her home, asking ``cpu``; running on ``node_name``."""
    kwargs.setdefault("user", "alice")
    kwargs.setdefault("claims", [HOME])
    return pod(
        "jupyter-alice" + (f"--{name}" if name else ""),
        node_name=node_name,
        phase="Running" if node_name else None,
        server=name,
        requests={"cpu": cpu},
        **kwargs,
    )


def new(name: str = "big", cpu: str = "2", **kwargs) -> dict:
    """The server alice asks for, not placed yet."""
    return server(name, node_name=None, cpu=cpu, **kwargs)


def other(name: str, node_name: str, cpu: str = "1") -> dict:
    return pod(
        name, user="bob", server="", node_name=node_name, phase="Running", requests={"cpu": cpu}
    )


PINNED = required_affinity(term(fields=[name_is("cpu-1")]))
FULL_CPU1 = [node("cpu-1"), other("bob-1", "cpu-1", cpu="2")]  # 4 CPU, 2 of bob's, 1+1 of alice's
SET = [server("", cpu="1"), server("pandas-app", cpu="1")]


@pytest.mark.parametrize(
    "test_variation_id, objects, new_pod, expect",
    [
        ("an-empty-node-holds-the-whole-set", [*FULL_CPU1, *SET, node("cpu-2")], new(), "cpu-2"),
        (
            "no-node-holds-the-whole-set",
            [*FULL_CPU1, *SET, node("cpu-2"), other("bob-2", "cpu-2", cpu="0.5")],
            new(),
            None,
        ),
        (
            "a-node-that-holds-the-new-server-alone-is-not-enough",
            [*FULL_CPU1, *SET, node("cpu-2", allocatable={"cpu": "3"})],
            new(),
            None,
        ),
        (
            "the-pod-count-counts-every-server-of-the-set",
            [*FULL_CPU1, *SET, node("cpu-2", allocatable={"pods": "2"})],
            new(),
            None,
        ),
        (
            "a-gpu-server-in-the-set-takes-the-node-with-a-gpu",
            [
                node("cpu-1"),
                other("bob-1", "cpu-1", cpu="2"),
                server("", cpu="1"),
                server("pandas-app", cpu="1"),
                node("cpu-2", allocatable={"cpu": "16"}),
                gpu_node("gpu-2"),
            ],
            pod(
                "jupyter-alice--gpu",
                user="alice",
                server="gpu",
                claims=[HOME],
                requests={"cpu": "3", "nvidia.com/gpu": "1"},
            ),
            "gpu-2",
        ),
        (
            "a-premium-node-is-never-chosen-for-a-set-that-needs-none",
            [*FULL_CPU1, *SET, gpu_node("gpu-2")],
            new(),
            None,
        ),
        (
            "a-premium-node-is-passed-over-for-a-cpu-node",
            [*FULL_CPU1, *SET, gpu_node("gpu-2"), node("cpu-9", allocatable={"cpu": "32"})],
            new(),
            "cpu-9",
        ),
        (
            "tie-fewest-pods-of-others-first",
            [*FULL_CPU1, *SET, node("cpu-2"), other("bob-2", "cpu-2", "0"), node("cpu-3")],
            new(),
            "cpu-3",
        ),
        (
            "tie-then-the-least-room-left-over",
            [*FULL_CPU1, *SET, node("cpu-2", allocatable={"cpu": "16"}), node("cpu-3")],
            new(),
            "cpu-3",
        ),
        (
            "tie-then-the-node-name",
            [*FULL_CPU1, *SET, node("cpu-3"), node("cpu-2")],
            new(),
            "cpu-2",
        ),
        (
            "a-cordoned-node-is-passed-over",
            [
                *FULL_CPU1,
                *SET,
                node("cpu-2", unschedulable=True),
                node("cpu-3", allocatable={"cpu": "8"}),
            ],
            new(),
            "cpu-3",
        ),
        (
            "a-tainted-node-is-passed-over",
            [*FULL_CPU1, *SET, node("cpu-2", taints=[taint("dedicated", "db")])],
            new(),
            None,
        ),
        (
            "every-server-must-pass-the-node-selection-as-alone",
            [
                *FULL_CPU1,
                server("", cpu="1"),
                server("pandas-app", cpu="1", node_selector={"pool": "user"}),
                node("cpu-2"),
                node("cpu-3", labels={"pool": "user"}),
            ],
            new(),
            "cpu-3",
        ),
        (
            "the-old-pin-of-a-running-server-is-left-out",
            [*FULL_CPU1, server("", cpu="1", affinity=PINNED), server("pandas-app"), node("cpu-2")],
            new(),
            "cpu-2",
        ),
        (
            "the-pinned-node-itself-is-never-the-target",
            [node("cpu-1", allocatable={"cpu": "5"}), other("bob-1", "cpu-1", cpu="1"), *SET],
            new(),
            None,
        ),
    ],
)
def test_target_node_for_the_whole_set(test_variation_id, objects, new_pod, expect):
    snapshot = state(pvc(HOME), *objects)
    holders = [p for p in snapshot.pods if HOME in str(p.get("spec")) and p["spec"].get("nodeName")]
    got = choose_target([*holders, new_pod], snapshot, avoid=("cpu-1",))
    assert got == expect, test_variation_id


@pytest.mark.parametrize(
    "test_variation_id, objects, tried, expect",
    [
        (
            "the-next-node-that-holds-the-set",
            [*FULL_CPU1, *SET, node("cpu-2"), node("cpu-3")],
            ["cpu-1", "cpu-2"],
            "cpu-3",
        ),
        (
            "no-node-left-and-no-autoscaler",
            [*FULL_CPU1, *SET, node("cpu-2")],
            ["cpu-1", "cpu-2"],
            None,
        ),
        (
            "no-node-left-but-karpenter-adds-one",
            [
                node("cpu-1", labels=KARPENTER),
                other("bob-1", "cpu-1", cpu="2"),
                *SET,
                node("cpu-2", labels=KARPENTER),
            ],
            ["cpu-1", "cpu-2"],
            "",
        ),
        (
            "a-node-that-lost-its-room-is-passed-over",
            [*FULL_CPU1, *SET, node("cpu-2"), node("cpu-3"), other("carol", "cpu-3", "2")],
            ["cpu-1", "cpu-2"],
            None,
        ),
    ],
)
def test_the_next_target_when_the_first_room_could_not_be_held(
    test_variation_id, objects, tried, expect
):
    snapshot = state(pvc(HOME), *objects)
    pods = [p for p in snapshot.pods if HOME in str(p.get("spec")) and p["spec"].get("nodeName")]
    assert next_target([*pods, new()], snapshot, tried=tried) == expect


def test_no_next_target_without_the_hub_s_view():
    assert next_target([new()], None, tried=()) is None


def test_no_target_without_node_access():
    snapshot = state(pvc(HOME), *FULL_CPU1, *SET, node("cpu-2"), node_access=False)
    assert choose_target([*SET, new()], snapshot, avoid=("cpu-1",)) is None


def test_without_node_pin_keeps_other_selection():
    pinned = server(
        "", affinity=required_affinity(term(expr("pool", "In", "user"), fields=[name_is("cpu-1")]))
    )
    terms = without_node_pin(pinned)["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [expr("pool", "In", "user")]}]
    assert pinned["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"][0]["matchFields"] == [name_is("cpu-1")]


@pytest.mark.parametrize(
    "test_variation_id, extra, expect",
    [
        (
            "moves-to-a-node-that-holds-it",
            [node("cpu-2")],
            Move(("", "pandas-app"), "big", "cpu-2"),
        ),
        ("no-room-and-no-autoscaler-is-no-move", [], None),
        (
            "no-room-but-karpenter-adds-a-node",
            [node("cpu-2", labels=KARPENTER, allocatable={"cpu": "1"})],
            Move(("", "pandas-app"), "big", None),
        ),
    ],
)
def test_whole_set_move(test_variation_id, extra, expect):
    snapshot = state(pvc(HOME), *FULL_CPU1, *SET, *extra)
    got = whole_set_move(new(), list(SET), snapshot, node_name="cpu-1")
    assert got == expect, test_variation_id


def test_terminating_holder_is_no_move():
    leaving = server("pandas-app", deleting=True)
    snapshot = state(pvc(HOME), *FULL_CPU1, server(""), leaving, node("cpu-2"))
    assert whole_set_move(new(), [server(""), leaving], snapshot, node_name="cpu-1") is None


@pytest.mark.parametrize(
    "test_variation_id, objects, new_pod, expect_move",
    [
        (
            "capacity-cap-offers-the-move-beside-the-stop",
            [*FULL_CPU1, *SET, node("cpu-2")],
            new(),
            {"restart": ["", "pandas-app"], "start": "big", "node": "cpu-2", "new_node": False},
        ),
        (
            "capacity-cap-onto-a-node-karpenter-adds",
            [node("cpu-1", labels=KARPENTER), other("bob-1", "cpu-1", cpu="2"), *SET],
            new(),
            {"restart": ["", "pandas-app"], "start": "big", "node": None, "new_node": True},
        ),
        ("capacity-cap-with-no-room-anywhere-has-no-move", [*FULL_CPU1, *SET], new(), None),
        (
            "a-gpu-lab-short-of-a-gpu-has-no-move-that-would-put-the-apps-on-a-gpu-node",
            [node("cpu-1", labels=KARPENTER), *SET, gpu_node("gpu-2")],
            pod(
                "jupyter-alice--lab",
                user="alice",
                server="lab",
                claims=[HOME],
                requests={"cpu": "1", "nvidia.com/gpu": "1"},
            ),
            None,
        ),
        (
            "a-gpu-lab-blocked-by-a-selector-has-no-move",
            [node("cpu-1"), *SET, gpu_node("gpu-2")],
            pod(
                "jupyter-alice--lab",
                user="alice",
                server="lab",
                claims=[HOME],
                node_selector={"nebari.dev/node-type": "gpu"},
                requests={"cpu": "1", "nvidia.com/gpu": "1"},
            ),
            None,
        ),
    ],
)
def test_decide_offers_the_move_for_the_capacity_cap_only(
    test_variation_id, objects, new_pod, expect_move
):
    decision = decide(new_pod, state(pvc(HOME), *objects), Policy())
    assert decision.verdict == "refuse", test_variation_id
    assert decision.way_out is not None, test_variation_id
    assert decision.way_out.as_json().get("move") == expect_move, test_variation_id


def test_the_room_holder_asks_for_the_whole_set_at_once_with_the_new_server_s_selection():
    toleration = {"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}
    new_pod = new(
        cpu="1.5",
        node_selector={"pool": "user"},
        tolerations=[toleration],
        affinity=required_affinity(term(expr("zone", "In", "a"), fields=[name_is("cpu-1")])),
    )
    holder = room_holder([*SET, new_pod], name="room-for-jupyter-alice--big", owner="alice")
    assert holder["metadata"] == {
        "name": "room-for-jupyter-alice--big",
        "labels": {"nebari.dev/room-for": "alice"},
        "annotations": {"karpenter.sh/do-not-disrupt": "true"},
    }
    spec = holder["spec"]
    assert spec["containers"][0]["resources"] == {"requests": {"cpu": "3500m"}}
    assert spec["nodeSelector"] == {"pool": "user"} and spec["tolerations"] == [toleration]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [{"matchExpressions": [expr("zone", "In", "a")]}]
    assert "volumes" not in spec  # it holds no home: not a holder, pins nothing


@pytest.mark.parametrize(
    ("affinity", "terms"),
    [
        (None, [{"matchFields": [name_is("cpu-2")]}]),
        (
            required_affinity(
                term(expr("zone", "In", "a"), fields=[name_is("cpu-1")]),
                term(expr("zone", "In", "b")),
            ),
            [
                {"matchExpressions": [expr("zone", "In", "a")], "matchFields": [name_is("cpu-2")]},
                {"matchExpressions": [expr("zone", "In", "b")], "matchFields": [name_is("cpu-2")]},
            ],
        ),
    ],
)
def test_a_pinned_holder_holds_one_server_s_room_on_the_chosen_node_only(affinity, terms):
    holder = pinned_holder(
        new(cpu="1.5", affinity=affinity), node="cpu-2", name="room-2-big", owner="alice"
    )
    assert holder["metadata"]["name"] == "room-2-big"
    assert holder["metadata"]["labels"] == {"nebari.dev/room-for": "alice"}
    assert holder["spec"]["containers"][0]["resources"] == {"requests": {"cpu": "1500m"}}
    required = holder["spec"]["affinity"]["nodeAffinity"]
    assert required["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == terms


def test_the_hub_judges_the_move_again_on_every_node_the_live_view_knows():
    """The check's state holds the pinned node alone (a Karpenter node: its move can only be
    "a node Karpenter adds"); the refusal's move is chosen again on the live view's nodes."""
    import logging

    from nebari_colocate.refusing import offer_move

    pinned = node("cpu-1", labels=KARPENTER)
    objects = [pvc(HOME), pinned, other("bob-1", "cpu-1", cpu="2"), *SET]
    decision = decide(new(), state(*objects), Policy())
    assert decision.way_out.move == Move(("", "pandas-app"), "big", None)

    class Spawner:
        log = logging.getLogger("test")

        def whole_set_state(self, pod):
            return state(*objects, node("cpu-2"))

        def colocation_policy(self):
            return Policy()

    offer_move(Spawner(), decision, new())
    assert decision.way_out.move == Move(("", "pandas-app"), "big", "cpu-2")
