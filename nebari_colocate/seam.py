"""What the way out's and the move's steps may ask of a spawner: the one typed seam between
``handlers`` (and ``release``, which waits for the home's release) and ``spawner``; and what
fail fast's late refusal asks of it to offer the move of the whole set (``fail_fast``).

:class:`HandlerSpawner` lists every member the steps read or set; mypy checks ``handlers`` and
``release`` against it, and that :class:`~nebari_colocate.spawner.ColocatingKubeSpawner` is
one (``handlers``' ``TYPE_CHECKING`` assignment).  :class:`LateMoveSpawner` lists what
``fail_fast.offer_late_move`` reads.  A member they need is added here first
(``tests/unit/test_seam.py`` checks that the spawner has each).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .locks import UserLocks
    from .objects import JsonDict
    from .placement import Policy
    from .refusal import Refusal
    from .state import ClusterState
    from .view import ClusterView
    from .wayout import PremiumRide


class HandlerSpawner(Protocol):
    """A spawner of nebari-colocate's, as the way out and the move use it."""

    # JupyterHub's and KubeSpawner's own
    user: Any
    user_options: Any
    orm_spawner: Any
    namespace: str
    api: Any
    k8s_api_request_retry_timeout: float
    start_timeout: float

    @property
    def active(self) -> bool: ...

    # its settings and state
    way_out_release_timeout: float
    refusal_hold_seconds: float
    premium_resources: list[str]
    #: the premium nodes the next start keeps off (the move), set on the spawner that starts
    colocation_move_off: tuple[tuple[str, str | None, str | None], ...]
    #: the node the next start is pinned to (the move of the whole set), set on the spawner
    colocation_move_to: str | None
    #: the last refusal, with what the way out re-checks
    colocation_failure: Refusal | None

    @property
    def colocation_label_value(self) -> str: ...

    @property
    def colocation_locks(self) -> UserLocks:
        """The hub's per-user locks, shared by every spawner (the way out holds the user's)."""

    # what it reads of the cluster
    def colocation_view(self) -> ClusterView: ...

    def home_pods(self, claims: list[str]) -> list[JsonDict]: ...

    def home_attached_nodes(self, claims: list[str]) -> set[str] | None: ...

    def exclusive_claims_of(self, servers: Sequence[str]) -> list[str]: ...

    def premium_rides(self) -> tuple[PremiumRide, ...]: ...

    def premium_nodes(self) -> tuple[tuple[str, str | None, str | None], ...]: ...

    def whole_set_state(self, pod: JsonDict) -> ClusterState | None:
        """Every node and the pods on them, for the move of the whole set (None: not known)."""

    def server_display_names(self) -> dict[str, str]: ...

    async def refusal_hold_ended(self) -> None:
        """Return once a refused spawn held pending (``refusal_hold_seconds``) has ended."""


class LateMoveSpawner(Protocol):
    """A spawner of nebari-colocate's, as fail fast's late refusal uses it to offer the move of
    the whole set (``fail_fast.offer_late_move``)."""

    user: Any
    log: Any

    @property
    def colocation_label_value(self) -> str: ...

    def colocation_policy(self) -> Policy: ...

    def whole_set_state(self, pod: JsonDict) -> ClusterState | None:
        """Every node and the pods on them, for the move of the whole set (None: not known)."""
