"""The refusal a spawn raises when its check refuses it: the user's words (``messages``) with the
way out's form posting to the server's way-out URL, and the hold that keeps a refused spawn
requested through the REST API pending with its reason (docs/decisions.md, "The way out";
docs/surfaces.md).  The functions take the spawner itself (KubeSpawner ships no types:
``Any``); the record is :class:`nebari_colocate.refusal.Refusal`.
"""

from __future__ import annotations

import asyncio
from typing import Any

from jupyterhub.utils import url_escape_path, url_path_join
from kubespawner.slugs import is_valid_label, safe_slug

from . import messages
from .jupyterhub import ColocationRefused, requested_through_rest_api
from .objects import JsonDict
from .placement import Decision, move_may_help, with_move
from .wayout import WayOut

__all__ = ["buttons", "hold", "move_url", "offer_move", "refused", "way_out_url"]


def offer_move(spawner: Any, decision: Decision, pod: JsonDict) -> None:
    """Add to ``decision``'s way out the move of the whole set, chosen among every node the
    live view knows (the check itself reads only the pinned node); the check's own when the
    view cannot tell the room on every node."""
    found = decision.way_out
    if found is None or not move_may_help(decision):
        return
    try:
        state = spawner.whole_set_state(pod)
        if state is not None:
            # judged again on every node: the check's own state has the pinned node alone, so
            # its move (if any) can only be "a node an autoscaler adds"
            alone = WayOut(found.stop, found.start)
            decision.way_out = with_move(pod, decision, alone, state, spawner.colocation_policy())
    except Exception:  # the refusal stands without its second way out
        spawner.log.exception("colocate: the move of the whole set could not be judged")


def refused(spawner: Any, decision: Decision, pod: JsonDict) -> ColocationRefused:
    """The exception that refuses ``spawner``'s spawn of ``pod`` on ``decision``."""
    args = {
        "username": spawner.user.name,
        "server_name": spawner.name,
        "user_label": safe_slug(spawner.user.name, is_valid=is_valid_label),
        "has_profiles": bool(spawner.profile_list),
        "display_names": spawner.server_display_names(),
    }
    button = buttons(spawner, decision.way_out, args["display_names"])
    shown = messages.user_html(decision, pod, button=button, **args)
    return ColocationRefused(
        messages.user_message(decision, pod, **args),
        shown,
        messages.operator_line(decision, username=spawner.user.name, server_name=spawner.name),
        decision=decision,
    )


def buttons(spawner: Any, way_out: WayOut | None, display_names: dict[str, str]) -> str:
    """The forms of a refusal's ways out for ``spawner``'s server, as every refusal shows them
    (the check's, and the one that ends a spawn on its pod's events): the way out's, then the
    move of the whole set's when ``way_out`` carries one; "" without a way out."""
    if way_out is None:
        return ""
    button = messages.way_out_form_html(
        way_out, action=spawner.way_out_url(), display_names=display_names
    )
    if way_out.move is not None:
        button += messages.move_form_html(
            way_out.move, action=move_url(spawner), display_names=display_names
        )
    return button


def way_out_url(spawner: Any) -> str:
    """The way out's handler for ``spawner``'s server (``nebari_colocate.handlers``), under the
    hub's base URL: where the button of a refusal with a way out posts."""
    return _handler_url(spawner, "colocate/way-out")


def move_url(spawner: Any) -> str:
    """The handler of the move of the whole set for ``spawner``'s server
    (``nebari_colocate.set_move_step``): where the refusal's second button posts."""
    return _handler_url(spawner, "colocate/move-set")


def _handler_url(spawner: Any, handler: str) -> str:
    base = getattr(getattr(spawner, "hub", None), "base_url", None) or "/hub/"
    path = url_path_join(base, handler, url_escape_path(spawner.user.name))
    return f"{path}/{url_escape_path(spawner.name or '')}"


async def hold(spawner: Any, refusal: ColocationRefused) -> None:
    """Keep a REST-requested refused spawn pending for ``refusal_hold_seconds``, with the
    reason in the progress stream, so pages that look again see how it ended."""
    spawner._remember(refusal)
    if spawner.refusal_hold_seconds <= 0 or not requested_through_rest_api(spawner):
        return
    spawner._held_refusal = refusal
    try:
        await asyncio.sleep(spawner.refusal_hold_seconds)
    finally:
        spawner._held_refusal = None
