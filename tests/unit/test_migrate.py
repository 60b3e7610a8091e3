"""The pure parts of ``nebari-colocate migrate``: the spawn refusal while a home moves, what the
plan says, which classes are refused, how a copy pod is built and read.  (No cluster: the moves
themselves are in tests/cluster/test_migrate.py.)"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from nebari_colocate import copy_home, messages, migrate
from nebari_colocate import lease as lease_rules
from nebari_colocate.objects import (
    MIGRATION_ANNOTATION,
    MIGRATION_SINCE_ANNOTATION,
    MIGRATION_STALLED_ANNOTATION,
)
from nebari_colocate.placement import REASON_CODES, REFUSE, Policy, decide
from tests.support.builders import NAMESPACE, pod, pvc, running, state


def moving(claim: dict, value: str = "moving", since: str | None = "2026-12-01T09:12:30Z"):
    annotations = {MIGRATION_ANNOTATION: value}
    if since:
        annotations[MIGRATION_SINCE_ANNOTATION] = since
    claim["metadata"]["annotations"] = annotations
    return claim


# --------------------------------------------------------------------------------------------------
# the spawn refusal


@pytest.mark.parametrize(
    "test_variation_id, claims, expect_verdict, expect_reasons",
    [
        ("a marked RWO home", [moving(pvc("claim-alice"))], REFUSE, ["home-being-moved"]),
        (
            "a marked home that is already RWX (the recreated claim until it is bound)",
            [moving(pvc("claim-alice", modes=["ReadWriteMany"]))],
            REFUSE,
            ["home-being-moved"],
        ),
        ("an unmarked home", [pvc("claim-alice")], "colocate", []),
        ("another value of the annotation", [moving(pvc("claim-alice"), "done")], "colocate", []),
        ("a claim not created yet", [], "colocate", []),
    ],
)
def test_a_home_being_moved_refuses_every_spawn_that_mounts_it(
    test_variation_id, claims, expect_verdict, expect_reasons
):
    new = pod("jupyter-alice", claims=["claim-alice"], user="alice")
    decision = decide(new, state(*claims), Policy())
    assert (decision.verdict, decision.reasons) == (expect_verdict, expect_reasons)


def test_the_refusal_says_the_home_is_being_moved_and_when_to_try_again():
    holder = running(
        "jupyter-alice--app", "cpu-1", user="alice", server="app", claims=["claim-alice"]
    )
    new = pod("jupyter-alice", claims=["claim-alice"], user="alice")
    decision = decide(new, state(moving(pvc("claim-alice")), holder), Policy())
    assert decision.claims == ["claim-alice"]
    assert decision.moving_since == "2026-12-01T09:12:30Z"
    text = messages.user_message(decision, new, username="alice", server_name="")
    assert text.startswith(
        "Your default server cannot start. Your home folder is being moved to new storage (since "
        "09:12 UTC). Your files are safe. Try again in a few minutes. Details: Your home folder "
        "is being moved to new storage by an administrator (since 09:12 UTC)."
    )
    html = messages.user_html(decision, new, username="alice", server_name="<b>x</b>")
    assert "&lt;b&gt;x&lt;/b&gt;" in html and "<b>x" not in html
    assert "home-being-moved" in REASON_CODES
    assert decision.as_json(text)["reasons"] == ["home-being-moved"]


def test_the_refusal_without_a_start_time_says_no_time():
    new = pod("jupyter-alice", claims=["claim-alice"], user="alice")
    decision = decide(new, state(moving(pvc("claim-alice"), since=None)), Policy())
    text = messages.user_message(decision, new, username="alice", server_name="lab")
    assert text.startswith(
        "Your server 'lab' cannot start. Your home folder is being moved to new storage. "
    )


def test_a_move_that_stopped_part_way_says_an_administrator_must_finish_it():
    claim = moving(pvc("claim-alice"))
    claim["metadata"]["annotations"][MIGRATION_STALLED_ANNOTATION] = "2026-12-01T09:20:00Z"
    new = pod("jupyter-alice", claims=["claim-alice"], user="alice")
    decision = decide(new, state(claim), Policy())
    assert decision.moving_stalled == "2026-12-01T09:20:00Z"
    text = messages.user_message(decision, new, username="alice", server_name="")
    assert text.startswith(
        "Your default server cannot start. The move of your home folder to new storage stopped "
        "part-way. Your files are safe. Ask your administrator to finish the move. Details: The "
        "move of your home folder to new storage stopped part-way (at 09:20 UTC) and waits for "
        "an administrator. An administrator finishes the move, or puts the home back, with "
        "nebari-colocate migrate apply or rollback."
    )


# --------------------------------------------------------------------------------------------------
# the plan


def home(claim=None, *, old_pv=None, pods=(), step=None) -> migrate.Home:
    claim = claim if claim is not None else pvc("claim-alice")
    if claim:
        claim.setdefault("status", {})["phase"] = "Bound"
        claim["metadata"]["annotations"] = {"hub.jupyter.org/username": "alice"}
    volume = old_pv or {"metadata": {"name": "pv-claim-alice", "annotations": {}}, "spec": {}}
    if step:
        volume["metadata"]["annotations"].update(
            {migrate.CLAIM_KEY: f"{NAMESPACE}/claim-alice", migrate.STEP_KEY: step}
        )
    return migrate.Home(
        NAMESPACE, "claim-alice", "alice", pvc=claim or None, old_pv=volume, pods=list(pods)
    )


SERVER = running("jupyter-alice", "cpu-1", user="alice", claims=["claim-alice"])


@pytest.mark.parametrize(
    "test_variation_id, make, expect_action",
    [
        ("a stopped RWO home", lambda: home(), "move"),
        ("a running server", lambda: home(pods=[SERVER]), "servers-running"),
        ("already RWX", lambda: home(pvc("claim-alice", modes=["ReadWriteMany"])), "already-rwx"),
        ("not bound", lambda: home(pvc("claim-alice", volume=None)), "not-bound"),
        ("interrupted mid-copy", lambda: home(step="copying"), "resume"),
        (
            "interrupted mid-copy, a server since",
            lambda: home(step="copying", pods=[SERVER]),
            "servers-running",
        ),
        ("interrupted mid-swap, the claim gone", lambda: home(False, step="swapping"), "resume"),
        ("a failed copy", lambda: home(step="failed"), "retry"),
        ("moved", lambda: home(step="done"), "done"),
    ],
)
def test_the_plan_says_what_apply_would_do(test_variation_id, make, expect_action):
    row = migrate.plan_row(make(), "nfs")
    assert row["action"] == expect_action
    assert messages.migrate_action(row)  # every action has words


def test_a_plan_row_carries_the_facts_an_operator_needs():
    row = migrate.plan_row(home(pods=[SERVER]), "nfs")
    assert {k: row[k] for k in ("user", "claim", "access_modes", "size", "volume", "running")} == {
        "user": "alice",
        "claim": "claim-alice",
        "access_modes": ["ReadWriteOnce"],
        "size": "10Gi",
        "volume": "pv-claim-alice",
        "running": ["(default)"],
    }
    assert messages.migrate_action(row) == "wait: stop (default) first"


def test_the_copy_pod_and_the_migration_claim_never_count_as_a_server_or_a_home():
    copy = migrate.copy_pod_manifest(home(), "python:3.12-slim", None, script="pass")
    assert migrate.holders([copy, SERVER], "claim-alice") == [SERVER]
    temporary = pvc(migrate.temporary_name("claim-alice"))
    temporary["metadata"]["annotations"] = {migrate.OF_KEY: "claim-alice"}
    assert not migrate.is_home_claim(temporary)
    assert migrate.is_home_claim(pvc("claim-bob"))


@pytest.mark.parametrize("claim", ["claim-alice", "claim-" + "x" * 250])
def test_temporary_names_cannot_be_a_home_claim_name_and_fit_a_pod_name(claim):
    name = migrate.temporary_name(claim)
    assert name.startswith("migrate-") and len(name) <= 63


# --------------------------------------------------------------------------------------------------
# storage classes


@pytest.mark.parametrize(
    "test_variation_id, storage_class, rwx_volumes, expect",
    [
        ("missing", None, None, "storage class 'x' does not exist"),
        (
            "an EBS class",
            {"provisioner": "ebs.csi.aws.com"},
            None,
            "storage class 'x' is provisioned by ebs.csi.aws.com, which offers no ReadWriteMany "
            "file system volumes",
        ),
        ("EFS", {"provisioner": "efs.csi.aws.com"}, None, None),
        ("NFS", {"provisioner": "nfs.csi.k8s.io"}, None, None),
        (
            "static, no RWX volume",
            {"provisioner": "kubernetes.io/no-provisioner"},
            0,
            "storage class 'x' has no provisioner and no Available ReadWriteMany volume",
        ),
        ("static with RWX volumes", {"provisioner": "kubernetes.io/no-provisioner"}, 2, None),
        ("unknown provisioner", {"provisioner": "example.com/fs"}, None, None),
    ],
)
def test_a_class_that_cannot_offer_read_write_many_is_refused_when_that_is_known(
    test_variation_id, storage_class, rwx_volumes, expect
):
    assert migrate.class_problem(storage_class, "x", rwx_volumes) == expect


# --------------------------------------------------------------------------------------------------
# the copy pod


def test_the_copy_pod_mounts_the_old_home_read_only_and_runs_the_shipped_script():
    manifest = migrate.copy_pod_manifest(home(), "python:3.12-slim", "cpu-7")
    spec = manifest["spec"]
    old = next(
        v for v in spec["volumes"] if v["persistentVolumeClaim"]["claimName"] == "claim-alice"
    )
    assert old["persistentVolumeClaim"]["readOnly"] is True
    (container,) = spec["containers"]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts[migrate.OLD_MOUNT]["readOnly"] is True
    assert not mounts[migrate.NEW_MOUNT].get("readOnly")
    assert container["command"][:2] == ["python3", "-c"]
    assert container["command"][2] == migrate.COPY_SCRIPT.read_text()
    assert Path(copy_home.__file__) == migrate.COPY_SCRIPT
    assert spec["restartPolicy"] == "Never"
    term = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["cpu-7"]
    # the whole script fits one argument (Linux limits one to 128 KiB)
    assert len(container["command"][2].encode()) < 128 * 1024


def finished(phase, message="", exit_code=0):
    return {
        "status": {
            "phase": phase,
            "containerStatuses": [
                {"state": {"terminated": {"exitCode": exit_code, "message": message}}}
            ],
        }
    }


@pytest.mark.parametrize(
    "test_variation_id, pod_, expect_result",
    [
        ("running", {"status": {"phase": "Running"}}, None),
        (
            "verified",
            finished("Succeeded", json.dumps({"result": "verified", "digest": "d"})),
            "verified",
        ),
        ("mismatch", finished("Failed", json.dumps({"result": "mismatch"}), 3), "mismatch"),
        ("killed, no message", finished("Failed", "", 137), "error"),
        ("a message that is no summary", finished("Failed", "OOMKilled", 137), "error"),
        (
            "a summary that says verified on a failed pod",
            finished("Failed", json.dumps({"result": "verified"}), 1),
            "error",
        ),
    ],
)
def test_the_copy_result_is_read_from_the_termination_message(
    test_variation_id, pod_, expect_result
):
    result = migrate.copy_result(pod_)
    assert (result or {}).get("result") == expect_result


@pytest.mark.parametrize(
    "test_variation_id, result, expect",
    [
        ("moved", {"outcome": "done", "new_volume": "pv-new"}, "moved to volume pv-new"),
        (
            "servers running",
            {"outcome": "blocked", "running": ["(default)", "app"]},
            "stopped: (default) and app running; the old claim stays in use, apply again later",
        ),
        (
            "failed verification",
            {"outcome": "failed", "problems": ["1 entries differ", "a: content differ"]},
            "stopped: the copy did not verify (1 entries differ and a: content differ); the old "
            "claim stays in place, in use",
        ),
        (
            "skipped, named while running",
            {"outcome": "skipped", "reason": "servers-running", "running": ["(default)"]},
            "skipped: wait: stop (default) first",
        ),
        (
            "a user name with braces does not break the words",
            {"outcome": "error", "reason": "no home claim for '{x}'"},
            "error: no home claim for '{x}'",
        ),
    ],
)
def test_apply_outcomes_in_words(test_variation_id, result, expect):
    assert messages.migrate_outcome(result) == expect


def test_the_hint_to_finish_a_move_names_the_volume_to_delete():
    assert messages.delete_old_volume_hint("pv-1").endswith("kubectl delete pv pv-1")


def test_every_plan_action_and_outcome_code_has_words():
    assert set(messages.MIGRATE_ACTIONS) == set(migrate.ACTIONS)
    assert set(messages.MIGRATE_OUTCOMES) == set(migrate.OUTCOMES)


def test_every_storage_class_problem_and_lease_state_has_words():
    assert set(messages.STORAGE_CLASS_PROBLEMS) == set(migrate.CLASS_PROBLEMS)
    assert set(messages.LEASE_TAKEN_OVER) == {migrate.STALE}


# --------------------------------------------------------------------------------------------------
# one run at a time per home: the lease


def lease(holder="ops@laptop pid 42 ab12cd", host="laptop", pid="42", renewed="09:59:30"):
    return {
        "metadata": {
            "name": "migrate-claim-alice",
            "annotations": {migrate.HOST_KEY: host, migrate.PID_KEY: pid},
        },
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": 60,
            "acquireTime": "2026-12-01T09:50:00.000000Z",
            "renewTime": f"2026-12-01T{renewed}.123456Z" if renewed else None,
        },
    }


class Clock:
    """This run's monotonic clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def renewed(found, when="10:00:01", version="2"):
    """``found`` as its holder's next renewal writes it (a new resourceVersion)."""
    again = {**found, "metadata": {**found["metadata"], "resourceVersion": version}}
    again["spec"] = {**found["spec"], "renewTime": f"2026-12-01T{when}.000000Z"}
    return again


