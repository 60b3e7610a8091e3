"""What ``migrate apply`` and ``rollback`` decide before and after the moves (pure): the homes
``--all`` selects, whether the target class is checked first, the dry run's rows and the exit
status (cli.py only parses, calls :func:`migrate.run` and prints)."""

from __future__ import annotations

import pytest

from nebari_colocate import migrate
from tests.support.builders import pvc
from tests.unit.test_migrate import SERVER, home

RECORDED = "recorded_storage_class"


def test_apply_all_selects_the_homes_to_move_resume_or_retry_in_name_order():
    home_of = {
        "claim-e": home(step="failed"),
        "claim-d": home(step="copying"),
        "claim-c": home(pods=[SERVER]),
        "claim-b": home(pvc("claim-alice", modes=["ReadWriteMany"])),
        "claim-a": home(),
        "claim-f": home(step="done"),
    }
    assert migrate.selected_by_all(home_of, "nfs") == ["claim-a", "claim-d", "claim-e"]


@pytest.mark.parametrize(
    "test_variation_id, row, target_class, expect",
    [
        ("a move that starts", {"action": "move"}, "nfs", True),
        ("a retried copy", {"action": "retry"}, "nfs", True),
        (
            "a move resumed in its class",
            {"action": "resume", RECORDED: "nfs"},
            "nfs",
            False,
        ),
        (
            "a move resumed to another class",
            {"action": "resume", RECORDED: "efs"},
            "nfs",
            True,
        ),
        (
            "a resumed move, no class asked",
            {"action": "resume", RECORDED: "efs"},
            None,
            False,
        ),
        ("a finished move", {"action": "done"}, "nfs", False),
        ("running servers", {"action": "servers-running"}, "nfs", False),
    ],
)
def test_the_target_class_is_checked_first_only_for_a_move_that_starts_or_changes_class(
    test_variation_id, row, target_class, expect
):
    assert migrate.checks_class(row, target_class) is expect


@pytest.mark.parametrize(
    "test_variation_id, make, expect_outcome",
    [
        ("a stopped RWO home", lambda: home(), "would-move"),
        ("a running server", lambda: home(pods=[SERVER]), "skipped"),
        ("already RWX", lambda: home(pvc("claim-alice", modes=["ReadWriteMany"])), "skipped"),
        ("interrupted mid-copy", lambda: home(step="copying"), "would-move"),
        ("moved", lambda: home(step="done"), "skipped"),
    ],
)
def test_a_dry_run_row_says_whether_the_home_would_move_and_why(
    test_variation_id, make, expect_outcome
):
    row = migrate.plan_row(make(), "nfs")
    result = migrate.dry_run_row(row)
    assert result == {**row, "outcome": expect_outcome, "reason": row["action"]}


@pytest.mark.parametrize(
    "test_variation_id, results, expect",
    [
        ("every home moved", [{"outcome": "done"}, {"outcome": "already-done"}], 0),
        (
            "a named home already RWX",
            [{"outcome": "skipped", "reason": "already-rwx"}],
            0,
        ),
        ("a home whose servers run", [{"outcome": "skipped", "reason": "servers-running"}], 1),
        ("a blocked move", [{"outcome": "done"}, {"outcome": "blocked"}], 1),
        ("a failed copy", [{"outcome": "failed"}], 1),
        ("a home another run holds", [{"outcome": "held"}], 1),
        ("an error", [{"outcome": "error"}], 1),
        ("nothing to do", [], 0),
    ],
)
def test_apply_exits_1_when_a_home_could_not_move(test_variation_id, results, expect):
    assert migrate.apply_status(results) == expect


@pytest.mark.parametrize(
    "test_variation_id, results, expect",
    [
        ("rolled back", [{"outcome": "rolled-back"}], 0),
        ("nothing to undo", [{"outcome": "nothing-to-roll-back"}], 0),
        ("held by another run", [{"outcome": "rolled-back"}, {"outcome": "held"}], 1),
        ("an error", [{"outcome": "error"}], 1),
    ],
)
def test_rollback_exits_1_unless_every_home_is_back(test_variation_id, results, expect):
    assert migrate.rollback_status(results) == expect
