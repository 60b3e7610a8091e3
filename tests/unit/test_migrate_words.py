"""Why a move cannot go on, in the operator's words (``messages.MIGRATE_ERRORS``): one row per
code with the exact sentence migrate.py printed before its words moved to messages.py, and a
guard that every code migrate.py names has words."""

# ruff: noqa: E501 - each expected sentence stands on one line, as the operator reads it

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from nebari_colocate import messages, migrate

RB = "nebari-colocate migrate rollback alice -n jhub"
AP = "nebari-colocate migrate apply alice -n jhub --storage-class nfs"

ROWS = [
    pytest.param(
        "timed-out",
        {"timeout": 30.0, "what": "claim x bound"},
        "timed out after 30 s waiting for claim x bound (--timeout)",
        id="timed-out",
    ),
    pytest.param(
        "claim-not-found",
        {"namespace": "jhub", "claim": "claim-alice"},
        "claim jhub/claim-alice not found",
        id="claim-not-found",
    ),
    pytest.param(
        "no-home-claim",
        {
            "name": "bob",
            "namespace": "jhub",
            "prefix": "claim-",
            "annotation": "hub.jupyter.org/username",
        },
        "no home claim for 'bob' in namespace jhub (give a username or a claim name; home claims are those named claim-* or carrying the hub.jupyter.org/username annotation)",
        id="no-home-claim",
    ),
    pytest.param(
        "no-storage-class",
        {},
        "no target storage class: pass --storage-class (the class the hub creates ReadWriteMany homes in, helm custom.storage-class)",
        id="no-storage-class",
    ),
    pytest.param(
        "gave-up-unmarked",
        {
            "problem": "The copy failed",
            "claim": "claim-alice",
            "volume": "pv-old",
            "user": "alice",
            "rollback": RB,
        },
        "The copy failed. The move gave up: claim-alice is unmarked and stays on its old volume pv-old, so alice can start servers again; fix that and apply again, or clear the move with: nebari-colocate migrate rollback alice -n jhub",
        id="gave-up-unmarked",
    ),
    pytest.param(
        "gave-up-marked",
        {"problem": "The copy failed.", "claim": "claim-alice", "user": "alice", "rollback": RB},
        "The copy failed. claim-alice stays marked (its claim is being swapped to the new volume, alice's servers are refused): apply again to finish, or put it back with: nebari-colocate migrate rollback alice -n jhub",
        id="gave-up-marked",
    ),
    pytest.param(
        "class-switch-too-late",
        {
            "claim": "claim-alice",
            "recorded": "nfs",
            "step": "copied",
            "asked": "fast",
            "apply": AP,
            "rollback": RB,
        },
        "claim-alice is moving to storage class nfs (its copy is verified, step copied), not fast: finish it with nebari-colocate migrate apply alice -n jhub --storage-class nfs, or reset the move with nebari-colocate migrate rollback alice -n jhub and apply again",
        id="class-switch-too-late",
    ),
    pytest.param(
        "claim-gone-before-copy",
        {"namespace": "jhub", "claim": "claim-alice"},
        "claim jhub/claim-alice is gone before its copy was made",
        id="claim-gone-before-copy",
    ),
    pytest.param(
        "claim-moved-before-retain",
        {
            "namespace": "jhub",
            "claim": "claim-alice",
            "on_volume": None,
            "recorded": "pv-rec",
            "rollback": RB,
        },
        "claim jhub/claim-alice is on volume nothing, not on pv-rec where this move started: nothing is changed; see migrate status, and put it back with: nebari-colocate migrate rollback alice -n jhub",
        id="claim-moved-before-retain",
    ),
    pytest.param(
        "volume-unreadable",
        {"namespace": "jhub", "claim": "claim-alice", "volume": None},
        "claim jhub/claim-alice: its volume None is not readable",
        id="volume-unreadable",
    ),
    pytest.param(
        "no-storage-class-for",
        {"claim": "claim-alice"},
        "no target storage class for claim-alice: pass --storage-class",
        id="no-storage-class-for",
    ),
    pytest.param(
        "claim-moved-before-mark",
        {"namespace": "jhub", "claim": "claim-alice", "on_volume": "", "volume": "pv-old"},
        "claim jhub/claim-alice is on volume nothing, not on pv-old where this move started: nothing is marked; see migrate status",
        id="claim-moved-before-mark",
    ),
    pytest.param(
        "temporary-not-ours",
        {"namespace": "jhub", "temporary": "claim-alice-rwx"},
        "claim jhub/claim-alice-rwx exists and is not this move's",
        id="temporary-not-ours",
    ),
    pytest.param(
        "copy-pod-unscheduled",
        {
            "namespace": "jhub",
            "pod": "claim-alice-rwx",
            "timeout": 60.0,
            "why": ["0/3 nodes are available", "x"],
        },
        "the copy pod jhub/claim-alice-rwx is not scheduled after 60 s (--timeout) (0/3 nodes are available; x): is the new claim claim-alice-rwx bound (kubectl describe pvc claim-alice-rwx)?",
        id="copy-pod-unscheduled",
    ),
    pytest.param(
        "copy-pod-unscheduled",
        {"namespace": "jhub", "pod": "claim-alice-rwx", "timeout": 60.0, "why": []},
        "the copy pod jhub/claim-alice-rwx is not scheduled after 60 s (--timeout) (no reason given): is the new claim claim-alice-rwx bound (kubectl describe pvc claim-alice-rwx)?",
        id="copy-pod-unscheduled-no-reason",
    ),
    pytest.param(
        "copy-running",
        {
            "namespace": "jhub",
            "pod": "claim-alice-rwx",
            "timeout": 600.0,
            "claim": "claim-alice",
            "rollback": RB,
        },
        "the copy pod jhub/claim-alice-rwx did not finish within 600 s (--copy-timeout); it keeps running and claim-alice stays marked: apply again to wait for it, or stop the move with: nebari-colocate migrate rollback alice -n jhub",
        id="copy-running",
    ),
    pytest.param(
        "temporary-not-bound",
        {"namespace": "jhub", "temporary": "claim-alice-rwx"},
        "claim jhub/claim-alice-rwx holds the copy but is not bound",
        id="temporary-not-bound",
    ),
    pytest.param(
        "no-target-volume",
        {"volume": "pv-old", "claim": "claim-alice"},
        "volume pv-old records no target volume for claim-alice",
        id="no-target-volume",
    ),
    pytest.param(
        "target-volume-gone",
        {"new_volume": "pv-new", "claim": "claim-alice"},
        "volume pv-new, the copy of claim-alice, is gone; roll back",
        id="target-volume-gone",
    ),
    pytest.param(
        "claim-recreated",
        {
            "namespace": "jhub",
            "claim": "claim-alice",
            "on_volume": "pv-x",
            "volume": "pv-old",
            "new_volume": "pv-new",
        },
        "claim jhub/claim-alice was recreated meanwhile (bound to pv-x), not by this move: both volumes (pv-old, pv-new) are retained; see docs/migrate.md",
        id="claim-recreated",
    ),
    pytest.param(
        "step-after-last",
        {"claim": "claim-alice", "at_step": None},
        "the move of claim-alice is at step none after its last step",
        id="step-after-last",
    ),
    pytest.param(
        "claim-not-on-old",
        {"namespace": "jhub", "claim": "claim-alice", "on_volume": None, "volume": "pv-old"},
        "claim jhub/claim-alice is on volume nothing, not bound to pv-old: pv-old stays Retain and the move stays recorded; roll back again",
        id="claim-not-on-old",
    ),
    pytest.param(
        "lease-lost",
        {"namespace": "jhub", "lease": "lease-x", "claim": "claim-alice", "holder": "host-1/123"},
        "the lease jhub/lease-x of claim-alice was taken over by host-1/123 while this run waited: it stops here and changes nothing more",
        id="lease-lost",
    ),
    pytest.param(
        "lease-lost",
        {"namespace": "jhub", "lease": "lease-x", "claim": "claim-alice", "holder": None},
        "the lease jhub/lease-x of claim-alice was taken over while this run waited: it stops here and changes nothing more",
        id="lease-lost-unknown",
    ),
    pytest.param(
        "storage-class-unread",
        {"name": "nfs", "status": 403},
        "cannot read storage class nfs (403): not checked",
        id="storage-class-unread",
    ),
    pytest.param(
        "copy-pod-gone",
        {"pod": "claim-alice-rwx"},
        "the copy pod claim-alice-rwx disappeared",
        id="copy-pod-gone",
    ),
]


