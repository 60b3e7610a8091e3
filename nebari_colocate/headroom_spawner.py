"""The headroom setting on the spawner: its traits, the user's history, and the two hooks.

:class:`HeadroomSpawner` is a base of :class:`~nebari_colocate.spawner.ColocatingKubeSpawner`
(the spawner keeps thin calls; the rule is :mod:`nebari_colocate.headroom`, pure):

- ``get_pod_manifest`` calls :meth:`HeadroomSpawner.headroom_manifest` on an unpinned
  ``colocate`` decision (the user's first server on that home): the preferred node affinity
  toward the nodes with room for the user's usual footprint, from the live view;
- ``start`` calls :meth:`HeadroomSpawner.remember_set` once the server runs: the set it runs in
  (every pod of the namespace on the same exclusive claims) is kept, per resource the largest,
  in this spawner's state.

Where the history is kept (``docs/decisions.md``, "Headroom for the first server"): in the
spawner state JupyterHub persists in its database (``get_state`` / ``load_state``; JupyterHub
saves it after every start and every stop, and ``clear_state`` keeps it, so it outlives a stop
and a hub restart).  The user's footprint is read from the states of all the user's servers
(the ORM's ``orm_spawners``) and from the spawners in memory.  Not on the home claim:
zero-to-jupyterhub's hub Role may create, read and delete claims but not patch them, and a
claim made by others (Nebari's shared home) is not the hub's to annotate.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from traitlets import Bool, Dict
from traitlets.config import LoggingConfigurable

from .config import DEFAULT_HEADROOM, DEFAULT_HEADROOM_FOOTPRINT
from .headroom import (
    STATE_KEY,
    Footprint,
    configured_footprint,
    headroom_for,
    headroom_terms,
    larger,
    set_footprint,
    stored_footprint,
    usual_footprint,
    with_headroom,
)
from .objects import JsonDict, Obj, meta
from .placement import COLOCATE, Decision


def user_history(user: Any) -> list[Footprint]:
    """The sets the user ``user`` (JupyterHub's User) has run, one per server: from the state of
    every server in the hub's database (``user.orm_user.orm_spawners``) and from the spawners in
    memory (``user.spawners``).  What cannot be read counts as nothing."""
    found: list[Footprint] = []
    orm_user = getattr(user, "orm_user", None)
    orm_spawners = getattr(orm_user, "orm_spawners", None)
    if isinstance(orm_spawners, Mapping):
        for orm_spawner in orm_spawners.values():
            state = getattr(orm_spawner, "state", None)
            if isinstance(state, Mapping):
                found.append(stored_footprint(state.get(STATE_KEY)))
    spawners = getattr(user, "spawners", None)
    if isinstance(spawners, Mapping):
        for spawner in spawners.values():
            found.append(stored_footprint(getattr(spawner, "colocation_footprint", None)))
    return [footprint for footprint in found if footprint]


class HeadroomSpawner(LoggingConfigurable):
    """The headroom traits and hooks (a base of ColocatingKubeSpawner; see the module)."""

    colocation_headroom = Bool(
        DEFAULT_HEADROOM,
        config=True,
        help="""
        Give a user's first server (no other server of the user holds the home yet) a
        *preferred* node affinity toward the nodes that can also hold the user's usual
        footprint: per resource, the larger of ``colocation_headroom_footprint`` and the
        largest set of servers the user has run before (kept in the spawner state, in the hub's
        database).  Everything a user runs later must fit the node of the first server; without
        headroom zero-to-jupyterhub's user-scheduler packs the first server onto the fullest
        node that takes it, and the user's next app may not fit there.  Preferred, never
        required: a spawn is never refused or kept waiting for it, and when no node has the
        room nothing changes.  Default: False.  The trade-off: nodes are packed less tightly
        while users are few, so an autoscaler may keep a node longer or add one sooner
        (``docs/performance.md``, "capacity", measures both).
        """,
    )

    colocation_headroom_footprint = Dict(
        dict(DEFAULT_HEADROOM_FOOTPRINT),
        config=True,
        help="""
        The room (resource -> quantity, for example ``{"cpu": "2", "memory": "8Gi"}``) a
        first server looks for at least when ``colocation_headroom`` is on; a user who has run
        a larger set before looks for that.  Default: {} (the history alone).  A premium
        resource (``premium_resources``) counts only for a server that requests it.
        """,
    )

    #: the largest set this server has run in (resource -> scheduler units), kept in the
    #: spawner state under ``colocation_footprint``
    colocation_footprint: Footprint = {}  # noqa: RUF012 - replaced, never mutated

    # ------------------------------------------------------------------------------------------
    # the spawner state

    def get_state(self) -> dict[str, Any]:
        state: dict[str, Any] = super().get_state()  # type: ignore[misc]
        if self.colocation_footprint:
            state[STATE_KEY] = dict(self.colocation_footprint)
        return state

    def load_state(self, state: dict[str, Any]) -> None:
        super().load_state(state)  # type: ignore[misc]
        self.colocation_footprint = stored_footprint((state or {}).get(STATE_KEY))

    # ------------------------------------------------------------------------------------------
    # the hooks

    def usual_footprint(self) -> Footprint:
        """The footprint rule (:func:`nebari_colocate.headroom.usual_footprint`) for this user."""
        history = [self.colocation_footprint, *user_history(getattr(self, "user", None))]
        return usual_footprint(configured_footprint(self.colocation_headroom_footprint), history)

    def headroom_manifest(self, manifest: JsonDict, decision: Decision) -> JsonDict:
        """``manifest`` with the headroom preference when it applies: the setting is on, the
        decision is an unpinned ``colocate`` (the first server on an exclusive home), the live
        view is live and may read the Nodes.  Otherwise ``manifest`` unchanged."""
        self._headroom_pod = manifest
        if not self.colocation_headroom or decision.verdict != COLOCATE or decision.node:
            return manifest
        view = self.colocation_view()  # type: ignore[attr-defined]
        nodes = view.nodes_by_name() if view.live else None
        footprint = self.usual_footprint()
        if nodes is None or not footprint:
            return manifest
        key = self.colocation_label_key  # type: ignore[attr-defined]
        mine = self.colocation_label_value  # type: ignore[attr-defined]

        def owner(pod: Obj) -> str | None:
            who = (meta(pod).get("labels") or {}).get(key)
            return None if who in (None, mine) else str(who)

        need, chosen = headroom_for(
            manifest,
            footprint,
            nodes,
            lambda name: view.by_node.get(name),
            self.premium_resources,  # type: ignore[attr-defined]
            owner=owner,
            others=configured_footprint(self.colocation_headroom_footprint),
        )
        self.log.info(
            "colocate: headroom for %s: room %s on %s",
            self.pod_name,  # type: ignore[attr-defined]
            need,
            ", ".join(chosen) or "no node (no preference: none has it, or every node has it)",
        )
        return with_headroom(manifest, headroom_terms(chosen))

    def remember_set(self) -> None:
        """Once this server runs: keep the set it runs in (its pod and every pod of the namespace
        on the same exclusive claims), per resource the largest this server has seen."""
        decision: Decision | None = getattr(self, "_colocation_decision", None)
        own: Obj | None = getattr(self, "_headroom_pod", None)
        if decision is None or decision.verdict != COLOCATE or not decision.claims or own is None:
            return
        try:
            others = self.colocation_view().claim_pods(decision.claims)  # type: ignore[attr-defined]
        except Exception:  # the history is a hint: never let it fail a started server
            self.log.exception("colocate: could not read the set of %s", self.pod_name)  # type: ignore[attr-defined]
            return
        name = meta(own).get("name")
        pods: Iterable[Obj] = [own, *(p for p in others if meta(p).get("name") != name)]
        self.colocation_footprint = larger(self.colocation_footprint, set_footprint(pods))

    _headroom_pod: JsonDict | None = None
