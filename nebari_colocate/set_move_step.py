"""The move of the whole set, taken: one click moves the user's servers that hold the home, and
the server they kept from starting, together to a node with room for all of them.

``POST {hub}/colocate/move-set/<user>/<server>`` with form fields ``restart`` (each server the
refusal's move restarts, ``""`` for the default server), ``node`` (the node chosen for the set,
``""`` for a node an autoscaler adds) and ``_xsrf``.  :func:`nebari_colocate.helm.install_way_out`
adds it beside the way out's and the move's.  See ``docs/decisions.md``, "The move of the whole
set".

The same rules as the way out (:mod:`nebari_colocate.handlers`): logged in, XSRF-checked,
JupyterHub's ``servers`` scope on every server it stops and starts (403), one way out or move per
user at a time (409 busy); under the user's lock it checks again that the refusal's move is
still the one posted, that the user's servers holding the home are those of the refusal, each
running (409 stale, nothing stopped); where the chosen node lost its room since, the next node
that holds the whole set is taken (:func:`setmove.next_target`, 409 stale if none); it
stops the set, waits for the release (no pod holds the home, no VolumeAttachment on the old
node), then starts each server again with its stored options and then the new one, each pinned
to the chosen node (``colocation_move_to``), and answers 303 to the new server's spawn-pending
page.  Any failure part way ends in words (:func:`nebari_colocate.messages.set_move_failed`),
and whatever was stopped is started again where it fits (not pinned: the check places it
beside the home, wherever that is).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from tornado import web

from . import kubeapi, messages, setmove
from .handlers import (
    BUSY,
    RELEASE_TIMEOUT,
    STALE,
    START_FAILED,
    StopServer,
    WayOutHandler,
    _options,
    _released,
    _start_detail,
    _start_failure,
    _StepFailed,
    _stop_all,
    _unless_left_behind,
    _user_lock,
)
from .history import MOVE_SET
from .objects import JsonDict, is_server, meta, owned_by, pod_server
from .refusal import WayOutBlockers
from .seam import HandlerSpawner
from .wayout import StepFacts, home_holders

#: the handler's path under the hub's base URL: user, then the server to start
SET_MOVE_PATH = r"/colocate/move-set/([^/]+)/?([^/]*)"

#: outcomes (``nebari_colocate_way_out_total{outcome}``): the set runs together on its node;
#: the node chosen had no room when the servers started there
SET_MOVED, NO_ROOM = "set-moved", "no-room"

#: seconds for the scheduler to bind the pods that hold the set's room on its node (a node
#: with the room binds them at once), and for the hub's view to see one deleted
HOLD_TIMEOUT, VIEW_TIMEOUT = 30.0, 5.0
#: moves taken again, at most, when a room held for the set was taken at the last moment
MOVE_AGAIN = 2
#: nodes tried, at most, for the set's room (the first chosen, then the next that holds it)
HOLD_ATTEMPTS = 3

StartServer = Callable[[str, dict[str, Any]], Awaitable[None]]


class SetMoveFailed(_StepFailed):
    """A move of the whole set that ended part-way, with the words of its error page."""

    what = "move of the whole set"
    text = staticmethod(messages.set_move_failed)
    page = staticmethod(messages.set_move_failed_html)


def _recheck(
    spawner: HandlerSpawner,
    restart: tuple[str, ...],
    node: str,
    is_running: Callable[[str], bool],
    words: dict[str, Any],
) -> tuple[setmove.Move, WayOutBlockers, list[JsonDict], str]:
    """The refusal's move and blockers, the whole set's pods (the servers that hold the home,
    then the new one) and the node to hold their room on (``""``: the node an autoscaler adds),
    if nothing of the user's changed since the refusal; else 409.  A chosen node that lost its
    room since is not a change of the user's: the next node that holds the set is taken."""
    failure = spawner.colocation_failure
    way_out = failure.way_out if failure is not None else None
    move = way_out.move if way_out is not None else None
    blockers = failure.blockers if failure is not None else None
    if move is None or blockers is None or move.restart != restart or (move.node or "") != node:
        raise SetMoveFailed(409, STALE, **words)
    if not restart or not all(is_running(name) for name in restart):
        raise SetMoveFailed(409, STALE, **words)
    claims = list(blockers.claims)
    pods = spawner.home_pods(claims)
    username, label = spawner.user.name, spawner.colocation_label_value
    if home_holders(pods, claims, username, label) != (blockers.servers, 0):
        raise SetMoveFailed(409, STALE, **words)
    if blockers.servers != restart:
        raise SetMoveFailed(409, STALE, **words)
    whole = [
        *(dict(p) for p in pods if is_server(p) and owned_by(p, username, label)),
        dict(move.pod or {}),
    ]
    if move.node is not None:
        # the chosen node still holds the whole set, or (another pod took its room) the next
        state = spawner.whole_set_state(whole[-1])
        if state is None or not setmove.holds_set(move.node, whole, state):
            found = setmove.next_target(
                whole,
                state,
                tried=[n for n in (blockers.node, move.node) if n],
                premium_resources=spawner.premium_resources,
                username=username,
                label_value=label,
            )
            if found is None:
                raise SetMoveFailed(409, STALE, **words)
            node = found
    return move, blockers, whole, node


