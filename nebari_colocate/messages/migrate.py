"""nebari-colocate migrate: what the operator reads (the codes come from migrate.py).  (pure)"""

from __future__ import annotations

from typing import Any

from ..objects import Obj
from .advice import _join
from .command import table

# --------------------------------------------------------------------------------------------------
# nebari-colocate migrate: what the operator reads (the codes come from migrate.py)

MIGRATE_ACTIONS = {
    "move": "move: copy to a new ReadWriteMany claim in class {target}, verify, rebind {claim}",
    "resume": "resume: the move stopped at step {step}; apply continues it",
    "retry": "retry: the last copy failed ({problem}); apply copies again",
    "servers-running": "wait: stop {running} first",
    "already-rwx": "nothing to do: already ReadWriteMany",
    "not-bound": "cannot move: the claim is not bound to a volume",
    "no-volume": "cannot move: the claim and its volume are gone",
    "done": "done: on volume {new_volume}; the old volume {volume} is retained",
}

MIGRATE_OUTCOMES = {
    "done": "moved to volume {new_volume}",
    "already-done": "already moved (volume {new_volume}); nothing done",
    "blocked": "stopped: {running} running; the old claim stays in use, apply again later",
    "failed": "stopped: the copy did not verify ({problems}); the old claim stays in place, in use",
    "skipped": "skipped: {reason}",
    "error": "error: {reason}",
    "rolled-back": "rolled back: {claim} is on volume {volume} again",
    "nothing-to-roll-back": "nothing to roll back: no move of {claim} is recorded",
    "would-move": "would move: {plan}",
    "held": "not done: another run holds this home's move ({holder}, since {since}, lease "
    "{lease} renewed {renewed}); wait for it to end (a lease seen unchanged for {lease_seconds} s "
    "is taken over by the next run)",
}

#: why a storage class cannot hold ReadWriteMany homes (``migrate.CLASS_PROBLEMS``)
STORAGE_CLASS_PROBLEMS = {
    "missing": "storage class {name!r} does not exist",
    "rwo-only": "storage class {name!r} is provisioned by {provisioner}, which offers no "
    "ReadWriteMany file system volumes",
    "no-volume": "storage class {name!r} has no provisioner and no Available ReadWriteMany volume",
}


def storage_class_problem(code: str, name: str, provisioner: str = "") -> str:
    """Why storage class ``name`` cannot hold the moved homes, in one line."""
    template = STORAGE_CLASS_PROBLEMS.get(code, "storage class {name!r}: {code}")
    return template.format(name=name, provisioner=provisioner, code=code)


#: how a stale lease was found when a run took it over (``lease.LeaseObserver``)
LEASE_TAKEN_OVER = {
    "stale": "its lease stayed unchanged for {unchanged_seconds} s while this run watched it "
    "(its duration: {lease_seconds} s)",
}


