"""The family of a refusal: the ``reason`` JupyterHub 6 records for a refused spawn.  (pure)

JupyterHub 6 tells a refusal from an error by the exception: a ``SpawnException`` is counted in
``jupyterhub_server_spawn_duration_seconds`` as ``status="failure"`` with the exception's
``reason`` as the ``reason`` label, and not toward ``consecutive_failure_limit``; anything else
is ``status="error"`` (docs/metrics.md, "Alert on real failures only").  The label takes one
value per family of reason codes, not per code: a code per resource (``insufficient:<r>``) would
add a series per resource, and an on-call rule needs the kind of refusal, not the filter.  Every
family starts with ``colocate-``, so ``reason=~"colocate-.*"`` selects every refusal of the
library.
"""

from __future__ import annotations

from collections.abc import Iterable

from . import fit
from .event_verdict import (
    IMAGE_INVALID,
    IMAGE_PULL,
    MULTI_ATTACH,
    NO_SCALE_UP,
    NO_SCHEDULER,
    PREEMPTION_STALLED,
    UNSCHEDULABLE,
    UNSCHEDULABLE_PINNED,
)
from .placement import (
    CLAIM_IN_USE,
    HOME_BEING_MOVED,
    NODE_NOT_FOUND,
    PREMIUM_NODE,
    SPLIT_ATTACHMENT,
)

#: what every family's name starts with
PREFIX = "colocate-"

#: the volume cannot be used now: in use by a ReadWriteOncePod holder, attached on two nodes,
#: its node gone, its own node affinity against the holders' node, being moved, or attached to
#: another node (Multi-Attach)
STORAGE_UNAVAILABLE = "colocate-storage-unavailable"
#: a server that needs no premium resource, kept off the premium node its volume is on
FAMILY_PREMIUM_NODE = "colocate-premium-node"
#: the volume pins the server to a node that is not the kind it needs (selector, taint, cordon)
VOLUME_PINNED = "colocate-volume-pinned"
#: the node the volume pins the server to has no room left for it
NO_ROOM = "colocate-no-room"
#: no running scheduler serves the pod's ``schedulerName``
FAMILY_NO_SCHEDULER = "colocate-no-scheduler"
#: no node can take the server, and no autoscaler can add one
NO_NODE = "colocate-no-node"
#: the server's image name is invalid, or its pulls keep failing
IMAGE = "colocate-image"
#: a code this table does not know (never expected: tests/unit/test_refusal_families.py)
OTHER = "colocate-other"

#: (family, the codes in it), in the order a refusal with codes of several families is named:
#: what an administrator must look at first, then what the user can change
FAMILIES: tuple[tuple[str, frozenset[str]], ...] = (
    (
        STORAGE_UNAVAILABLE,
        frozenset(
            {
                CLAIM_IN_USE,
                SPLIT_ATTACHMENT,
                NODE_NOT_FOUND,
                HOME_BEING_MOVED,
                fit.VOLUME_NODE_AFFINITY,
                MULTI_ATTACH,
            }
        ),
    ),
    (FAMILY_PREMIUM_NODE, frozenset({PREMIUM_NODE})),
    (
        VOLUME_PINNED,
        frozenset({fit.NODE_SELECTOR, fit.TAINT, fit.NODE_UNSCHEDULABLE, UNSCHEDULABLE_PINNED}),
    ),
    (NO_ROOM, frozenset({fit.INSUFFICIENT_ANY, fit.TOO_MANY_PODS, PREEMPTION_STALLED})),
    (FAMILY_NO_SCHEDULER, frozenset({NO_SCHEDULER})),
    (NO_NODE, frozenset({NO_SCALE_UP, UNSCHEDULABLE})),
    (IMAGE, frozenset({IMAGE_INVALID, IMAGE_PULL})),
)

#: every family name, :data:`OTHER` last
FAMILY_NAMES = (*(name for name, _ in FAMILIES), OTHER)


def _as_listed(code: str) -> str:
    return fit.INSUFFICIENT_ANY if fit.insufficient_resource(code) is not None else code


def family_of(codes: Iterable[str]) -> str:
    """The family of a refusal with reason codes ``codes`` (a decision's reasons, or an event
    verdict's one code): the first family of :data:`FAMILIES` that holds one of them."""
    listed = {_as_listed(code) for code in codes}
    for name, members in FAMILIES:
        if listed & members:
            return name
    return OTHER