async def move_whole_set(
    spawner: HandlerSpawner,
    restart: Sequence[str],
    node: str,
    *,
    spawner_of: Callable[[str], Any],
    is_running: Callable[[str], bool],
    stop_server: StopServer,
    start_server: StartServer,
    words: dict[str, Any],
) -> None:
    """The move of ``spawner``'s last refusal (:func:`_move_once`), finished another way when
    a room held for it was taken at the last moment, by a pod pending when its holder was
    deleted (kube-scheduler serves that pod first; docs/decisions.md): the set runs again, and
    the new server did not start.  Then, at once, what the person would do next, within what
    they consented to (restart the set together on a machine with room, then start the
    server): the new server is started again where it fits (``no-room``: the set was started
    again where it fits; it may fit beside it now), and if its refusal (the check's, or fail
    fast's, late) offers the move of the set as it runs now, that move is taken.  At most
    :data:`MOVE_AGAIN` more moves; else the failure stands."""
    start = str(words.get("start", ""))
    options = _options(spawner)
    for attempt in range(MOVE_AGAIN + 1):
        # (after a failed start JupyterHub may give the server a new Spawner object)
        current = spawner if attempt == 0 else spawner_of(start)
        try:
            await _move_once(
                current,
                restart,
                node,
                spawner_of=spawner_of,
                is_running=is_running,
                stop_server=stop_server,
                start_server=start_server,
                words=words,
            )
            return
        except SetMoveFailed as failed:
            if attempt == MOVE_AGAIN or not _set_runs_again(failed, is_running):
                raise
            if failed.outcome == NO_ROOM:
                try:
                    await _start_one(start, None, spawner_of, start_server, {start: options})
                    return
                except Exception:  # (refused again: its refusal may offer the move)
                    pass
            again = _move_offered(spawner_of(start))
            if again is None:
                raise
            restart, node = again.restart, again.node or ""
            words = {**words, "restart": restart}


def _set_runs_again(failed: SetMoveFailed, is_running: Callable[[str], bool]) -> bool:
    """The move ended part-way with every server it stopped running again (somewhere) and
    only the new server not started: ``start-failed`` or ``no-room`` after the stop."""
    facts = failed.facts
    if failed.outcome not in (START_FAILED, NO_ROOM) or facts is None or not facts.stopped:
        return False
    return not facts.not_started and all(is_running(name) for name in facts.stopped)


