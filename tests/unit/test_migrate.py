"""The pure parts of ``nebari-colocate migrate``: the spawn refusal while a home moves, what the
plan says, which classes are refused, how a copy pod is built and read.  (No cluster: the moves
themselves are in tests/cluster/test_migrate.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from builders import NAMESPACE, pod, pvc, running, state

from nebari_colocate import copy_home, messages, migrate
from nebari_colocate.objects import MIGRATION_ANNOTATION, MIGRATION_SINCE_ANNOTATION
from nebari_colocate.placement import REASON_CODES, REFUSE, Policy, decide


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
    assert text == (
        "Your default server cannot start: your home folder is being moved to new storage by an "
        "administrator (since 09:12 UTC). Your files are kept safe meanwhile. Try again in a few "
        "minutes; if it still cannot start after an hour, contact your administrator."
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
        "Your server 'lab' cannot start: your home folder is being moved to new storage by an "
        "administrator. "
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
