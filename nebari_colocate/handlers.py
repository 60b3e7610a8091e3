"""The hub handler of the way out: stop what blocks a start, then start it, with one click.

``POST {hub}/colocate/way-out/<user>/<server>`` with form fields ``stop`` (the servers the
refusal's way out lists, ``""`` for the default server) and ``_xsrf``.  :func:`install` adds it to
``c.JupyterHub.extra_handlers`` (JupyterHub prefixes the path with the hub's base URL);
``nebari_colocate.helm.configure`` calls it.  See ``docs/decisions.md``, "The way out".

What it guarantees:

- authenticated (``@web.authenticated``) and XSRF-checked (JupyterHub's ``BaseHandler.prepare``
  checks every POST);
- allowed only with JupyterHub's ``servers`` scope on every server it stops and on the one it
  starts (the user's own, or an admin's where the scopes allow it); else 403, nothing done;
- under the spawner's per-user lock it checks again that the listed servers are still the
  refusal's way out and that the user's servers holding the home are the same as at the
  refusal; else 409 with words, nothing stopped;
- one way out per user at a time: a second POST while one runs answers 303 to the same
  progress page (the same server) or 409 (another), and never stops or starts twice;
- stops exactly the listed servers (JupyterHub's own stop), waits until they no longer hold the
  home and, when all holders were stopped, until the volume is detached from the old node
  (``way_out_release_timeout``), then starts the requested server with its stored options and
  answers 303 to its spawn-pending page;
- any failure part way ends in words on JupyterHub's error page, counted in
  ``nebari_colocate_way_out_total{outcome}``.

The move off a premium node, ``POST {hub}/colocate/move/<user>`` with form fields ``node`` and
``server`` (each server the home page's notice names) and ``_xsrf``, has the same guarantees: it
re-checks under the lock that exactly those servers of the user ride on that premium node with no
server of the user there that needs it (:func:`nebari_colocate.wayout.premium_rides`), stops them,
waits until the home is released from the node, and starts each again with its stored options,
kept off every premium node the hub knows (:func:`nebari_colocate.affinity.avoid_nodes`); 303 to
the home page; outcome ``moved``.  The steps after the scope checks are plain coroutines
(:func:`take_way_out`, :func:`move_off_premium`) that take the stop and the start as callables,
so tests and benchmarks run exactly them with spawners of their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from jupyterhub.handlers import BaseHandler
from jupyterhub.utils import exponential_backoff, url_escape_path, url_path_join
from tornado import web
from tornado.log import app_log
from traitlets.config import Config

from . import messages, metrics
from .config import jupyterhub_value
from .history import MOVE_OFF_PREMIUM, WAY_OUT, record_way_out
from .objects import GPU_RESOURCES
from .refusal import WayOutBlockers
from .release import HomeRelease
from .seam import HandlerSpawner
from .wayout import (
    LEFT_BEHIND,
    STILL_RUNNING,
    STOP_ERROR,
    TOO_SLOW,
    StepFacts,
    home_holders,
    home_released,
    left_behind,
)

if TYPE_CHECKING:
    from .spawner import ColocatingKubeSpawner

    #: mypy checks that the spawner is what the steps below may ask of it
    _CONFORMS: type[HandlerSpawner] = ColocatingKubeSpawner

#: the handler's path under the hub's base URL: user, then server ("" for the default server)
WAY_OUT_PATH = r"/colocate/way-out/([^/]+)/?([^/]*)"
#: the move's path under the hub's base URL: the user
MOVE_PATH = r"/colocate/move/([^/]+)/?"

STARTED, FORBIDDEN, STALE, BUSY = "started", "forbidden", "stale", "busy"
STOP_FAILED, RELEASE_TIMEOUT, START_FAILED = "stop-failed", "release-timeout", "start-failed"
MOVED = "moved"

#: stop one server of the user by name, returning once it has stopped (raise if it did not)
StopServer = Callable[[str], Awaitable[None]]

#: seconds between looks at the home while waiting for its release
POLL_SECONDS = 0.5


#: the outcomes that end a way out or a move before its start; each has its words
#: (``messages.OUTCOME_WORDS``)
FAILURES = (FORBIDDEN, STALE, BUSY, STOP_FAILED, RELEASE_TIMEOUT, START_FAILED)


class _StepFailed(web.HTTPError):
    """A way out or a move that ended part-way, with the words JupyterHub's error page shows."""

    #: what ended, for the log line
    what: ClassVar[str]
    #: the words: plain text and HTML (``messages``), called with the outcome and the words
    text: ClassVar[Callable[..., str]]
    page: ClassVar[Callable[..., str]]

    def __init__(self, status: int, outcome: str, **words: Any) -> None:
        message = self.text(outcome, **words)
        super().__init__(status, f"{self.what} %s: %s", outcome, message, reason=outcome)
        self.outcome = outcome
        #: what it did, server by server (``wayout.StepFacts``), when it stopped part-way
        self.facts = words.get("facts")
        self.jupyterhub_message = message
        self.jupyterhub_html_message = self.page(outcome, **words)


