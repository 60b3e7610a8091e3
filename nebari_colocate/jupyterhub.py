"""What differs between JupyterHub 5 and 6: the refusal exception, failure accounting and
display names.

See ``docs/jupyterhub-versions.md``.

- The refusal is a ``SpawnException`` (status 400) on JupyterHub 6 and a 400 ``HTTPError`` carrying
  ``jupyterhub_message`` / ``jupyterhub_html_message`` on JupyterHub 5; the user reads the same
  words on both.  On JupyterHub 6 its ``reason`` is the refusal's family
  (:mod:`nebari_colocate.refusal_families`, ``colocate-volume-pinned``...): JupyterHub 6 counts a
  ``SpawnException`` in ``jupyterhub_server_spawn_duration_seconds`` as ``status="failure"`` with
  that ``reason``, apart from ``status="error"`` (a spawn that broke).  JupyterHub 5 has no
  ``reason`` label: every failed spawn is ``status="failure"``, so the library counts the
  refusals it raises itself (``nebari_colocate_refusals_total``, :func:`before_raising`) for an
  alert to subtract (``examples/prometheus-alerts.yaml``).
- ``consecutive_failure_limit``: JupyterHub 6 does not count a ``SpawnException`` or a 4xx
  ``HTTPError``. JupyterHub 5 counts every failed spawn in ``BaseHandler.spawn_single_user``: a
  done-callback on the spawn future adds one to the request handler's
  ``settings["failure_count"]`` (the tornado Application's settings, a copy of the hub's
  ``tornado_settings``, reached as ``spawner.handler.settings`` while the spawn runs; not
  ``user.settings``) and stops the hub at the limit.
  :func:`uncount_refusal` takes one off just before a refusal is raised, so the callback brings the
  count back to where it was: refusals are not counted, real failures still are.
- Display names: JupyterHub 6 has ``Spawner.display_name``; on JupyterHub 5 jhub-apps keeps the
  app's name in ``user_options["display_name"]`` (:func:`display_name` reads either).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import jupyterhub
from tornado import web

from . import metrics
from .refusal import Refusal
from .refusal_families import family_of

if TYPE_CHECKING:
    from .events import EventVerdict
    from .placement import Decision

JUPYTERHUB_MAJOR = int(jupyterhub.__version__.split(".")[0])
#: JupyterHub itself leaves refusals (4xx, SpawnException) out of consecutive_failure_limit
COUNTS_ONLY_SERVER_ERRORS = JUPYTERHUB_MAJOR >= 6

try:  # JupyterHub >= 6
    from jupyterhub.spawner import SpawnException as _SpawnException
except ImportError:  # JupyterHub 5
    _SpawnException = None


#: the refusal's base: what JupyterHub shows a 400 with words from
_RefusalBase: Any = _SpawnException if _SpawnException is not None else web.HTTPError


class ColocationRefused(_RefusalBase):  # type: ignore[misc]  # JupyterHub ships no types
    """A spawn refused by the co-location check or ended by a hopeless pod event.

    JupyterHub 6: a SpawnException with status 400, which does not count toward
    ``consecutive_failure_limit``.  JupyterHub 5: a 400 HTTPError carrying ``jupyterhub_message``
    / ``jupyterhub_html_message``; its REST API answers with ``log_message % args`` and ignores
    ``jupyterhub_message``, so the HTTPError's own message is the user text (it never names
    another user's pods).  ``refusal`` is the one record of it every surface renders
    (:class:`nebari_colocate.refusal.Refusal`); ``operator_line``, ``decision``,
    ``event_verdict`` and ``way_out`` (as JSON, ``docs/decisions.md``, "The way out") are read
    from it.
    """

    def __init__(
        self,
        message: str,
        html: str,
        log_message: str,
        *,
        decision: Decision | None = None,
        event_verdict: EventVerdict | None = None,
    ) -> None:
        #: the refusal's family (``colocate-volume-pinned``...): JupyterHub 6's ``reason``
        self.family = refusal_family(decision, event_verdict)
        if _SpawnException is not None:
            super().__init__(
                message, reason=self.family, log_message=log_message, message_html=html
            )
        else:  # pragma: no cover - exercised on JupyterHub 5
            super().__init__(400, "%s", message, reason="colocation")
            self.message = message
            self.message_html = html
        self.refusal = Refusal(
            message, html, log_message, decision=decision, event_verdict=event_verdict
        )
        self.operator_line = log_message
        self.decision = decision
        self.event_verdict = event_verdict
        #: the way out (``WayOut.as_json()``: the user's own servers to stop, then the server to
        #: start), or None; the progress stream's refusal event carries it for other front ends
        self.way_out = self.refusal.way_out_json()
        self.jupyterhub_message = message
        self.jupyterhub_html_message = html

    def __str__(self) -> str:
        if _SpawnException is not None:
            return str(super().__str__())
        return f"400 ColocationRefused: {self.operator_line}"  # pragma: no cover - JupyterHub 5


def refusal_family(decision: Decision | None, event_verdict: EventVerdict | None) -> str:
    """The family of a refusal on ``decision`` (its reasons) or ``event_verdict`` (its code)."""
    if decision is not None:
        return family_of(decision.reasons)
    return family_of([event_verdict.code] if event_verdict is not None else [])


def tracked_by_jupyterhub(spawner: Any) -> bool:
    """Whether JupyterHub counts how this spawn ends (its failure metric, its failure count):
    the spawn was started by ``spawn_single_user``, which sets ``spawner._spawn_future`` and
    hooks its callback to it before the spawn's first step runs, and it has not ended."""
    future = getattr(spawner, "_spawn_future", None)
    return future is not None and not future.done()