def watch(reads, clock):
    """Judge ``reads`` in order, each ``(seconds later, lease)``: the states, in order."""
    observer = lease_rules.LeaseObserver(clock)
    states = []
    for later, found in reads:
        clock.now += later
        states.append(observer.judge(found))
    return states, observer


A = lease()
A["metadata"]["resourceVersion"] = "1"
IN_THE_FUTURE = lease(renewed="11:00:00")  # written by a clock one hour ahead
IN_THE_FUTURE["metadata"]["resourceVersion"] = "1"
#: a container that carries this host's name, its process id not one of this host's
HERE_NO_PROCESS = lease(host=socket.gethostname(), pid="999999999")
HERE_NO_PROCESS["metadata"]["resourceVersion"] = "1"


@pytest.mark.parametrize(
    "test_variation_id, reads, expect, renews",
    [
        ("first seen: held, whatever its renewTime", [(0, A)], ["held"], False),
        ("unchanged for less than its 60 s: held", [(0, A), (59.9, A)], ["held"] * 2, False),
        ("unchanged for its whole 60 s: stale", [(0, A), (60, A)], ["held", "stale"], False),
        (
            "renewTime an hour ahead (a clock ahead), unchanged for 60 s: stale",
            [(0, IN_THE_FUTURE), (30, IN_THE_FUTURE), (30, IN_THE_FUTURE)],
            ["held", "held", "stale"],
            False,
        ),
        (
            "renewTime 90 s behind (a clock behind), renewed every second: held",
            [(0, lease(renewed="09:58:30"))]
            + [(1, renewed(A, f"09:58:{31 + i}", str(10 + i))) for i in range(70)],
            ["held"] * 71,
            True,
        ),
        (
            "renewed once: the 60 s start again from the renewal",
            [(0, A), (50, renewed(A)), (50, renewed(A)), (10, renewed(A))],
            ["held", "held", "held", "stale"],
            True,
        ),
        ("released (no holder): stale at once", [(0, lease(holder=""))], ["stale"], False),
        (
            "this host's name and a process that does not run here, renewed: held",
            [(0, HERE_NO_PROCESS), (30, renewed(HERE_NO_PROCESS)), (50, renewed(HERE_NO_PROCESS))],
            ["held", "held", "held"],
            True,
        ),
        (
            "this host's name and a process that does not run here, unchanged for less than "
            "60 s: held",
            [(0, HERE_NO_PROCESS), (59, HERE_NO_PROCESS)],
            ["held", "held"],
            False,
        ),
    ],
)
def test_a_lease_is_taken_over_only_once_seen_unchanged_for_its_duration_by_this_runs_clock(
    test_variation_id, reads, expect, renews
):
    states, observer = watch(reads, Clock())
    assert states == expect
    assert observer.renewed is renews