class WayOutFailed(_StepFailed):
    """A way out that ended before the start, with the words JupyterHub's error page shows."""

    what = "way out"
    text = staticmethod(messages.way_out_failed)
    page = staticmethod(messages.way_out_failed_html)


class MoveFailed(_StepFailed):
    """A move off a premium node that ended part-way, with the words of its error page."""

    what = "move"
    text = staticmethod(messages.move_failed)
    page = staticmethod(messages.move_failed_html)


# ----------------------------------------------------------------------------------------------
# the steps, as plain coroutines (the handlers call them; so do the cluster tests and benchmarks)


async def take_way_out(
    spawner: HandlerSpawner,
    stop: Sequence[str],
    *,
    is_running: Callable[[str], bool],
    stop_server: StopServer,
    start_server: Callable[[dict[str, Any]], Awaitable[None]],
    words: dict[str, Any],
) -> None:
    """The way out of ``spawner``'s last refusal: under the user's lock, check that ``stop`` is
    still its way out and what holds the home is unchanged, stop exactly ``stop``, wait for the
    release; then start ``spawner``'s server with its stored options.  WayOutFailed (not yet
    counted) if any step ends it."""
    stop = tuple(stop)
    async with _user_lock(spawner, "home_pods", WayOutFailed, words):
        blockers = _recheck(spawner, stop, is_running, words)
        deadline = time.monotonic() + spawner.way_out_release_timeout
        await _stop_all(stop, stop_server, deadline, lambda **kw: WayOutFailed(**kw, **words))
        claims = list(blockers.claims)
        if not await _released(
            spawner,
            claims,
            stop,
            all_holders=set(stop) >= set(blockers.servers),
            node=blockers.node,
            deadline=deadline,
        ):
            await _unless_left_behind(spawner, claims, stop, blockers.node, WayOutFailed, words)
            raise WayOutFailed(
                504, RELEASE_TIMEOUT, **words, seconds=spawner.way_out_release_timeout
            )
    try:
        await start_server(_options(spawner))
    except Exception as exc:
        raise WayOutFailed(*_start_failure(exc), **words, detail=_start_detail(exc)) from exc


