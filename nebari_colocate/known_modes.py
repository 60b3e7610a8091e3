"""The access modes of claims the hub has seen, remembered between checks.

A claim's ``spec.accessModes`` cannot change once it exists, so what one check read stays true
for the next; the safe side (``docs/decisions.md``, "The safe side") reads this memory when the
state cannot be gathered, and never pins on a claim it knows is shared (Nebari's
``jupyterhub-<namespace>-share``, mounted by every user's pods).  The spawner keeps one at class
level, fed from every state a check reads and from the live view's last known claims.

A claim deleted and created again under the same name may have other modes: every state read
overwrites what is remembered, and a claim a read did not find is forgotten.
"""

from __future__ import annotations

from collections.abc import Iterable

from .objects import spec
from .state import ClusterState


class KnownModes:
    """(namespace, claim) -> the claim's access modes, as last read."""

    def __init__(self) -> None:
        self._modes: dict[tuple[str, str], tuple[str, ...]] = {}

    def learn(self, namespace: str, claims: Iterable[str], state: ClusterState) -> None:
        """What a state read says of ``claims``: their modes, or that they do not exist."""
        for claim in claims:
            pvc = state.pvc(namespace, claim)
            if pvc is None:
                self._modes.pop((namespace, claim), None)
            else:
                self._modes[(namespace, claim)] = tuple(spec(pvc).get("accessModes") or [])

    def of(self, namespace: str, claims: Iterable[str]) -> dict[str, list[str]]:
        """Claim -> modes for those of ``claims`` whose modes are known."""
        return {
            c: list(modes) for c in claims if (modes := self._modes.get((namespace, c))) is not None
        }

    def forget(self) -> None:
        """Forget everything (tests)."""
        self._modes.clear()
