"""The move of the whole set, offered by fail fast's late refusal.  (pure)

The check said a server fits the node its home is pinned to; by the time its pod was created,
another pod had taken the room there, and the scheduler's word ended the spawn
(``unschedulable-pinned``, ``docs/failure-modes.md``, mode 3).  That is the capacity cap met late:
when the pinned node lacks room only and every pod holding the home is one of the user's servers
(the ones the way out stops), the refusal offers, as the check's refusal does, the move of the
whole set to a node that holds it (``docs/decisions.md``, "The move of the whole set").  The
move is chosen the check's way (:func:`nebari_colocate.placement.with_move`), on the hub's live
view of every node (:meth:`nebari_colocate.view.ClusterView.whole_set_state`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from . import fit
from .events import FAIL, FRAGMENT_INSUFFICIENT, UNSCHEDULABLE_PINNED, EventVerdict, Fragment
from .objects import Obj, holders, meta
from .placement import PINNED_BY_HOLDERS, REFUSE, Decision, Policy, with_move
from .state import ClusterState
from .wayout import home_holders

__all__ = ["late_move", "room_reasons"]


def room_reasons(fragments: Sequence[Fragment]) -> list[str]:
    """The scheduler's reasons for the pinned node as the check's reason codes
    (``insufficient:<resource>``, ``too-many-pods``, ...); a fragment whose cause is not a
    reason code is kept as its cause ("" when not understood), which no rule counts as room."""
    return [
        fit.insufficient(f.resource) if f.cause == FRAGMENT_INSUFFICIENT else (f.cause or "")
        for f in fragments
    ]


def late_move(
    verdict: EventVerdict,
    pod: Obj,
    state: ClusterState,
    *,
    claims: Sequence[str],
    policy: Policy,
    username: str,
    label_value: str | None,
) -> EventVerdict:
    """``verdict`` with the move of the whole set in its way out (``way_out.move``) when it ends
    the spawn of ``pod`` as ``unschedulable-pinned`` for lack of room on the pinned node only,
    it has a way out, and the pods that hold ``claims`` in ``state`` now are exactly the
    user's servers that way out stops; unchanged otherwise (and when no node holds the set and
    no autoscaler adds one, or the set mixes servers that need a premium resource with servers
    that need none: :func:`nebari_colocate.setmove.whole_set_move`)."""
    found = verdict.way_out
    if verdict.action != FAIL or verdict.code != UNSCHEDULABLE_PINNED or found is None:
        return verdict
    held = holders(state.pods, claims, exclude=meta(pod).get("name"))
    # a pod of another kind (a Job's), or a server started or stopped since: no move offered
    if home_holders(held, claims, username, label_value) != (found.stop, 0):
        return verdict
    judged = Decision(
        REFUSE,
        node=verdict.node,
        reasons=room_reasons(verdict.fragments),
        holder_pods=list(held),
        claims=list(claims),
        pinned_by=PINNED_BY_HOLDERS,
    )
    offered = with_move(pod, judged, found, state, policy)
    return replace(verdict, way_out=offered) if offered.move is not None else verdict