async def move_off_premium(
    spawner: HandlerSpawner,
    node: str,
    servers: Sequence[str],
    *,
    spawner_of: Callable[[str], Any],
    stop_server: StopServer,
    start_server: Callable[[str, dict[str, Any]], Awaitable[None]],
    words: dict[str, Any],
) -> None:
    """Move ``servers`` (the user's, riding on premium node ``node``) off it: under the user's
    lock, check that they are still exactly the ride (:meth:`premium_rides`), stop them, wait
    until the home is released from ``node``; then start each again with the options it had,
    kept off every premium node (``colocation_move_off`` of the spawner that starts it).
    MoveFailed (not yet counted) if any step ends it.

    ``spawner_of(name)`` is asked again for the start: JupyterHub drops a stopped server's
    Spawner object (``User.stop``) and makes a new one for its next start."""
    servers = tuple(sorted(set(servers)))
    async with _user_lock(spawner, "premium_rides", MoveFailed, words):
        ride = next((r for r in spawner.premium_rides() if r.node == node), None)
        if ride is None or ride.servers != servers:
            raise MoveFailed(409, STALE, **words)
        options = {name: _options(spawner_of(name)) for name in servers}
        claims = spawner.exclusive_claims_of(servers)
        avoid = spawner.premium_nodes()
        deadline = time.monotonic() + spawner.way_out_release_timeout
        await _stop_all(servers, stop_server, deadline, lambda **kw: MoveFailed(**kw, **words))
        if not await _released(
            spawner, claims, servers, all_holders=True, node=node, deadline=deadline
        ):
            await _unless_left_behind(spawner, claims, servers, node, MoveFailed, words)
            raise MoveFailed(504, RELEASE_TIMEOUT, **words, seconds=spawner.way_out_release_timeout)
    # every one is started, whatever the others do: a server stopped for the move and left
    # stopped is the worse outcome
    running: list[str] = []
    failures: dict[str, Exception] = {}
    for name in servers:
        target = spawner_of(name)
        target.colocation_move_off = avoid
        try:
            await start_server(name, options[name])
        except Exception as exc:
            target.colocation_move_off = ()
            failures[name] = exc
        else:
            running.append(name)
    if failures:
        first = next(iter(failures.values()))
        facts = StepFacts(stopped=servers, running=tuple(running), not_started=tuple(failures))
        failed = MoveFailed(
            *_start_failure(first), **words, detail=_start_detail(first), facts=facts
        )
        raise failed from first


@contextlib.asynccontextmanager
async def _user_lock(
    spawner: HandlerSpawner, needs: str, failure: type[_StepFailed], words: dict[str, Any]
) -> AsyncIterator[None]:
    """Hold the user's per-user lock (the spawner's) for the steps under it: 409 stale when
    ``spawner`` is not one of ours (no lock table, or no method ``needs``), 409 busy when the
    lock is not had within ``k8s_api_request_retry_timeout``."""
    locks = getattr(spawner, "colocation_locks", None)  # None: not a spawner of ours
    if locks is None or not hasattr(spawner, needs):
        raise failure(409, STALE, **words)
    username = spawner.user.name
    if not await locks.acquire(username, spawner.k8s_api_request_retry_timeout):
        raise failure(409, BUSY, **words)
    try:
        yield
    finally:
        locks.release(username)


def _recheck(
    spawner: HandlerSpawner,
    stop: tuple[str, ...],
    is_running: Callable[[str], bool],
    words: dict[str, Any],
) -> WayOutBlockers:
    """The refusal's blockers, if they are still what blocks the start; else 409."""
    failure = spawner.colocation_failure
    way_out = failure.way_out if failure is not None else None
    blockers = failure.blockers if failure is not None else None
    if way_out is None or blockers is None or tuple(way_out.stop) != stop or not stop:
        raise WayOutFailed(409, STALE, **words)
    if not all(is_running(name) for name in stop):
        raise WayOutFailed(409, STALE, **words)
    claims = list(blockers.claims)
    now = home_holders(
        spawner.home_pods(claims), claims, spawner.user.name, spawner.colocation_label_value
    )
    if now != (blockers.servers, 0):
        raise WayOutFailed(409, STALE, **words)
    return blockers


class StillRunning(Exception):
    """JupyterHub's stop of a server ended and the server is still running."""


