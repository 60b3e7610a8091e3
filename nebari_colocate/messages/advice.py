"""What can help a refused user, the one table the headlines' advice reads
(:mod:`.headlines`): stopping the user's servers only where ``placement.STOPPING_HELPS`` says
it can, another profile only for a reason a profile changes (its resources, node selector,
tolerations, or whether it asks for a GPU).  (pure)
"""

from __future__ import annotations

from collections.abc import Collection

from .. import fit
from ..placement import (
    PREMIUM_NODE,
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