def _move_offered(spawner: HandlerSpawner) -> setmove.Move | None:
    """The move of the whole set that the new server's last refusal offers, if any."""
    refusal = spawner.colocation_failure
    way_out = refusal.way_out if refusal is not None else None
    return way_out.move if way_out is not None else None


async def _move_once(
    spawner: HandlerSpawner,
    restart: Sequence[str],
    node: str,
    *,
    spawner_of: Callable[[str], Any],
    is_running: Callable[[str], bool],
    stop_server: StopServer,
    start_server: StartServer,
    words: dict[str, Any],
) -> None:
    """The move of ``spawner``'s last refusal: under the user's lock, check that nothing
    changed and hold the set's room on the node (one pod per server, :class:`_Rooms`; 409 and
    nothing stopped if it cannot be held), stop ``restart``, wait for the release; then start
    each of ``restart`` again and then ``spawner``'s server, all on ``node`` (``""``: on the
    node an autoscaler adds for the set), each after its room is let go.  ``start_server(name,
    options)`` returns once the server runs and raises if it did not start.  SetMoveFailed
    (not yet counted) if any step ends it; whatever was stopped is started again first, where
    it fits.  ``spawner_of(name)`` is asked again for each start (JupyterHub makes a new
    Spawner object for a stopped server's next start)."""
    restart = tuple(sorted(set(restart)))
    failed: SetMoveFailed | None = None
    rooms = _Rooms(spawner)
    try:
        async with _user_lock(spawner, "whole_set_state", SetMoveFailed, words):
            move, blockers, whole, node = _recheck(spawner, restart, node, is_running, words)
            options = {name: _options(spawner_of(name)) for name in restart}
            options[move.start] = _options(spawner)
            node = await rooms.hold(whole, node, words, pinned=blockers.node)
            deadline = time.monotonic() + spawner.way_out_release_timeout
            claims = list(blockers.claims)
            try:
                await _stop_all(
                    restart, stop_server, deadline, lambda **kw: SetMoveFailed(**kw, **words)
                )
                if not await _released(
                    spawner,
                    claims,
                    restart,
                    all_holders=True,
                    node=blockers.node,
                    deadline=deadline,
                ):
                    await _unless_left_behind(
                        spawner, claims, restart, blockers.node, SetMoveFailed, words
                    )
                    raise SetMoveFailed(
                        504,
                        RELEASE_TIMEOUT,
                        **words,
                        seconds=spawner.way_out_release_timeout,
                        facts=StepFacts(stopped=restart),
                    )
            except SetMoveFailed as exc:
                failed = exc
        if failed is not None:
            # nothing moved: what was stopped starts again where it fits (beside the home)
            await rooms.let_go()
            facts = failed.facts or StepFacts()
            running, not_started, detail = await _start_each(
                facts.stopped, None, spawner_of, start_server, options
            )
            raise SetMoveFailed(
                failed.status_code,
                failed.outcome,
                **words,
                seconds=spawner.way_out_release_timeout,
                detail=detail,
                facts=dataclasses.replace(facts, running=running, not_started=not_started),
            )
        await _start_together(move, restart, node, spawner_of, start_server, options, words, rooms)
    finally:
        await rooms.let_go()