async def _stop_all(
    names: Sequence[str], stop_server: StopServer, deadline: float, failed: Callable[..., Exception]
) -> None:
    """Stop ``names`` in order; at the first that does not stop, ``failed`` with the facts
    (which stopped, which did not, why).  An error's own words go to the hub log only."""
    done: list[str] = []
    for index, name in enumerate(names):
        why = ""
        try:
            await asyncio.wait_for(
                stop_server(name), timeout=max(deadline - time.monotonic(), 0.01)
            )
        except asyncio.TimeoutError:
            why = TOO_SLOW
        except StillRunning:
            why = STILL_RUNNING
        except web.HTTPError:
            raise
        except Exception:
            app_log.exception("colocate: stopping server %r for a way out or a move failed", name)
            why = STOP_ERROR
        if why:
            facts = StepFacts(stopped=tuple(done), not_stopped=tuple(names[index:]), why=why)
            raise failed(status=500, outcome=STOP_FAILED, facts=facts)
        done.append(name)


async def _released(
    spawner: HandlerSpawner,
    claims: list[str],
    stopped: Sequence[str],
    *,
    all_holders: bool,
    node: str | None,
    deadline: float,
) -> bool:
    """Wait until the stop of ``stopped`` has released ``claims`` (:func:`home_released`);
    False at ``deadline``.  JupyterHub's ``exponential_backoff`` (the same in 5.5 and 6.x),
    without deadline jitter and at most ``POLL_SECONDS`` between looks: the view is cheap to
    read and a start waits on it.  While the view is not fresh (a watch silent on a dead flow)
    each look reads the home's pods and attachments by name (:class:`HomeRelease`)."""
    home = HomeRelease(spawner, claims, node)

    async def released() -> bool:
        pods, attached = await home.look()
        return home_released(
            pods,
            attached,
            claims=claims,
            stopped=stopped,
            all_holders=all_holders,
            node=node,
        )

    try:
        await exponential_backoff(
            released,
            "the home was not released",
            start_wait=POLL_SECONDS,
            max_wait=POLL_SECONDS,
            timeout=deadline - time.monotonic(),
            timeout_tolerance=0,
        )
    except asyncio.TimeoutError:
        return False
    return True


async def _unless_left_behind(
    spawner: HandlerSpawner,
    claims: list[str],
    stopped: Sequence[str],
    node: str | None,
    failure: type[_StepFailed],
    words: dict[str, Any],
) -> None:
    """After a release that did not come: the stopped servers whose pods still hold the home
    did not stop, whatever JupyterHub says (its ``User.stop`` forgets a server whose stop
    failed, and ``stop_single_user`` swallows the error): ``failure`` stop-failed with those
    facts.  Nothing when none is left (the attachment alone is late: release-timeout)."""
    try:
        pods, _ = await HomeRelease(spawner, claims, node).look()
    except Exception:  # (HomeRelease.look logs its own read errors and answers the view's)
        return
    still = left_behind(pods, claims, stopped)
    if still:
        done = tuple(name for name in stopped if name not in still)
        facts = StepFacts(stopped=done, not_stopped=still, why=LEFT_BEHIND)
        raise failure(500, STOP_FAILED, **words, facts=facts)


def _options(spawner: HandlerSpawner) -> dict[str, Any]:
    """The options a server was started with (profile, jhub-apps app options)."""
    stored = spawner.user_options or getattr(spawner.orm_spawner, "user_options", None) or {}
    return dict(stored)


def _start_failure(exc: Exception) -> tuple[int, str]:
    return (400 if getattr(exc, "status_code", 500) < 500 else 500), START_FAILED


def _start_detail(exc: BaseException) -> str:
    """What a failed start says to a person: its refusal's words (``jupyterhub_message``), or
    an HTTPError's message as JupyterHub's error page shows it; never a Python exception (that
    goes to the hub log)."""
    detail = getattr(exc, "jupyterhub_message", None)
    if not detail and isinstance(exc, web.HTTPError) and exc.log_message:
        with contextlib.suppress(TypeError, ValueError):
            detail = exc.log_message % exc.args if exc.args else exc.log_message
    if not detail:
        app_log.error("colocate: a start after a way out or a move failed", exc_info=exc)
    return str(detail or "")


# ----------------------------------------------------------------------------------------------
# the handlers


