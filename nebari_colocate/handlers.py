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
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any, ClassVar

from jupyterhub.handlers import BaseHandler
from jupyterhub.utils import url_escape_path, url_path_join
from tornado import web
from traitlets.config import Config

from . import messages, metrics
from .wayout import home_holders, home_released

#: the handler's path under the hub's base URL: user, then server ("" for the default server)
WAY_OUT_PATH = r"/colocate/way-out/([^/]+)/?([^/]*)"

STARTED, FORBIDDEN, STALE, BUSY = "started", "forbidden", "stale", "busy"
STOP_FAILED, RELEASE_TIMEOUT, START_FAILED = "stop-failed", "release-timeout", "start-failed"

#: seconds between looks at the home while waiting for its release
POLL_SECONDS = 0.5


class WayOutFailed(web.HTTPError):
    """A way out that ended before the start, with the words JupyterHub's error page shows."""

    def __init__(self, status: int, outcome: str, **words: Any) -> None:
        message = messages.way_out_failed(outcome, **words)
        super().__init__(status, "way out %s: %s", outcome, message, reason=outcome)
        self.outcome = outcome
        self.jupyterhub_message = message
        self.jupyterhub_html_message = messages.way_out_failed_html(outcome, **words)


class WayOutHandler(BaseHandler):  # type: ignore[misc]  # JupyterHub ships no types
    """``POST /hub/colocate/way-out/<user>/<server>``: see the module docstring."""

    #: user name -> the server a way out is being taken for now (one per user at a time)
    _in_flight: ClassVar[dict[str, str]] = {}

    @web.authenticated
    async def post(self, user_name: str, server_name: str = "") -> None:
        server_name = server_name or ""
        stop = tuple(dict.fromkeys(self.get_body_arguments("stop")))
        user = self.find_user(user_name)
        words: dict[str, Any] = {"start": server_name, "stop": stop}
        if user is None or not self._allowed(user, (*stop, server_name)):
            raise self._failed(403, FORBIDDEN, **words)
        words["display_names"] = self._display_names(user, server_name)
        pending_url = url_path_join(
            self.hub.base_url, "spawn-pending", user.escaped_name, url_escape_path(server_name)
        )
        if server_name in user.orm_spawners:
            await self._refusal_held(user.spawners[server_name])
        running = self._in_flight.get(user.name)
        if running is not None:
            metrics.observe_way_out(BUSY)
            if running == server_name:
                self.redirect(pending_url, status=303)
                return
            raise self._failed(409, BUSY, **words, counted=True)
        if server_name not in user.orm_spawners or server_name in stop:
            raise self._failed(409, STALE, **words)
        spawner = user.spawners[server_name]
        if spawner.active:  # a second tab after the first one's start: nothing to do
            metrics.observe_way_out(BUSY)
            self.redirect(pending_url, status=303)
            return
        self._in_flight[user.name] = server_name
        try:
            await self._stop_blockers(user, spawner, stop, words)
            await self._start(user, spawner, server_name, words)
        finally:
            self._in_flight.pop(user.name, None)
        metrics.observe_way_out(STARTED)
        self.redirect(pending_url, status=303)

    # ------------------------------------------------------------------------------------------

    @staticmethod
    async def _refusal_held(spawner: Any) -> None:
        """A click while the refused spawn is still held pending (``refusal_hold_seconds``:
        the spawn-pending page shows the button as soon as the reason arrives) waits for the
        hold to end, then takes the way out as after it."""
        future = getattr(spawner, "_spawn_future", None)
        if getattr(spawner, "_held_refusal", None) is None or future is None:
            return
        hold = float(getattr(spawner, "refusal_hold_seconds", 0) or 0)
        await asyncio.wait([asyncio.ensure_future(asyncio.shield(future))], timeout=hold + 5)
        await asyncio.sleep(0)  # JupyterHub's callbacks on the finished spawn run first

    def _failed(
        self, status: int, outcome: str, *, counted: bool = False, **words: Any
    ) -> WayOutFailed:
        if not counted:
            metrics.observe_way_out(outcome)
        return WayOutFailed(status, outcome, **words)

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

    async def _stop_blockers(
        self, user: Any, spawner: Any, stop: tuple[str, ...], words: dict[str, Any]
    ) -> None:
        """Under the user's lock: check again, stop exactly ``stop``, wait for the release."""
        locks = getattr(type(spawner), "_colocation_locks", None)
        if locks is None or not hasattr(spawner, "home_pods"):
            raise self._failed(409, STALE, **words)
        if not await locks.acquire(user.name, spawner.k8s_api_request_retry_timeout):
            raise self._failed(409, BUSY, **words)
        try:
            blockers = self._recheck(user, spawner, stop, words)
            deadline = time.monotonic() + spawner.way_out_release_timeout
            await self._stop(user, stop, deadline, words)
            await self._wait_released(spawner, stop, blockers, deadline, words)
        finally:
            locks.release(user.name)

    def _recheck(
        self, user: Any, spawner: Any, stop: tuple[str, ...], words: dict[str, Any]
    ) -> dict[str, Any]:
        """The refusal's blockers, if they are still what blocks the start; else 409."""
        failure = spawner.colocation_failure or {}
        way_out = failure.get("way_out")
        blockers = failure.get("way_out_blockers")
        if not way_out or not blockers or tuple(way_out.get("stop") or ()) != stop or not stop:
            raise self._failed(409, STALE, **words)
        for name in stop:
            if name not in user.orm_spawners:
                raise self._failed(409, STALE, **words)
            other = user.spawners[name]
            if other.pending or not other.active:
                raise self._failed(409, STALE, **words)
        now = home_holders(
            spawner.home_pods(blockers["claims"]),
            blockers["claims"],
            user.name,
            spawner.colocation_label_value,
        )
        if now != (tuple(blockers["servers"]), 0):
            raise self._failed(409, STALE, **words)
        return dict(blockers)

    async def _stop(
        self, user: Any, stop: tuple[str, ...], deadline: float, words: dict[str, Any]
    ) -> None:
        """JupyterHub's own stop of each listed server, waited for (it swallows a failed stop:
        a server still active afterwards did not stop)."""
        for name in stop:
            try:
                future = await self.stop_single_user(user, name)
                await asyncio.wait_for(
                    asyncio.shield(future), timeout=max(deadline - time.monotonic(), 0.01)
                )
            except asyncio.TimeoutError:
                raise self._failed(500, STOP_FAILED, **words, detail="it took too long") from None
            except Exception as exc:
                raise self._failed(
                    500, STOP_FAILED, **words, detail=f"{type(exc).__name__}: {exc}"
                ) from exc
            if user.spawners[name].active:
                raise self._failed(500, STOP_FAILED, **words)

    async def _wait_released(
        self,
        spawner: Any,
        stop: tuple[str, ...],
        blockers: dict[str, Any],
        deadline: float,
        words: dict[str, Any],
    ) -> None:
        claims = blockers["claims"]
        all_holders = set(stop) >= set(blockers["servers"])
        while not home_released(
            spawner.home_pods(claims),
            spawner.home_attached_nodes(claims),
            claims=claims,
            stopped=stop,
            all_holders=all_holders,
            node=blockers.get("node"),
        ):
            if time.monotonic() >= deadline:
                raise self._failed(
                    504, RELEASE_TIMEOUT, **words, seconds=spawner.way_out_release_timeout
                )
            await asyncio.sleep(POLL_SECONDS)

    async def _start(
        self, user: Any, spawner: Any, server_name: str, words: dict[str, Any]
    ) -> None:
        """The requested server, with the options it was asked with (profile, jhub-apps app)."""
        options = spawner.user_options or getattr(spawner.orm_spawner, "user_options", None) or {}
        try:
            await self.spawn_single_user(user, server_name, options=dict(options))
        except Exception as exc:
            detail = getattr(exc, "jupyterhub_message", None) or getattr(exc, "log_message", None)
            raise self._failed(
                400 if getattr(exc, "status_code", 500) < 500 else 500,
                START_FAILED,
                **words,
                detail=str(detail or f"{type(exc).__name__}: {exc}"),
            ) from exc


def install(c: Config) -> None:
    """Add the way out's handler to ``c.JupyterHub.extra_handlers`` (once)."""
    handlers = list(c.JupyterHub.get("extra_handlers") or [])
    if not any(len(h) > 1 and h[1] is WayOutHandler for h in handlers):
        handlers.append((WAY_OUT_PATH, WayOutHandler))
    c.JupyterHub.extra_handlers = handlers