#: why a move cannot go on (``migrate.MigrateError``): code -> sentence, filled by
#: :func:`migrate_error` with the facts migrate.py names
MIGRATE_ERRORS = {
    "timed-out": "timed out after {timeout:g} s waiting for {what} (--timeout)",
    "claim-not-found": "claim {namespace}/{claim} not found",
    "no-home-claim": "no home claim for {name!r} in namespace {namespace} (give a username or a "
    "claim name; home claims are those named {prefix}* or carrying the {annotation} annotation)",
    "no-storage-class": "no target storage class: pass --storage-class (the class the hub "
    "creates ReadWriteMany homes in, helm custom.storage-class)",
    "storage-class-unread": "cannot read storage class {name} ({status}): not checked",
    "gave-up-unmarked": "{problem} The move gave up: {claim} is unmarked and stays on its old "
    "volume {volume}, so {user} can start servers again; fix that and apply again, or clear the "
    "move with: {rollback}",
    "gave-up-marked": "{problem} {claim} stays marked (its claim is being swapped to the new "
    "volume, {user}'s servers are refused): apply again to finish, or put it back with: "
    "{rollback}",
    "class-switch-too-late": "{claim} is moving to storage class {recorded} (its copy is "
    "verified, step {step}), not {asked}: finish it with {apply}, or reset the move with "
    "{rollback} and apply again",
    "claim-gone-before-copy": "claim {namespace}/{claim} is gone before its copy was made",
    "claim-moved-before-retain": "claim {namespace}/{claim} is on volume {on_volume}, not on "
    "{recorded} where this move started: nothing is changed; see migrate status, and put it "
    "back with: {rollback}",
    "volume-unreadable": "claim {namespace}/{claim}: its volume {volume} is not readable",
    "no-storage-class-for": "no target storage class for {claim}: pass --storage-class",
    "claim-moved-before-mark": "claim {namespace}/{claim} is on volume {on_volume}, not on "
    "{volume} where this move started: nothing is marked; see migrate status",
    "temporary-not-ours": "claim {namespace}/{temporary} exists and is not this move's",
    "copy-pod-gone": "the copy pod {pod} disappeared",
    "copy-pod-unscheduled": "the copy pod {namespace}/{pod} is not scheduled after {timeout:g} s "
    "(--timeout) ({why}): is the new claim {pod} bound (kubectl describe pvc {pod})?",
    "copy-running": "the copy pod {namespace}/{pod} did not finish within {timeout:g} s "
    "(--copy-timeout); it keeps running and {claim} stays marked: apply again to wait for it, "
    "or stop the move with: {rollback}",
    "temporary-not-bound": "claim {namespace}/{temporary} holds the copy but is not bound",
    "no-target-volume": "volume {volume} records no target volume for {claim}",
    "target-volume-gone": "volume {new_volume}, the copy of {claim}, is gone; roll back",
    "claim-recreated": "claim {namespace}/{claim} was recreated meanwhile (bound to "
    "{on_volume}), not by this move: both volumes ({volume}, {new_volume}) are retained; see "
    "docs/migrate.md",
    "step-after-last": "the move of {claim} is at step {at_step} after its last step",
    "claim-not-on-old": "claim {namespace}/{claim} is on volume {on_volume}, not bound to "
    "{volume}: {volume} stays Retain and the move stays recorded; roll back again",
    "lease-lost": "the lease {namespace}/{lease} of {claim} was taken over{by} while this run "
    "waited: it stops here and changes nothing more",
}

#: a fact that may be missing (None or ""), and what a sentence says in its place
_MIGRATE_MISSING = {"on_volume": "nothing", "at_step": "none", "why": "no reason given"}


def as_sentence(problem: object) -> str:
    """``problem``'s words ending in a full stop (or ``?``, ``!``)."""
    text = str(problem).rstrip()
    return text if text.endswith((".", "?", "!")) else f"{text}."


def migrate_error(code: str, **facts: Any) -> str:
    """The sentence of ``MIGRATE_ERRORS[code]`` with ``facts``: ``why`` a list of reasons,
    ``holder`` the lease's holder (or None), ``problem`` an earlier error; a code without words
    names itself."""
    values = dict(facts)
    if "why" in values:
        values["why"] = "; ".join(values["why"])
    if "holder" in values:
        values["by"] = f" by {values['holder']}" if values["holder"] else ""
    if "problem" in values:
        values["problem"] = as_sentence(values["problem"])
    for key, missing in _MIGRATE_MISSING.items():
        if key in values and not values[key]:
            values[key] = missing
    return MIGRATE_ERRORS.get(code, "{code}").format(code=code, **values)


def migrate_command(verb: str, user: str, namespace: str, storage_class: str | None = None) -> str:
    """The command an operator runs next (shown in problems and refusals)."""
    command = f"nebari-colocate migrate {verb} {user} -n {namespace}"
    return command + (f" --storage-class {storage_class}" if storage_class else "")


def _fill(template: str, row: Obj) -> str:
    values = {k: ("-" if v is None else v) for k, v in row.items()}
    for key in ("running", "problems"):
        if isinstance(values.get(key), list):
            values[key] = _join([str(v) for v in values[key]]) or "-"
    values.setdefault("target", row.get("target_storage_class") or "-")
    try:
        return template.format_map(values)
    except (KeyError, IndexError, ValueError):
        return template


#: what ``audit`` points to for ReadWriteOnce homes left in a ReadWriteMany deployment
MIGRATE_PLAN_COMMAND = "nebari-colocate migrate plan"


def migrate_plan_hint() -> str:
    return (
        f"They keep their servers on one node. To move them to ReadWriteMany storage, see "
        f"{MIGRATE_PLAN_COMMAND} (then migrate apply; docs/migrate.md)."
    )