class _ColocateHandler(BaseHandler):  # type: ignore[misc]  # JupyterHub ships no types
    """What the way out and the move share: the checks before a step (:meth:`_guard`), one
    step per user at a time (:meth:`_under_way`), scopes, display names, JupyterHub's stop."""

    #: user name -> the server a way out is being taken for now, or MOVED for a move (one per
    #: user at a time)
    _in_flight: ClassVar[dict[str, str]] = {}

    #: what this handler raises when it ends part-way
    failure: ClassVar[type[_StepFailed]]
    #: what it takes, as the history records it (``history.WAY_OUT_KINDS``)
    kind: ClassVar[str]
    #: the request's user, server started ("" the default) and servers stopped or moved
    _subject: tuple[str, str, tuple[str, ...]] = ("", "", ())

    def _count(self, outcome: str) -> None:
        """Count ``outcome`` (``nebari_colocate_way_out_total``) and record it for the
        operator's page (:mod:`nebari_colocate.history`)."""
        metrics.observe_way_out(outcome)
        user, server, servers = self._subject
        record_way_out(user, self.kind, outcome, server=server, servers=servers)

    async def _guard(
        self,
        user: Any,
        servers: Sequence[str],
        words: dict[str, Any],
        *,
        shown: str,
        fresh: Callable[[Any], bool],
        whole: bool = True,
        same: str | None = None,
    ) -> bool:
        """The checks before a way out or a move, in this order, each answered with the
        outcome it names and counted: 403 forbidden unless ``user`` exists, the request is
        ``whole`` and JupyterHub's scopes cover ``servers``; then ``words`` gain the display
        names of server ``shown``, and :meth:`_settle` runs; 409 busy while another way out or
        move of the user's is under way (True instead, busy counted, when that one is for
        server ``same``: the caller answers with its page); 409 stale unless ``fresh(user)``."""
        if user is None or not whole or not self._allowed(user, servers):
            raise self._failed(403, FORBIDDEN, **words)
        words["display_names"] = self._display_names(user, shown)
        await self._settle(user, shown)
        running = self._in_flight.get(user.name)
        if running is not None:
            self._count(BUSY)
            if same is not None and running == same:
                return True
            raise self._failed(409, BUSY, **words, counted=True)
        if not fresh(user):
            raise self._failed(409, STALE, **words)
        return False

    async def _settle(self, user: Any, server_name: str) -> None:
        """What to wait for before the busy check (nothing, unless a handler says)."""

    async def _under_way(self, user: Any, marker: str, step: Awaitable[None]) -> None:
        """Run ``step`` as the user's one way out or move (``marker``: the server it starts,
        or MOVED), counting the outcome it fails with."""
        self._in_flight[user.name] = marker
        try:
            await step
        except self.failure as failed:
            self._count(failed.outcome)
            raise
        finally:
            self._in_flight.pop(user.name, None)

    def _failed(
        self, status: int, outcome: str, *, counted: bool = False, **words: Any
    ) -> _StepFailed:
        if not counted:
            self._count(outcome)
        return self.failure(status, outcome, **words)

    def _allowed(self, user: Any, servers: Sequence[str]) -> bool:
        """JupyterHub's ``servers`` scope (what its REST API needs to start and stop a server)
        covers every server of ``servers``: a server that exists is judged as a server
        (``servers!server=u/s``), one that does not as the user's (``servers!user=u``)."""
        allowed = self.get_scope_filter("servers")
        for name in dict.fromkeys(servers):
            orm_spawner = user.orm_spawners.get(name)
            if orm_spawner is not None:
                if not allowed(orm_spawner, kind="server"):
                    return False
            elif not allowed(user.orm_user, kind="user"):
                return False
        return True

    @staticmethod
    def _display_names(user: Any, server_name: str) -> dict[str, str]:
        if server_name in user.orm_spawners:
            spawner = user.spawners[server_name]
            names = getattr(spawner, "server_display_names", None)
            if callable(names):
                return dict(names())
        return {}

    @staticmethod
    def _running(user: Any, name: str) -> bool:
        if name not in user.orm_spawners:
            return False
        other = user.spawners[name]
        return bool(other.active and not other.pending)

    def _stopper(self, user: Any) -> StopServer:
        async def stop_server(name: str) -> None:
            """JupyterHub's own stop, waited for (it swallows a failed stop: a server still
            active afterwards did not stop)."""
            future = await self.stop_single_user(user, name)
            await asyncio.shield(future)
            if user.spawners[name].active:
                raise StillRunning(name)

        return stop_server


