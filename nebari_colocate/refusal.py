"""A refusal as one record every surface renders.  (pure)

The check's refusal and a spawn ended by a hopeless pod event are both a :class:`Refusal`: the
user's words as text and as HTML (``messages``), the hub log's line, the decision or the event
verdict behind them, and, once the spawner kept it, what the way out re-checks before it stops
anything (:class:`WayOutBlockers`).  JupyterHub's exception
(:class:`nebari_colocate.jupyterhub.ColocationRefused`) carries it; the spawner keeps the last
one as ``colocation_failure``, which the way out's handler (``handlers``) and the jhub-apps home
page (``templates/jhub_apps/home.html``: ``colocation_failure.html``) read by attribute.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from .objects import JsonDict, pod_server

if TYPE_CHECKING:
    from .events import EventVerdict
    from .placement import Decision
    from .wayout import WayOut


@dataclass(frozen=True)
class WayOutBlockers:
    """What held the home when the server was refused: the way out stops nothing unless it
    still does (``docs/decisions.md``, "The way out")."""

    claims: tuple[str, ...]  # the exclusive claims of the refused server
    node: str | None  # where the volume was held (None: not known)
    servers: tuple[str, ...]  # the user's own servers holding it ("" the default server)


@dataclass(frozen=True)
class Refusal:
    """One refusal: what the user reads (``message``, and ``html``, escaped, with the way out's
    form), the hub log's line, and the facts behind them (``decision`` for the check's refusal,
    ``event_verdict`` for a spawn ended by pod events)."""

    message: str
    html: str
    operator_line: str
    decision: Decision | None = None
    event_verdict: EventVerdict | None = None
    #: set once the spawner kept the refusal and the way out can be re-checked; else None
    blockers: WayOutBlockers | None = None

    @property
    def way_out(self) -> WayOut | None:
        """The decision's (or the event verdict's) way out: the user's own servers to stop,
        then the server to start; None when there is none."""
        found = self.decision.way_out if self.decision is not None else None
        if found is None and self.event_verdict is not None:
            found = self.event_verdict.way_out
        return found

    def still_holds(self, running: Collection[str]) -> bool:
        """Whether what this refusal says may still be so, given the user's servers running now
        (``""`` the default server): one with a way out no longer holds once every server the
        way out stops has stopped (the way out's own test of a stale refusal); one without a way
        out holds until the server is started again."""
        found = self.way_out
        if found is None or not found.stop:
            return True
        return any(name in running for name in found.stop)

    def way_out_stop(self) -> list[str]:
        """The servers the way out stops (``""`` the default server), or [] without one."""
        found = self.way_out
        return list(found.stop) if found is not None else []

    def way_out_json(self) -> JsonDict | None:
        """:attr:`way_out` as ``WayOut.as_json()`` (the progress stream's refusal event and
        ``simulate --json`` carry it), or None."""
        found = self.way_out
        return found.as_json() if found is not None else None


def kept(
    refusal: Refusal, placed: Decision | None, home_pods: Callable[[list[str]], list[JsonDict]]
) -> Refusal:
    """``refusal`` as the spawner keeps it, with its :class:`WayOutBlockers` when it has a way
    out: the decision's claims, node and holders; for a spawn ended by its pod's events
    (``placed``: the decision it started on), the servers the way out stops and the node their
    pods (``home_pods(claims)``) hold the volume on now."""
    way_out, decision = refusal.way_out, refusal.decision
    blockers = None
    if way_out is not None and decision is not None:
        blockers = WayOutBlockers(
            claims=tuple(sorted(decision.claims)),
            node=decision.node,
            servers=tuple(sorted(pod_server(p) for p in decision.holder_pods)),
        )
    if way_out is not None and placed is not None:
        # A spawn ended by its pod's events: the holders are those servers, wherever the
        # volume is attached now (the node of their pods).
        claims = sorted(placed.claims)
        nodes = {
            ((p.get("spec") or {}).get("nodeName") or "")
            for p in home_pods(claims)
            if pod_server(p) in set(way_out.stop)
        }
        nodes.discard("")
        blockers = WayOutBlockers(
            claims=tuple(claims),
            node=nodes.pop() if len(nodes) == 1 else placed.node,
            servers=tuple(way_out.stop),
        )
    return replace(refusal, blockers=blockers)