def migrate_action(row: Obj) -> str:
    """The plan's words for one home."""
    return _fill(MIGRATE_ACTIONS.get(row.get("action", ""), "{action}"), row)


def migrate_outcome(result: Obj) -> str:
    if result.get("outcome") == "skipped" and result.get("reason") in MIGRATE_ACTIONS:
        return "skipped: " + _fill(MIGRATE_ACTIONS[result["reason"]], result)
    if result.get("outcome") == "rolled-back" and "volume" not in result:
        result = {**result, "volume": result.get("old_volume")}
    return _fill(MIGRATE_OUTCOMES.get(result.get("outcome", ""), "{outcome}"), result)


def migrate_notes(result: Obj) -> list[str]:
    """The lines under one home's outcome: a lease taken over, a storage class changed."""
    notes = []
    took = result.get("took_over")
    if took:
        why = _fill(LEASE_TAKEN_OVER.get(took.get("state", ""), "{state}"), took)
        notes.append(_fill("took over the move from {holder} (since {since}): ", took) + why)
    changed = result.get("storage_class_changed")
    if changed:
        notes.append(
            _fill(
                "the unfinished move to storage class {from} now goes to {to}: its temporary "
                "claim and copy pod in {from} were deleted",
                changed,
            )
        )
    return notes


def delete_old_volume_hint(volume: str) -> str:
    """How an operator finishes a move once the user's data is confirmed on the new volume."""
    return (
        f"the old volume {volume} is kept (Retain); once the user confirms their files, delete "
        f"it with: kubectl delete pv {volume}"
    )


def render_migrate_plan(plan: Obj) -> str:
    rows = plan["homes"]
    lines = [
        f"Home claims in namespace {plan['namespace']} (target storage class "
        f"{plan.get('storage_class') or '-'}): {len(rows)}"
    ]
    if rows:
        lines += table(
            ("USER", "CLAIM", "MODES", "SIZE", "CLASS", "VOLUME", "RUNNING", "WHAT WOULD HAPPEN"),
            (
                (
                    r["user"] or "-",
                    r["claim"],
                    ",".join(r["access_modes"]) or "-",
                    r["size"] or "-",
                    r["storage_class"] or "-",
                    r["volume"] or "-",
                    _join(r["running"]) or "-",
                    migrate_action(r),
                )
                for r in rows
            ),
            indent="",
        )
    lines += [f"note: {n}" for n in plan.get("notes") or []]
    return "\n".join(lines)


def render_migrate_results(results: list[Obj], dry_run: bool = False) -> str:
    lines = []
    for r in results:
        lines.append(f"{r.get('user') or '-'} ({r['claim']}): {migrate_outcome(r)}")
        lines += [f"  {note}" for note in migrate_notes(r)]
        if r.get("outcome") in ("done", "already-done") and r.get("old_volume"):
            lines.append(f"  {delete_old_volume_hint(r['old_volume'])}")
        if r.get("outcome") == "rolled-back" and r.get("kept_volume"):
            lines.append(
                f"  volume {r['kept_volume']} (the moved copy, with any work since the move) is "
                f"kept (Retain): delete it with: kubectl delete pv {r['kept_volume']}"
            )
    if dry_run:
        lines.append("dry run: nothing was changed")
    return "\n".join(lines) or "no home claims selected"


def render_migrate_status(status: Obj) -> str:
    rows = status["moves"]
    lines = [f"Moves in namespace {status['namespace']}: {len(rows)}"]
    if rows:
        lines += table(
            ("USER", "CLAIM", "STEP", "MODES", "OLD VOLUME", "NEW VOLUME", "COPY", "PROBLEM"),
            (
                (
                    r["user"] or "-",
                    r["claim"],
                    r["step"] or "not started",
                    ",".join(r["access_modes"]) or "(no claim)",
                    r["old_volume"] or "-",
                    r["new_volume"] or "-",
                    (r["copy"] or {}).get("result") or r["copy_pod"] or "-",
                    r["problem"] or "-",
                )
                for r in rows
            ),
            indent="",
        )
    for r in rows:
        if r.get("held_by"):
            lines.append(
                _fill("{claim}: being moved now by {holder} (since {since})", {**r, **r["held_by"]})
            )
        if r["step"] == "done" and r["old_volume"]:
            lines.append(f"{r['claim']}: {delete_old_volume_hint(r['old_volume'])}")
    return "\n".join(lines)