class WayOutHandler(_ColocateHandler):
    """``POST /hub/colocate/way-out/<user>/<server>``: see the module docstring."""

    failure: ClassVar[type[_StepFailed]] = WayOutFailed
    kind = WAY_OUT

    @web.authenticated
    async def post(self, user_name: str, server_name: str = "") -> None:
        server_name = server_name or ""
        stop = tuple(dict.fromkeys(self.get_body_arguments("stop")))
        self._subject = (user_name, server_name, stop)
        user = self.find_user(user_name)
        words: dict[str, Any] = {"start": server_name, "stop": stop}
        if await self._guard(
            user,
            (*stop, server_name),
            words,
            shown=server_name,
            same=server_name,
            fresh=lambda u: server_name in u.orm_spawners and server_name not in stop,
        ):
            self.redirect(self._pending_url(user, server_name), status=303)
            return
        spawner = user.spawners[server_name]
        if spawner.active:  # a second tab after the first one's start: nothing to do
            self._count(BUSY)
            self.redirect(self._pending_url(user, server_name), status=303)
            return

        async def start_server(options: dict[str, Any]) -> None:
            await self.spawn_single_user(user, server_name, options=options)

        await self._under_way(
            user,
            server_name,
            take_way_out(
                spawner,
                stop,
                is_running=lambda name: self._running(user, name),
                stop_server=self._stopper(user),
                start_server=start_server,
                words=words,
            ),
        )
        self._count(STARTED)
        self.redirect(self._pending_url(user, server_name), status=303)

    # ------------------------------------------------------------------------------------------

    def _pending_url(self, user: Any, server_name: str) -> str:
        return str(
            url_path_join(
                self.hub.base_url, "spawn-pending", user.escaped_name, url_escape_path(server_name)
            )
        )

    async def _settle(self, user: Any, server_name: str) -> None:
        if server_name in user.orm_spawners:
            await self._refusal_held(user.spawners[server_name])

    @staticmethod
    async def _refusal_held(spawner: Any) -> None:
        """A click while the refused spawn is still held pending waits for the hold to end
        (:meth:`HandlerSpawner.refusal_hold_ended`), then takes the way out as after it."""
        ended = getattr(spawner, "refusal_hold_ended", None)  # None: not a spawner of ours
        if ended is not None:
            await ended()


class MoveHandler(_ColocateHandler):
    """``POST /hub/colocate/move/<user>``: see the module docstring."""

    failure = MoveFailed
    kind = MOVE_OFF_PREMIUM

    @web.authenticated
    async def post(self, user_name: str) -> None:
        servers = tuple(sorted(dict.fromkeys(self.get_body_arguments("server"))))
        self._subject = (user_name, "", servers)
        node = self.get_body_argument("node", "")
        user = self.find_user(user_name)
        words: dict[str, Any] = {"servers": servers}
        await self._guard(
            user,
            servers,
            words,
            whole=bool(servers and node),
            shown=servers[0] if servers else "",
            fresh=lambda u: all(self._running(u, name) for name in servers),
        )

        async def start_server(name: str, options: dict[str, Any]) -> None:
            await self.spawn_single_user(user, name, options=options)

        await self._under_way(
            user,
            MOVED,
            move_off_premium(
                user.spawners[servers[0]],
                node,
                servers,
                spawner_of=lambda name: user.spawners[name],
                stop_server=self._stopper(user),
                start_server=start_server,
                words=words,
            ),
        )
        self._count(MOVED)
        self.redirect(url_path_join(self.hub.base_url, "home"), status=303)