def before_raising(spawner: Any, refusal: ColocationRefused) -> None:
    """Right before ``refusal`` is raised from inside ``spawner``'s spawn: count it in
    ``nebari_colocate_refusals_total`` by family when JupyterHub counts the spawn's end too
    (:func:`tracked_by_jupyterhub`: the two counters then count the same spawns), and keep it
    out of JupyterHub 5's ``consecutive_failure_limit`` (:func:`uncount_refusal`)."""
    if tracked_by_jupyterhub(spawner):
        metrics.observe_refusal(refusal.family)
    uncount_refusal(spawner)


def uncount_refusal(spawner: Any) -> bool:
    """On JupyterHub 5, keep the refusal about to be raised out of ``consecutive_failure_limit``.

    Call it right before raising the refusal from inside the spawn.  It acts only when
    JupyterHub 5's failure callback will run for this spawn: the spawn was started by
    ``spawn_single_user`` (which sets ``spawner._spawn_future`` and hooks the callback to it
    before the spawn's first step runs) and that future is not done.  Returns whether it acted.
    """
    if COUNTS_ONLY_SERVER_ERRORS or not tracked_by_jupyterhub(spawner):
        return False
    handler = getattr(spawner, "handler", None)
    settings = getattr(handler, "settings", None)
    if not isinstance(settings, dict):
        return False
    # The callback does setdefault(0) then += 1: from k - 1 back to k, below the limit.
    settings["failure_count"] = settings.get("failure_count", 0) - 1
    return True


def display_name(spawner: Any) -> str:
    """A spawner's (or stored spawner's) display name: ``display_name`` (JupyterHub 6), else
    ``user_options["display_name"]`` (jhub-apps on JupyterHub 5); "" when neither is a string."""
    shown = getattr(spawner, "display_name", None)
    if not isinstance(shown, str) or not shown.strip():
        options = getattr(spawner, "user_options", None)
        shown = options.get("display_name") if isinstance(options, dict) else None
    return shown.strip() if isinstance(shown, str) else ""


def requested_through_rest_api(spawner: Any) -> bool:
    """Whether the spawn was requested through JupyterHub's REST API (not its spawn form)."""
    try:
        from jupyterhub.apihandlers.base import APIHandler
    except ImportError:  # pragma: no cover
        return False
    return isinstance(getattr(spawner, "handler", None), APIHandler)


def server_display_names(spawner: Any) -> dict[str, str]:
    """Server name -> the name this user knows it by, for ``spawner``'s user's own servers only.

    JupyterHub 6 has ``Spawner.display_name``; on JupyterHub 5 jhub-apps keeps the app's name
    in ``user_options["display_name"]``, stored with every server of the user.  The default
    server without one is ``default_server_display_name``, else "JupyterLab" under jhub-apps.
    """
    names: dict[str, str] = {}
    orm_user = getattr(spawner.user, "orm_user", None)
    stored = getattr(orm_user, "orm_spawners", None) or {}
    for name, orm_spawner in stored.items():
        shown = display_name(orm_spawner)
        if shown:
            names[name or ""] = shown
    current = display_name(spawner)
    if current:
        names[spawner.name or ""] = current
    if not names.get(""):
        default = spawner.default_server_display_name
        if default is None and _built_by_jhub_apps(type(spawner)):
            default = "JupyterLab"
        if default:
            names[""] = default
    return names


def _built_by_jhub_apps(cls: type) -> bool:
    return any(base.__module__.startswith("jhub_apps") for base in cls.__mro__)