def test_a_lease_without_a_duration_is_judged_by_the_movers_default():
    found = lease()
    del found["spec"]["leaseDurationSeconds"]
    assert watch([(0, found), (59, found)], Clock())[0] == ["held", "held"]
    assert watch([(0, found), (60, found)], Clock())[0] == ["held", "stale"]


def test_a_held_home_says_who_holds_it_and_since_when_in_one_line():
    result = {
        "outcome": "held",
        "claim": "claim-alice",
        **migrate.lease_facts(lease()),
    }
    text = messages.migrate_outcome(result)
    assert text == (
        "not done: another run holds this home's move (ops@laptop pid 42 ab12cd, since "
        "2026-12-01T09:50:00.000000Z, lease migrate-claim-alice renewed "
        "2026-12-01T09:59:30.123456Z); wait for it to end (a lease seen unchanged for 60 s is "
        "taken over by the next run)"
    )
    assert "\n" not in text


def test_a_lease_taken_over_and_a_class_changed_are_said_under_the_outcome():
    result = {
        "outcome": "done",
        "claim": "claim-alice",
        "new_volume": "pv-new",
        "took_over": {
            **migrate.lease_facts(lease()),
            "state": migrate.STALE,
            "unchanged_seconds": 61.5,
        },
        "storage_class_changed": {"from": "nfs-old", "to": "nfs"},
    }
    assert messages.migrate_notes(result) == [
        "took over the move from ops@laptop pid 42 ab12cd (since 2026-12-01T09:50:00.000000Z): "
        "its lease stayed unchanged for 61.5 s while this run watched it (its duration: 60 s)",
        "the unfinished move to storage class nfs-old now goes to nfs: its temporary claim and "
        "copy pod in nfs-old were deleted",
    ]


def test_a_rollback_says_the_volume_the_claim_is_on_as_read():
    result = {"outcome": "rolled-back", "claim": "claim-alice", "old_volume": "pv-old"}
    assert messages.migrate_outcome({**result, "volume": "pv-old"}) == (
        "rolled back: claim-alice is on volume pv-old again"
    )


@pytest.mark.parametrize("flag", ["--timeout", "--copy-timeout"])
@pytest.mark.parametrize("value", ["0", "-5", "soon", "nan", "inf"])
def test_a_bad_wait_is_one_line_naming_the_flag(capsys, flag, value):
    from nebari_colocate import cli

    with pytest.raises(SystemExit) as exited:
        cli.main(["migrate", "apply", "alice", flag, value])
    assert exited.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == (
        f"nebari-colocate migrate apply: error: argument {flag}: invalid {flag} {value!r}: use "
        "a number of seconds > 0"
    )


def test_rollback_takes_the_wait_flag_too(capsys):
    from nebari_colocate import cli

    args = cli.build_parser().parse_args(["migrate", "rollback", "alice", "--timeout", "12.5"])
    assert args.timeout == 12.5
    assert cli.build_parser().parse_args(["migrate", "apply", "--all"]).timeout == 300
