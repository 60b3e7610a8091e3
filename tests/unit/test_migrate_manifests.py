"""The objects and patches a move writes, each written once (pure): the mark and its removal on
the home claim, the claimRef that pre-binds a volume, the home claim recreated on the copy."""

from __future__ import annotations

import pytest

from nebari_colocate import migrate
from nebari_colocate.objects import (
    MIGRATION_ANNOTATION,
    MIGRATION_SINCE_ANNOTATION,
    MIGRATION_STALLED_ANNOTATION,
    MOVING,
)
from tests.unit.test_migrate import home


def test_the_mark_says_moving_since_now_and_clears_an_earlier_stall():
    mark = migrate.mark()
    assert mark[MIGRATION_ANNOTATION] == MOVING
    assert migrate.parse_time(mark[MIGRATION_SINCE_ANNOTATION]) is not None
    assert mark[MIGRATION_STALLED_ANNOTATION] is None


def test_unmarking_removes_every_annotation_the_mark_writes():
    assert set(migrate.unmark()) == set(migrate.mark())
    assert set(migrate.unmark().values()) == {None}


@pytest.mark.parametrize(
    "test_variation_id, volume, expect_op",
    [
        ("a volume never bound", {"spec": {}}, "add"),
        (
            "a released volume",
            {"spec": {"claimRef": {"name": "claim-alice", "uid": "1"}}},
            "replace",
        ),
        ("no volume read", None, "add"),
    ],
)
def test_a_volume_is_pre_bound_by_name_without_a_uid(test_variation_id, volume, expect_op):
    assert migrate.claim_ref_patch(volume, "jhub", "claim-alice") == [
        {
            "op": expect_op,
            "path": "/spec/claimRef",
            "value": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": "jhub",
                "name": "claim-alice",
            },
        }
    ]


def test_the_final_claim_is_read_write_many_on_the_new_volume_and_marked():
    volume = {"spec": {"storageClassName": "nfs", "capacity": {"storage": "3Gi"}}}
    claim = migrate.final_claim(home(), volume, "pv-new")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert claim["spec"]["volumeName"] == "pv-new"
    assert claim["spec"]["resources"]["requests"]["storage"] == "3Gi"
    annotations = claim["metadata"]["annotations"]
    assert annotations[MIGRATION_ANNOTATION] == MOVING
    assert annotations[migrate.FROM_KEY] == "pv-claim-alice"
    assert annotations["hub.jupyter.org/username"] == "alice"