class _Rooms:
    """The room of a whole set held on its node, one pod per server
    (:func:`setmove.pinned_holder`), from before anything is stopped until each server starts
    there: another user's pod bound there in between would leave the set no room."""

    def __init__(self, spawner: HandlerSpawner) -> None:
        self.spawner = spawner
        #: server name -> the pod that holds its room, while it is held
        self.held: dict[str, str] = {}

    async def hold(
        self, whole: list[JsonDict], node: str, words: dict[str, Any], *, pinned: str | None
    ) -> str:
        """Hold the room of ``whole`` (the set's pods, the new server last) on ``node``, or
        (``""``) on the node an autoscaler adds for one pod with the whole room
        (:func:`setmove.room_holder`); the node.  Where another pod took the room since the
        refusal, the next node that holds the set now (:func:`setmove.next_target`, never
        ``pinned``, the node the set leaves), at most :data:`HOLD_ATTEMPTS` nodes in all: the
        person consented to restart the set on a machine with room, not on one machine.  409
        (nothing stopped) if no room can be held."""
        tried: list[str] = [pinned] if pinned else []
        for _ in range(HOLD_ATTEMPTS):
            if not node:
                return await self._hold_on_new_node(whole, words)
            if await self._hold_on(whole, node):
                return node
            tried.append(node)
            spawner = self.spawner
            found = setmove.next_target(
                whole,
                spawner.whole_set_state(whole[-1]),
                tried=tried,
                premium_resources=spawner.premium_resources,
                username=spawner.user.name,
                label_value=spawner.colocation_label_value,
            )
            if found is None:
                break
            node = found
        raise SetMoveFailed(409, STALE, **words, facts=StepFacts())

    async def _hold_on_new_node(self, whole: list[JsonDict], words: dict[str, Any]) -> str:
        """No node has room: one pod asks an autoscaler for a node that holds the whole set,
        then the set's holders replace it there; 409 NO_ROOM if it gets none."""
        spawner = self.spawner
        first = meta(whole[-1]).get("name") or "server"
        replacing = f"room-for-{first}"[:63]
        found = await kubeapi.hold_room(
            spawner.api,
            spawner.namespace,
            setmove.room_holder(whole, name=replacing, owner=spawner.colocation_label_value),
            timeout=spawner.start_timeout,
            keep=True,
        )
        if found is None or not await self._hold_on(whole, found, replacing=replacing):
            raise SetMoveFailed(409, NO_ROOM, **words, facts=StepFacts())
        return found

    async def _hold_on(
        self, whole: list[JsonDict], node: str, *, replacing: str | None = None
    ) -> bool:
        """One pod per server of ``whole`` pinned to ``node`` (:func:`setmove.pinned_holder`),
        all bound (then they are held), or none left (False)."""
        spawner = self.spawner
        owner = spawner.colocation_label_value
        first = meta(whole[-1]).get("name") or "server"
        names = {
            pod_server(pod): f"room-{i}-{meta(pod).get('name') or first}"[:63]
            for i, pod in enumerate(whole)
        }
        holders = [
            setmove.pinned_holder(pod, node=node, name=names[pod_server(pod)], owner=owner)
            for pod in whole
        ]
        if not await kubeapi.hold_rooms(
            spawner.api, spawner.namespace, holders, timeout=HOLD_TIMEOUT, replacing=replacing
        ):
            return False
        self.held = names
        return True

    async def let_go(self, name: str | None = None) -> None:
        """Delete the pod that holds server ``name``'s room (all of them: None), and wait until
        it is gone, from the API and from the hub's view (whose check must see the room)."""
        names = list(self.held) if name is None else [name] if name in self.held else []
        pods = [self.held.pop(n) for n in names]
        spawner = self.spawner
        await asyncio.gather(
            *(kubeapi.release_room(spawner.api, spawner.namespace, p) for p in pods)
        )
        view = spawner.colocation_view()
        deadline = time.monotonic() + VIEW_TIMEOUT
        while time.monotonic() < deadline and any(
            view.live and view.has_pod(spawner.namespace, p) for p in pods
        ):
            await asyncio.sleep(0.05)