@pytest.mark.parametrize(("code", "facts", "expect"), ROWS)
def test_a_move_that_cannot_go_on_says_exactly_this(code, facts, expect):
    assert messages.migrate_error(code, **facts) == expect


def test_the_next_command_names_the_user_the_namespace_and_the_class():
    assert messages.migrate_command("rollback", "alice", "jhub") == RB
    assert messages.migrate_command("apply", "alice", "jhub", "nfs") == AP


def _named_codes() -> set[str]:
    """The codes every module of the migrate package passes to messages.migrate_error."""
    trees = [ast.parse(path.read_text()) for path in Path(migrate.__file__).parent.glob("*.py")]
    return {
        call.args[0].value
        for tree in trees
        for call in ast.walk(tree)
        if isinstance(call, ast.Call)
        and getattr(call.func, "attr", None) == "migrate_error"
        and call.args
        and isinstance(call.args[0], ast.Constant)
    }


def test_every_code_migrate_names_has_words_of_its_own():
    codes = _named_codes()
    assert len(codes) >= 20, codes  # the scan finds them
    assert codes <= set(messages.MIGRATE_ERRORS), codes - set(messages.MIGRATE_ERRORS)


def test_a_code_without_words_names_itself():
    assert messages.migrate_error("a-code-from-the-future") == "a-code-from-the-future"
