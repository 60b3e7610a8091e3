"""ClusterState: one immutable snapshot whose indexes are built once, in its constructor."""

from __future__ import annotations

import pytest

from nebari_colocate.state import ClusterState
from tests.support.builders import NAMESPACE, node, pod, pv, pvc, running, state, volume_attachment

HOME = "claim-alice"


def names(pods) -> list[str]:
    return sorted(p["metadata"]["name"] for p in pods)


OBJECTS = (
    node("cpu-1"),
    pvc(HOME),
    running("jupyter-alice", "cpu-1", claims=[HOME]),
    running("backup-alice", "cpu-2", claims=[HOME]),
    running("jupyter-bob", "cpu-1", claims=["claim-bob"]),
    running("other-ns", "cpu-1", namespace="monitoring", claims=[HOME]),
    volume_attachment("pv-claim-alice", "cpu-1"),
)


@pytest.mark.parametrize(
    "test_variation_id, read, expect_names",
    [
        (
            "pods-mounting-a-claim-of-the-namespace-whatever-their-labels",
            lambda s: s.pods_mounting(NAMESPACE, HOME),
            ["backup-alice", "jupyter-alice"],
        ),
        (
            "a-claim-of-the-same-name-in-another-namespace-is-another-claim",
            lambda s: s.pods_mounting("monitoring", HOME),
            ["other-ns"],
        ),
        (
            "pods-on-a-node-of-every-namespace",
            lambda s: s.pods_on_node("cpu-1"),
            ["jupyter-alice", "jupyter-bob", "other-ns"],
        ),
        ("no-pods-on-an-unknown-node", lambda s: s.pods_on_node("gpu-9"), []),
        (
            "the-snapshots-own-namespace",
            lambda s: s.namespace_pods(),
            ["backup-alice", "jupyter-alice", "jupyter-bob"],
        ),
    ],
)
def test_indexes_answer_by_claim_by_node_and_by_namespace(test_variation_id, read, expect_names):
    assert names(read(state(*OBJECTS))) == expect_names


def test_a_pod_mounting_one_claim_twice_is_indexed_once():
    twice = running("jupyter-alice", "cpu-1", claims=[HOME])
    twice["spec"]["volumes"].append({"name": "again", "persistentVolumeClaim": {"claimName": HOME}})
    assert names(state(twice).pods_mounting(NAMESPACE, HOME)) == ["jupyter-alice"]


def test_the_snapshot_cannot_be_changed_after_it_is_built():
    snapshot = state(*OBJECTS)
    with pytest.raises(AttributeError, match="immutable"):
        snapshot.pods = ()
    with pytest.raises(TypeError):
        snapshot.pvcs["x/y"] = {}  # type: ignore[index]
    with pytest.raises(AttributeError):
        snapshot.pods.append({})  # type: ignore[attr-defined]


def test_replace_builds_a_new_snapshot_with_fresh_indexes():
    snapshot = state(*OBJECTS)
    fewer = snapshot.replace(
        pods=[p for p in snapshot.pods if p["metadata"]["name"] != "jupyter-alice"]
    )
    assert names(fewer.pods_mounting(NAMESPACE, HOME)) == ["backup-alice"]
    assert names(snapshot.pods_mounting(NAMESPACE, HOME)) == ["backup-alice", "jupyter-alice"]
    assert snapshot.replace(volume_attachments=None).volume_attachments is None


@pytest.mark.parametrize(
    "test_variation_id, kwargs, expect_nodes, expect_attachments",
    [
        ("defaults-are-readable-and-empty", {}, {}, ()),
        ("none-means-not-readable", {"nodes": None, "volume_attachments": None}, None, None),
    ],
)
def test_unreadable_is_none_and_readable_but_empty_is_empty(
    test_variation_id, kwargs, expect_nodes, expect_attachments
):
    snapshot = ClusterState(**kwargs)
    assert (None if snapshot.nodes is None else dict(snapshot.nodes)) == expect_nodes
    assert snapshot.volume_attachments == expect_attachments


def test_attachments_are_indexed_by_persistent_volume():
    snapshot = state(*OBJECTS)
    (attachment,) = snapshot.attachments_of("pv-claim-alice")
    assert attachment["spec"]["nodeName"] == "cpu-1"
    assert snapshot.attachments_of("pv-other") == ()
    assert snapshot.attachments_of(None) == ()


DISK = ("disk.csi.example", "vol-1")


@pytest.mark.parametrize(
    "test_variation_id, second, expect_same, expect_attached, expect_sharing",
    [
        ("same-driver-and-handle-is-one-disk", DISK, ["pv-b", "pv-claim-alice"], {"cpu-2"}, ["b"]),
        ("another-handle", (DISK[0], "vol-2"), ["pv-claim-alice"], set(), []),
        ("another-driver", ("other.csi.example", DISK[1]), ["pv-claim-alice"], set(), []),
    ],
)
def test_a_disk_is_one_whichever_pv_exposes_it(
    test_variation_id, second, expect_same, expect_attached, expect_sharing
):
    snapshot = state(
        pvc(HOME),
        pv("pv-claim-alice", csi=DISK, claim=f"{NAMESPACE}/{HOME}"),
        pv("pv-b", csi=second, claim="backups/copy"),
        volume_attachment("pv-b", "cpu-2"),
        running("b", "cpu-2", namespace="backups", claims=["copy"]),
    )
    assert sorted(snapshot.same_disk("pv-claim-alice")) == expect_same
    assert snapshot.attached_nodes(NAMESPACE, HOME) == expect_attached
    assert names(snapshot.pods_sharing_disk(NAMESPACE, HOME)) == expect_sharing


def test_node_usage_counts_every_namespace_and_leaves_out_the_pod_being_replaced():
    objects = [
        running("a", "cpu-1", requests={"cpu": "1"}),
        running("b", "cpu-1", namespace="monitoring", requests={"cpu": "500m"}),
        pod("done", node_name="cpu-1", phase="Succeeded", requests={"cpu": "4"}),
    ]
    snapshot = state(*objects)
    used, count = snapshot.node_usage("cpu-1")
    assert (used["cpu"], count) == (1500, 2)
    used, count = snapshot.node_usage("cpu-1", exclude=f"{NAMESPACE}/a")
    assert (used["cpu"], count) == (500, 1)
    assert snapshot.node_usage("cpu-1")[0]["cpu"] == 1500  # the memo is not changed by exclude


def test_claims_of_a_namespace_by_name():
    snapshot = state(pvc(HOME), pvc("claim-x", namespace="monitoring"))
    assert sorted(snapshot.claims_of()) == [HOME]
    assert sorted(snapshot.claims_of("monitoring")) == ["claim-x"]