async def _start_together(
    move: setmove.Move,
    restart: tuple[str, ...],
    node: str,
    spawner_of: Callable[[str], Any],
    start_server: StartServer,
    options: dict[str, dict[str, Any]],
    words: dict[str, Any],
    rooms: _Rooms,
) -> None:
    """Start ``restart`` on ``node``, then the new server, each once its room is let go; a
    server the node cannot take is started again where it fits, and the new one is then not
    started (NO_ROOM)."""
    running, failures, _ = await _start_each(
        restart, node or None, spawner_of, start_server, options, rooms
    )
    if failures:
        # the node has no room any more: what did not start there starts again where it fits
        await rooms.let_go()
        again, not_started, detail = await _start_each(
            failures, None, spawner_of, start_server, options
        )
        facts = StepFacts(stopped=restart, running=(*running, *again), not_started=not_started)
        raise SetMoveFailed(409, NO_ROOM, **words, detail=detail, facts=facts)
    try:
        await rooms.let_go(move.start)
        await _start_one(move.start, node or None, spawner_of, start_server, options)
    except Exception as exc:
        facts = StepFacts(stopped=restart, running=restart)
        raise SetMoveFailed(
            *_start_failure(exc), **words, detail=_start_detail(exc), facts=facts
        ) from exc


async def _start_one(
    name: str,
    node: str | None,
    spawner_of: Callable[[str], Any],
    start_server: StartServer,
    options: dict[str, dict[str, Any]],
) -> None:
    target = spawner_of(name)
    target.colocation_move_to = node
    try:
        await start_server(name, options[name])
    finally:
        target.colocation_move_to = None


async def _start_each(
    names: Sequence[str],
    node: str | None,
    spawner_of: Callable[[str], Any],
    start_server: StartServer,
    options: dict[str, dict[str, Any]],
    rooms: _Rooms | None = None,
) -> tuple[tuple[str, ...], tuple[str, ...], str]:
    """Start every one of ``names`` (on ``node``, each once ``rooms`` let its room go; or where
    it fits), whatever the others do: (those that run, those that did not start, the first
    failure's words)."""
    running: list[str] = []
    failed: list[str] = []
    detail = ""
    for name in names:
        try:
            if rooms is not None:
                await rooms.let_go(name)
            await _start_one(name, node, spawner_of, start_server, options)
        except Exception as exc:
            failed.append(name)
            detail = detail or _start_detail(exc)
        else:
            running.append(name)
    return tuple(running), tuple(failed), detail


class SetMoveHandler(WayOutHandler):
    """``POST /hub/colocate/move-set/<user>/<server>``: see the module docstring; the way
    out's handler but for its step (a click while the refused spawn is still held pending
    waits for the hold to end, as there)."""

    failure = SetMoveFailed
    kind = MOVE_SET

    @web.authenticated
    async def post(self, user_name: str, server_name: str = "") -> None:
        server_name = server_name or ""
        restart = tuple(sorted(dict.fromkeys(self.get_body_arguments("restart"))))
        self._subject = (user_name, server_name, restart)
        node = self.get_body_argument("node", "")
        user = self.find_user(user_name)
        words: dict[str, Any] = {"start": server_name, "restart": restart}
        if await self._guard(
            user,
            (*restart, server_name),
            words,
            whole=bool(restart) and server_name not in restart,
            shown=server_name,
            same=server_name,
            fresh=lambda u: server_name in u.orm_spawners,
        ):
            self.redirect(self._pending_url(user, server_name), status=303)
            return
        if user.spawners[server_name].active:  # a second tab after the first one's start
            self._count(BUSY)
            self.redirect(self._pending_url(user, server_name), status=303)
            return

        async def start_server(name: str, options: dict[str, Any]) -> None:
            await self.spawn_single_user(user, name, options=options)
            # JupyterHub answers once its slow_spawn_timeout has passed; the move goes on only
            # once the server runs (a start that fails later raises here)
            future = getattr(user.spawners[name], "_spawn_future", None)
            if future is not None:
                await asyncio.shield(future)

        await self._under_way(
            user,
            server_name,
            move_whole_set(
                user.spawners[server_name],
                restart,
                node,
                spawner_of=lambda name: user.spawners[name],
                is_running=lambda name: self._running(user, name),
                stop_server=self._stopper(user),
                start_server=start_server,
                words=words,
            ),
        )
        self._count(SET_MOVED)
        self.redirect(self._pending_url(user, server_name), status=303)
