"""What a refused user is told to do, following the one table of what can help: stopping the
user's servers only where ``placement.STOPPING_HELPS`` says it can, another profile only for a
reason a profile changes (its resources, node selector, tolerations, or whether it asks for a
GPU).  (pure)
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from .. import fit
from ..placement import (
    CLAIM_IN_USE,
    HOME_BEING_MOVED,
    NODE_NOT_FOUND,
    PINNED_BY_ATTACHMENT,
    PINNED_BY_HOLDERS,
    PREMIUM_NODE,
    SPLIT_ATTACHMENT,
    Decision,
    stopping_helps,
)
from ..wayout import UNRESOLVABLE


def _join(items: list[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


#: the reason codes another profile can change (``fit.INSUFFICIENT_ANY`` for every resource):
#: a smaller request, another node selector or toleration, a GPU asked for. A cordoned node, a
#: node's pod limit, a volume's own node affinity and a claim in use stay whatever is chosen.
_PROFILE_CAN_CHANGE = frozenset({fit.NODE_SELECTOR, fit.TAINT, fit.INSUFFICIENT_ANY, PREMIUM_NODE})


def _family(code: str) -> str:
    return fit.INSUFFICIENT_ANY if fit.insufficient_resource(code) is not None else code


def profile_can_help(reasons: Collection[str]) -> bool:
    """Whether another profile may remove every one of ``reasons`` (reason codes)."""
    return all(_family(code) in _PROFILE_CAN_CHANGE for code in reasons)


def nothing_the_user_does_helps(reasons: Collection[str]) -> bool:
    """Whether one of ``reasons`` is one no stop of the user's servers changes
    (``placement.STOPPING_HELPS``: UNRESOLVABLE); no profile changes those either."""
    return any(stopping_helps(code) == UNRESOLVABLE for code in reasons)


#: what a user is told while their home is moved (a move takes minutes for most homes)
HOME_MOVE_ADVICE = (
    "Your files are kept safe meanwhile. Try again in a few minutes; if it still cannot start "
    "after an hour, contact your administrator."
)


#: what a user is told when the move of their home gave up part-way (only an administrator can
#: finish it, or put it back, with ``nebari-colocate migrate apply|rollback``)
HOME_MOVE_STALLED_ADVICE = (
    "Your files are kept safe. Trying again will not help until it is fixed: ask your "
    "administrator to finish the move or put your home back (nebari-colocate migrate)."
)

#: a volume whose own node affinity keeps it off the node the home is on: where a volume may
#: be used is the storage's, not the server's
VOLUME_PLACE_ADVICE = (
    "Stopping your other servers or choosing another profile cannot change where a volume may "
    "be used: ask your administrator to make the volumes this server mounts usable on the same "
    "node (for example, in the same zone)."
)

#: a reason nothing the user does changes, without words of its own
ADMINISTRATOR_ADVICE = "Please contact your administrator."


def unresolvable_advice(decision: Decision) -> str:
    """The advice for a refusal no stop and no profile changes (``nothing_the_user_does_helps``)."""
    if HOME_BEING_MOVED in decision.reasons and decision.moving_stalled:
        return HOME_MOVE_STALLED_ADVICE
    if HOME_BEING_MOVED in decision.reasons:
        return HOME_MOVE_ADVICE
    if SPLIT_ATTACHMENT in decision.reasons:
        return ADMINISTRATOR_ADVICE
    if NODE_NOT_FOUND in decision.reasons:
        return (
            "Please contact your administrator: the volume must be released from the node that "
            "is gone before it can be used elsewhere."
        )
    if fit.VOLUME_NODE_AFFINITY in decision.reasons:
        return VOLUME_PLACE_ADVICE
    return ADMINISTRATOR_ADVICE


def _advice(
    decision: Decision,
    holders: list[str],
    has_profiles: bool = True,
    own_pods: int = 0,
    others: int = 0,
) -> str:
    if nothing_the_user_does_helps(decision.reasons):
        return unresolvable_advice(decision)
    if not holders and decision.holder_pods and decision.pinned_by == PINNED_BY_HOLDERS:
        # Only pods that are not servers hold it: nothing on the hub stops them.
        if own_pods:
            stop = "wait for your other pods using it to finish (or delete them)"
        else:
            stop = "wait until the other pods using it have finished (ask your administrator)"
    else:
        stop = f"stop {_join(holders)} first" if holders else "stop the servers using it first"
    if decision.pinned_by == PINNED_BY_ATTACHMENT and not holders:
        return "The volume is still being released from its last node: try again in a minute."
    states = fit.node_states(decision.fit) if decision.fit else []
    # No profile fits a cordoned, unreachable or failing node, nor changes a reason of the
    # volume's (ReadWriteOncePod in use) or of the node's pod limit.
    profiles = has_profiles and not states and profile_can_help(decision.reasons)
    if others:
        return _shared_advice(decision, profiles, others)
    if states:
        # only freeing the volume helps
        return f"To start it, {stop}.{_node_state_advice(states, decision.node)}"
    if not profiles:
        return f"To start it, {stop}."
    if PREMIUM_NODE in decision.reasons and len(decision.reasons) == 1:
        return f"To start it, {stop}, or choose a profile with a GPU."
    return f"To start it, {stop}, or choose a profile that fits on node {decision.node}."


def _node_state_advice(states: Sequence[str], node: str | None) -> str:
    """What else to know when the pinned node's state, not the profile, is in the way."""
    if any(s in fit.NODE_STATES_UNRESPONSIVE for s in states):
        return (
            f" Node {node} may not let them stop cleanly: if this server still cannot start in "
            f"a few minutes, ask your administrator to release the volume from node {node}."
        )
    return ""


def _shared_advice(decision: Decision, profiles: bool, others: int) -> str:
    """Servers of other users hold the volume: nothing the user stops frees it (counted,
    never named); a profile that fits the node (``profiles``: one can help), or an
    administrator, can help."""
    why = (
        f"Stopping your own servers cannot free it while {others} server(s) of other users "
        "use it too."
    )
    admin = (
        "ask your administrator: a volume that several users' servers use needs storage "
        "that any node can use (ReadWriteMany)"
    )
    if CLAIM_IN_USE in decision.reasons or not profiles:
        return f"{why} To start it, {admin}."
    if PREMIUM_NODE in decision.reasons and len(decision.reasons) == 1:
        return f"{why} To start it, choose a profile with a GPU, or {admin}."
    return f"{why} To start it, choose a profile that fits on node {decision.node}, or {admin}."