# ----------------------------------------------------------------------------------------------
# the home page's notice (JupyterHub's template variable ``announcement_home``)


class HomeNotice:
    """``c.JupyterHub.template_vars["announcement_home"]``: JupyterHub calls it with the
    current user for every page it renders (``BaseHandler.template_namespace``; JupyterHub 5.5
    and 6.1 call a callable value with the user, synchronously), and its home page shows a
    string ``announcement_home`` in place of ``announcement``.

    It returns the move's notice for each premium node the user's servers keep running alone
    (:meth:`premium_rides`, from the live view: no API request), followed by what the operator
    had set (``announcement_home``, else ``announcement``, a string or a callable of the
    user); with no notice, the operator's ``announcement_home`` as it was (None if unset, so
    that JupyterHub's home falls back to ``announcement``).
    """

    def __init__(self, previous_home: Any = None, previous: Any = None) -> None:
        self.previous_home = previous_home
        self.previous = previous

    @staticmethod
    def _value(value: Any, user: Any) -> Any:
        return value(user) if callable(value) else value

    def __call__(self, user: Any) -> str | None:
        home = self._value(self.previous_home, user)
        try:
            notice = self.notice(user)
        except Exception:  # the home page must render whatever happens here
            app_log.exception("colocate: the home page's notice of %s failed", user)
            notice = ""
        if not notice:
            return home if isinstance(home, str) else None
        earlier = home if isinstance(home, str) else self._value(self.previous, user)
        if isinstance(earlier, str) and earlier:
            return f"{notice}<div>{earlier}</div>"
        return notice

    @staticmethod
    def notice(user: Any) -> str:
        """The move's notices of ``user`` (escaped HTML), or ""."""
        if user is None or getattr(user, "kind", "user") != "user":
            return ""
        spawner = user.spawner
        rides = getattr(spawner, "premium_rides", None)
        if not callable(rides):
            return ""
        found = rides()
        if not found:
            return ""
        names = spawner.server_display_names()
        premium = set(spawner.premium_resources)
        kind = "GPU" if premium and premium <= set(GPU_RESOURCES) else "premium"
        action = url_path_join(user.settings["hub"].base_url, "colocate", "move", user.escaped_name)
        return "".join(
            f'<div class="colocate-premium-ride">'
            f"{messages.premium_ride_html(r.servers, r.node, action, names, kind=kind)}</div>"
            for r in found
        )


def install_notice(c: Config) -> bool:
    """Put :class:`HomeNotice` in ``c.JupyterHub.template_vars["announcement_home"]``, keeping
    what the operator set there (a dict, or ``template_vars.update(...)``); once.  False, and
    nothing changed, when ``template_vars`` is neither (JupyterHub takes only a dict)."""
    current = jupyterhub_value(c, "template_vars")
    if current is None:
        current = {}
    if not isinstance(current, Mapping):
        return False
    values = dict(current)
    home = values.get("announcement_home")
    if not isinstance(home, HomeNotice):
        values["announcement_home"] = HomeNotice(home, values.get("announcement"))
    c.JupyterHub.template_vars = values
    return True


def install(c: Config, more: Sequence[tuple[str, type[BaseHandler]]] = ()) -> None:
    """Add the way out's and the move's handlers, then ``more`` (the move of the whole set's,
    from ``helm``), to ``c.JupyterHub.extra_handlers`` (once), after the operator's (a list, or
    ``extra_handlers.extend(...)`` as Nebari's theme does)."""
    handlers = list(jupyterhub_value(c, "extra_handlers") or [])
    for path, handler in ((WAY_OUT_PATH, WayOutHandler), (MOVE_PATH, MoveHandler), *more):
        if not any(len(h) > 1 and h[1] is handler for h in handlers):
            handlers.append((path, handler))
    c.JupyterHub.extra_handlers = handlers
    install_notice(c)
