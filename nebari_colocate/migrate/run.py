"""What each ``nebari-colocate migrate`` subcommand does (I/O through :class:`Mover`): its result
as one JSON-ready dict and its exit status; the command parses, calls this and prints."""

from __future__ import annotations

from collections.abc import Sequence

from .. import messages
from ..objects import JsonDict
from .codes import MigrateError
from .mover import Mover, apply_many
from .plan import (
    apply_status,
    checks_class,
    dry_run_row,
    plan_row,
    rollback_status,
    selected_by_all,
)


async def run(
    mover: Mover,
    command: str,
    users: Sequence[str],
    storage_class: str | None,
    *,
    dry_run: bool = False,
    concurrency: int = 4,
) -> tuple[JsonDict, int]:
    """Run ``plan``, ``status``, ``rollback`` or ``apply`` for ``users`` (none: every home, or
    for ``apply``, every home ``--all`` selects) in the mover's namespace."""
    namespace = mover.namespace
    claims = await mover.resolve(users) if users else None
    if command == "plan":
        return await _plan(mover, claims, storage_class), 0
    if command == "status":
        return {"namespace": namespace, "moves": await mover.status(claims)}, 0
    if command == "rollback":
        results = [await mover.rollback(c) for c in claims or ()]
        return {"namespace": namespace, "results": results}, rollback_status(results)
    home_of = {h.claim: h for h in await mover.homes()}
    if claims is None:
        claims = selected_by_all(home_of, storage_class)
    notes = []
    fresh = [c for c in claims if checks_class(plan_row(home_of[c], storage_class), storage_class)]
    if fresh:
        notes = await mover.check_storage_class()
    if dry_run:
        results = []
        for claim in claims:
            row = plan_row(home_of[claim], storage_class)
            results.append({**dry_run_row(row), "plan": messages.migrate_action(row)})
        return {"namespace": namespace, "dry_run": True, "results": results, "notes": notes}, 0
    results = await apply_many(mover, claims, concurrency)
    return {"namespace": namespace, "dry_run": False, "results": results, "notes": notes}, (
        apply_status(results)
    )


async def _plan(mover: Mover, claims: list[str] | None, storage_class: str | None) -> JsonDict:
    notes = []
    if storage_class:
        try:
            notes = await mover.check_storage_class()
        except MigrateError as exc:
            notes = [f"cannot move to it: {exc}"]
    homes = await mover.homes()
    rows = [plan_row(h, storage_class) for h in homes if claims is None or h.claim in claims]
    return {
        "namespace": mover.namespace,
        "storage_class": storage_class,
        "homes": rows,
        "notes": notes,
    }
