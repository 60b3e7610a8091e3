"""Headroom for the first server (nebari_colocate.headroom, pure; docs/decisions.md): the
footprint rule, the room a first server looks for, the nodes that have it and the preferred
affinity term.  Tables of plain dicts, no cluster."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from nebari_colocate.headroom import (
    HEADROOM_WEIGHT,
    MAX_HEADROOM_NODES,
    STATE_KEY,
    configured_footprint,
    headroom_for,
    headroom_terms,
    needed_room,
    promised,
    set_footprint,
    stored_footprint,
    usual_footprint,
    with_headroom,
)
from nebari_colocate.headroom_spawner import user_history
from tests.support.builders import gpu_node, node, pod, running, taint

GiB = 2**30
GPU = ("nvidia.com/gpu", "amd.com/gpu")

# --------------------------------------------------------------------------------------------------
# the footprint rule: per resource, the larger of the configured one and the largest set run

FOOTPRINT_RULE = [
    # (name, configured, history, expected)
    ("nothing configured and no history: no footprint", {}, [], {}),
    (
        "the configured footprint alone",
        {"cpu": "2", "memory": "8Gi"},
        [],
        {"cpu": 2000, "memory": 8 * GiB},
    ),
    ("a larger set run before wins", {"cpu": "2"}, [{"cpu": 3500}], {"cpu": 3500}),
    ("a smaller set run before does not", {"cpu": "2"}, [{"cpu": 1500}], {"cpu": 2000}),
    (
        "per resource, each the larger",
        {"cpu": "4", "memory": "4Gi"},
        [{"cpu": 1000, "memory": 12 * GiB}, {"cpu": 2000, "memory": 2 * GiB}],
        {"cpu": 4000, "memory": 12 * GiB},
    ),
    (
        "the largest of several sets",
        {},
        [{"cpu": 500}, {"cpu": 2500}, {"cpu": 1000}],
        {"cpu": 2500},
    ),
    (
        "a resource only the history has",
        {"cpu": "1"},
        [{"nvidia.com/gpu": 1}],
        {"cpu": 1000, "nvidia.com/gpu": 1},
    ),
    ("the pod count is never a footprint", {"pods": "3", "cpu": "1"}, [], {"cpu": 1000}),
]


@pytest.mark.parametrize(
    "configured, history, expected",
    [row[1:] for row in FOOTPRINT_RULE],
    ids=[row[0] for row in FOOTPRINT_RULE],
)
def test_the_footprint_rule(configured, history, expected):
    assert usual_footprint(configured_footprint(configured), history) == expected


SET_FOOTPRINTS = [
    ("one server", [pod(requests={"cpu": "1", "memory": "2Gi"})], {"cpu": 1000, "memory": 2 * GiB}),
    (
        "a lab and two apps add up",
        [
            pod("lab", requests={"cpu": "1"}),
            pod("app-1", requests={"cpu": "500m"}),
            pod("app-2", requests={"cpu": "250m", "memory": "1Gi"}),
        ],
        {"cpu": 1750, "memory": GiB},
    ),
    (
        "a finished pod is no part of the set",
        [pod(requests={"cpu": "1"}), pod("old", phase="Succeeded", requests={"cpu": "2"})],
        {"cpu": 1000},
    ),
    (
        "a limit without a request requests it",
        [pod(limits={"nvidia.com/gpu": "1"})],
        {"nvidia.com/gpu": 1},
    ),
    ("no pods", [], {}),
]


@pytest.mark.parametrize(
    "pods, expected", [row[1:] for row in SET_FOOTPRINTS], ids=[row[0] for row in SET_FOOTPRINTS]
)
def test_a_set_footprint_is_what_its_servers_request_together(pods, expected):
    assert set_footprint(pods) == expected


STORED = [
    (
        "a footprint as get_state wrote it",
        {"cpu": 2000, "memory": GiB},
        {"cpu": 2000, "memory": GiB},
    ),
    ("nothing stored", None, {}),
    ("not a mapping", ["cpu"], {}),
    (
        "junk entries are dropped, the rest kept",
        {"cpu": "2", "memory": GiB, "x": True, 3: 4, "y": -1},
        {"memory": GiB},
    ),
]


@pytest.mark.parametrize(
    "value, expected", [row[1:] for row in STORED], ids=[row[0] for row in STORED]
)
def test_a_stored_footprint_is_read_without_ever_failing(value, expected):
    assert stored_footprint(value) == expected


def test_the_history_is_read_from_every_server_state_in_the_database_and_in_memory():
    orm = {
        "": SimpleNamespace(state={STATE_KEY: {"cpu": 3000}}),
        "app": SimpleNamespace(state={"pod_name": "jupyter-alice-app"}),
        "bad": SimpleNamespace(state=None),
    }
    user = SimpleNamespace(
        orm_user=SimpleNamespace(orm_spawners=orm),
        spawners={"dash": SimpleNamespace(colocation_footprint={"memory": 4 * GiB})},
    )
    assert user_history(user) == [{"cpu": 3000}, {"memory": 4 * GiB}]
    assert user_history(SimpleNamespace(name="alice")) == []  # a stand-in user: no history


# --------------------------------------------------------------------------------------------------
# the room a first server looks for

NEEDED_ROOM = [
    ("the footprint above the pod's own request", {"cpu": "1"}, {"cpu": 3000}, {"cpu": 3000}),
    ("the pod's own request above the footprint", {"cpu": "4"}, {"cpu": 3000}, {"cpu": 4000}),
    (
        "resources of either",
        {"cpu": "1", "memory": "2Gi"},
        {"cpu": 500, "memory": 8 * GiB},
        {"cpu": 1000, "memory": 8 * GiB},
    ),
    (
        "a GPU of a past set does not steer a CPU lab",
        {"cpu": "1"},
        {"cpu": 2000, "nvidia.com/gpu": 1},
        {"cpu": 2000},
    ),
    (
        "a GPU lab looks for its GPU",
        {"cpu": "1", "nvidia.com/gpu": "1"},
        {"cpu": 2000, "nvidia.com/gpu": 2},
        {"cpu": 2000, "nvidia.com/gpu": 2},
    ),
]


@pytest.mark.parametrize(
    "requests, footprint, expected",
    [row[1:] for row in NEEDED_ROOM],
    ids=[row[0] for row in NEEDED_ROOM],
)
def test_the_room_a_first_server_looks_for(requests, footprint, expected):
    assert needed_room(pod(requests=requests), footprint, GPU) == expected


# --------------------------------------------------------------------------------------------------
# which nodes the preference names

FULL = running("other-1", "full", requests={"cpu": "3"}, namespace="other")
HALF = running("other-2", "half", requests={"cpu": "2"}, namespace="other")
EMPTY_ENOUGH = running("other-3", "quarter", requests={"cpu": "1"}, namespace="other")

ROOMY_NODES = [
    # (name, pod requests, footprint, nodes, bound pods, expected nodes)
    (
        "only the nodes with room for the footprint, the best fitting first",
        {"cpu": "1"},
        {"cpu": 2000},
        [node("full"), node("half"), node("quarter")],
        [FULL, HALF, EMPTY_ENOUGH],
        ["half", "quarter"],
    ),
    (
        "every node that takes the pod has the room: no preference (it would change nothing)",
        {"cpu": "1"},
        {"cpu": 1000},
        [node("half"), node("quarter")],
        [HALF, EMPTY_ENOUGH],
        [],
    ),
    (
        "no node has the room: no preference (the scheduler and the autoscaler as without it)",
        {"cpu": "1"},
        {"cpu": 8000},
        [node("full"), node("half")],
        [FULL, HALF],
        [],
    ),
    (
        "a node the pod's own filters exclude is never named (a taint it does not tolerate)",
        {"cpu": "1"},
        {"cpu": 2000},
        [node("full"), node("tainted", taints=[taint("dedicated", "x")])],
        [FULL],
        [],
    ),
    (
        "a cordoned node is never named",
        {"cpu": "1"},
        {"cpu": 2000},
        [node("full"), node("cordoned", unschedulable=True), node("half")],
        [FULL, HALF],
        ["half"],
    ),
    (
        "a premium node is never named for a server that needs none",
        {"cpu": "1"},
        {"cpu": 2000},
        [node("full"), gpu_node("gpu-1")],
        [FULL],
        [],
    ),
    (
        "a GPU server's room on the GPU nodes",
        {"cpu": "1", "nvidia.com/gpu": "1"},
        {"cpu": 4000},
        [gpu_node("gpu-1"), gpu_node("gpu-2")],
        [running("busy", "gpu-1", requests={"cpu": "6"}, namespace="other")],
        ["gpu-2"],
    ),
    (
        "memory counts as cpu does",
        {"cpu": "500m", "memory": "1Gi"},
        {"memory": 12 * GiB},
        [node("a"), node("b")],
        [running("big", "a", requests={"memory": "8Gi"}, namespace="other")],
        ["b"],
    ),
    (
        "pods of every namespace use the room, finished ones do not",
        {"cpu": "1"},
        {"cpu": 3000},
        [node("a"), node("b")],
        [
            running("x", "a", requests={"cpu": "2"}, namespace="one"),
            pod("done", node_name="b", phase="Succeeded", requests={"cpu": "3"}, namespace="two"),
        ],
        ["b"],
    ),
]


@pytest.mark.parametrize(
    "requests, footprint, nodes, bound, expected",
    [row[1:] for row in ROOMY_NODES],
    ids=[row[0] for row in ROOMY_NODES],
)
def test_the_nodes_the_preference_names(requests, footprint, nodes, bound, expected):
    by_node = {n["metadata"]["name"]: n for n in nodes}

    def pods_on(name):
        return [p for p in bound if p["spec"].get("nodeName") == name]

    _, chosen = headroom_for(pod(requests=requests), footprint, by_node, pods_on, GPU)
    assert chosen == expected


LABEL = "nebari.dev/colocate-user"


def server(name, node_name, who, cpu):
    return running(name, node_name, requests={"cpu": cpu}, labels={LABEL: who})


def owner(pod):
    return (pod["metadata"].get("labels") or {}).get(LABEL)


PROMISED = [
    # (name, pods on a node, configured footprint, room kept for their users)
    (
        "a user's lab below the footprint keeps the rest",
        [server("a", "n", "bob", "1")],
        {"cpu": 2000},
        {"cpu": 1000},
    ),
    (
        "a user's whole set counts, not each server",
        [server("a", "n", "bob", "1"), server("b", "n", "bob", "500m")],
        {"cpu": 2000},
        {"cpu": 500},
    ),
    (
        "a set above the footprint keeps nothing more",
        [server("a", "n", "bob", "3")],
        {"cpu": 2000},
        {},
    ),
    (
        "each user on the node is promised their own",
        [server("a", "n", "bob", "1"), server("b", "n", "carol", "500m")],
        {"cpu": 2000},
        {"cpu": 2500},
    ),
    (
        "a pod that is no user's server keeps nothing",
        [running("x", "n", requests={"cpu": "1"})],
        {"cpu": 2000},
        {},
    ),
    (
        "a finished server keeps nothing",
        [pod("old", node_name="n", phase="Failed", labels={LABEL: "bob"})],
        {"cpu": 2000},
        {},
    ),
]


@pytest.mark.parametrize(
    "pods, footprint, expected", [row[1:] for row in PROMISED], ids=[row[0] for row in PROMISED]
)
def test_the_room_a_node_keeps_for_the_users_already_on_it(pods, footprint, expected):
    assert promised(pods, owner, footprint) == expected


def test_room_promised_to_the_users_on_a_node_is_not_room_for_a_new_one():
    # 'packed' has 2.5 CPU free, but bob's lab there is promised 1 CPU more: 1.5 is not 2
    nodes = {"packed": node("packed"), "empty": node("empty"), "full": node("full")}
    bound = [
        server("bob-lab", "packed", "bob", "1"),
        running("x", "packed", requests={"cpu": "500m"}, namespace="other"),
        FULL,
    ]

    def pods_on(name):
        return [p for p in bound if p["spec"].get("nodeName") == name]

    args = (pod(requests={"cpu": "1"}), {"cpu": 2000}, nodes, pods_on, GPU)
    assert headroom_for(*args)[1] == ["packed", "empty"]  # nothing promised
    assert headroom_for(*args, owner=owner, others={"cpu": 2000})[1] == ["empty"]


def test_at_most_twenty_nodes_are_named_the_best_fitting_ones():
    nodes = {f"n{i:02}": node(f"n{i:02}", allocatable={"cpu": str(2 + i)}) for i in range(30)}
    nodes["small"] = node("small", allocatable={"cpu": "1"})  # takes the pod, has no room
    _, chosen = headroom_for(pod(requests={"cpu": "1"}), {"cpu": 2000}, nodes, lambda n: [], GPU)
    assert len(chosen) == MAX_HEADROOM_NODES
    assert chosen[:3] == ["n00", "n01", "n02"]  # least room left first


# --------------------------------------------------------------------------------------------------
# the term


def test_the_term_is_one_preferred_field_term_per_node_never_a_required_one():
    assert headroom_terms(["cpu-2", "cpu-3"]) == [
        {
            "weight": HEADROOM_WEIGHT,
            "preference": {
                "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["cpu-2"]}]
            },
        },
        {
            "weight": HEADROOM_WEIGHT,
            "preference": {
                "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["cpu-3"]}]
            },
        },
    ]


Z2JH_PURPOSE = {
    "weight": 100,
    "preference": {
        "matchExpressions": [
            {"key": "hub.jupyter.org/node-purpose", "operator": "In", "values": ["user"]}
        ]
    },
}
REQUIRED = {
    "nodeSelectorTerms": [
        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["cpu"]}]}
    ]
}

WITH_HEADROOM = [
    (
        "no affinity yet",
        None,
        {"preferredDuringSchedulingIgnoredDuringExecution": headroom_terms(["b"])},
    ),
    (
        "zero-to-jupyterhub's node-purpose preference kept, ours after it",
        {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [Z2JH_PURPOSE]}},
        {"preferredDuringSchedulingIgnoredDuringExecution": [Z2JH_PURPOSE, *headroom_terms(["b"])]},
    ),
    (
        "the required node affinity left alone",
        {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": REQUIRED}},
        {
            "requiredDuringSchedulingIgnoredDuringExecution": REQUIRED,
            "preferredDuringSchedulingIgnoredDuringExecution": headroom_terms(["b"]),
        },
    ),
]


@pytest.mark.parametrize(
    "affinity, expected", [row[1:] for row in WITH_HEADROOM], ids=[row[0] for row in WITH_HEADROOM]
)
def test_the_terms_go_into_the_preferred_node_affinity(affinity, expected):
    manifest = with_headroom(pod(affinity=affinity), headroom_terms(["b"]))
    assert manifest["spec"]["affinity"]["nodeAffinity"] == expected
    assert with_headroom(manifest, headroom_terms(["b"])) == manifest  # once


def test_no_terms_leave_the_manifest_as_it_was():
    original = pod(requests={"cpu": "1"})
    assert with_headroom(original, []) == original
