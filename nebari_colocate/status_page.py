"""The operator's page in the hub: ``GET {hub}/colocate/status``, HTML for people and JSON for
scripts (``?format=json``, or ``Accept: application/json``), and its link in the hub's navbar.

- **Who may read it**: JupyterHub admins (the ``admin-ui`` scope, what JupyterHub's own admin
  page asks) and whoever holds the custom scope ``custom:colocate:read`` (a role an operator
  grants; :func:`install` defines the scope in ``c.JupyterHub.custom_scopes``); 403 otherwise.
  A token works as the person's session does (scripts).
- **What it reads**: only what the hub holds in memory: the live view's watches
  (:mod:`nebari_colocate.informer`) and the library's own records
  (:mod:`nebari_colocate.history`).  A page view makes no Kubernetes API request
  (``tests/cluster/test_status_page.py`` counts them); while the view has not started (no
  server started since the hub did) the page says so.  :mod:`nebari_colocate.status` builds it.
- **The navbar link**, for those users only, on every hub page whatever ``page.html`` is in
  use (JupyterHub's, Nebari's theme, jhub-apps'): :class:`NavLink`, a Jinja extension put into
  ``c.JupyterHub.jinja_environment_options``, lays a thin ``page.html`` over the one the hub
  would use (``templates/layer/page.html``): it adds the link to the navbar's left items, or,
  where a theme replaced the navbar (jhub-apps' profile menu), to that menu.

Why a page of the hub and not a hub-managed service: ``docs/decisions.md``, "The operator's
page".
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from jinja2 import BaseLoader, Environment, Template, TemplateNotFound
from jinja2.ext import Extension
from jupyterhub.handlers import BaseHandler
from markupsafe import Markup
from tornado import web
from traitlets.config import Config

from .config import jupyterhub_value
from .history import the_history
from .informer import Collection, HubWatches, collector_paused
from .objects import GPU_RESOURCES, RWO, JsonDict, Obj, meta
from .status import NamespaceInput, StatusInput, build

#: the page (the hub's page.html around the content) and its content, rendered apart
PAGE, BODY = "colocate_status.html", "colocate_status_body.html"
#: the page's path under the hub's base URL
STATUS_PATH = r"/colocate/status/?"
#: the custom scope that lets a person (or a token) read the page
SCOPE = "custom:colocate:read"
#: JupyterHub's scope of its own admin page: every admin has it
ADMIN_SCOPE = "admin-ui"
SCOPE_DEFINITION = {
    "description": "Read nebari-colocate's operator page ({hub}/colocate/status): who is pinned "
    "where, refusals, ways out, migrations. Shows every user's server names.",
}

#: the thin page.html laid over the hub's own (never on template_paths: it extends that one)
LAYER = Path(__file__).resolve().parent / "templates" / "layer" / "page.html"
#: the name under which the layer reaches the page.html the hub would use without it
BELOW = "colocate-below/"


# --------------------------------------------------------------------------------------------------
# who may read it


def allowed(parsed_scopes: Mapping[str, Any]) -> bool:
    """An admin (``admin-ui``) or a holder of :data:`SCOPE` without a filter."""
    if ADMIN_SCOPE in parsed_scopes:
        return True
    granted = parsed_scopes.get(SCOPE)
    return granted is not None and _unfiltered(granted)


def _unfiltered(granted: Any) -> bool:
    try:
        from jupyterhub.scopes import Scope
    except ImportError:  # pragma: no cover - every supported JupyterHub has it
        return bool(granted)
    return bool(granted == Scope.ALL)


def wants_json(format_arg: str | None, accept: str | None) -> bool:
    """``?format=json``, or an Accept header that prefers JSON to HTML."""
    if format_arg is not None:
        return format_arg.strip().lower() == "json"
    accept = (accept or "").lower()
    return "application/json" in accept and "text/html" not in accept


# --------------------------------------------------------------------------------------------------
# what it reads: the hub's watches as they are now (no request)


def _listed(collection: Collection) -> dict[str, JsonDict] | None:
    """A copy of a collection's objects, or None while it is forbidden or not listed."""
    if collection.forbidden or not collection.live:
        return None
    return dict(collection.items)


def _problems(hub: HubWatches, collections: Sequence[Collection], stale_after: float) -> list[str]:
    """Why the view is not to be trusted now, as ``NamespaceWatches.problems`` says it, without
    its side effect (that one lists a silent watch again: a page view never does)."""
    found = []
    for collection in collections:
        if collection.forbidden:
            continue
        if not collection.live:
            found.append(f"{collection.name}: {collection.error or 'not listed yet'}")
        elif collection.quiet_seconds() > stale_after:
            found.append(
                f"{collection.name}: no event or bookmark for {collection.quiet_seconds():.0f} s"
            )
    return found


def _node_pods(hubs: Sequence[HubWatches]) -> dict[str, list[Obj]]:
    """node name -> the pods bound there, from the watches' index (a copy: the page is built
    away from the event loop)."""
    found: dict[str, dict[str, Obj]] = {}
    for hub in hubs:
        for node, bucket in hub.by_node.entries.items():
            found.setdefault(node, {}).update(bucket)
    return {node: list(pods.values()) for node, pods in found.items()}


def gather(
    hubs: Sequence[HubWatches],
    *,
    now: float,
    premium_resources: Sequence[str] = GPU_RESOURCES,
    unknown_claim_modes: Sequence[str] = (RWO,),
    mode: str | None = None,
) -> StatusInput:
    """The page's input from the hubs' watches (normally one) and the history: objects already
    in memory, read, never requested; copies of the collections and rings (not of the objects,
    which the watches replace, never change), so that the page can be built in a thread while
    the event loop goes on applying events."""
    namespaces: list[NamespaceInput] = []
    problems: list[str] = []
    nodes: dict[str, Obj] | None = None
    pvs: list[Obj] | None = None
    leases: list[Obj] | None = None
    seen_leases: dict[str, Obj] = {}  # (the cluster-wide watch is every namespace's)
    partial = False
    for hub in hubs:
        listed_nodes = _listed(hub.nodes)
        if listed_nodes is not None:
            nodes = {**(nodes or {}), **listed_nodes}
        listed_pvs = _listed(hub.pvs)
        if listed_pvs is not None:
            pvs = [*(pvs or []), *listed_pvs.values()]
        partial = partial or hub.all_pods.forbidden
        by_namespace = _by_namespace(hub, list(hub.namespaces))
        for name, watches in sorted(hub.namespaces.items()):
            pods, pvcs = by_namespace[name]
            listed_leases = _listed(watches.leases)
            if listed_leases is not None:
                seen_leases.update(listed_leases)
                leases = list(seen_leases.values())
            namespaces.append(NamespaceInput(name, pods, pvcs))
            collections = [watches.pods, watches.pvcs, hub.nodes, hub.pvs, hub.attachments]
            problems += [
                p for p in _problems(hub, collections, watches.stale_after) if p not in problems
            ]
    if not hubs:
        problems.append("the live view has not started: no server was started since the hub was")
    return StatusInput(
        namespaces=namespaces,
        nodes=nodes,
        node_pods=_node_pods(hubs),
        pvs=pvs,
        leases=leases,
        history=the_history().snapshot(),
        now=now,
        premium_resources=tuple(premium_resources),
        unknown_claim_modes=tuple(unknown_claim_modes),
        problems=tuple(problems),
        partial_nodes=partial,
        mode=mode,
    )


def _by_namespace(hub: HubWatches, names: list[str]) -> dict[str, tuple[list[Obj], dict[str, Obj]]]:
    """Each namespace's pods and claims (by name), from one pass over the watches' objects."""
    found: dict[str, tuple[list[Obj], dict[str, Obj]]] = {n: ([], {}) for n in names}
    seen_pods: set[int] = set()
    seen_pvcs: set[int] = set()
    for name in names:
        watches = hub.namespaces[name]
        if id(watches.pods) not in seen_pods:
            seen_pods.add(id(watches.pods))
            for pod in watches.pods.items.values():
                row = found.get(str(meta(pod).get("namespace")))
                if row is not None:
                    row[0].append(pod)
        if id(watches.pvcs) not in seen_pvcs:
            seen_pvcs.add(id(watches.pvcs))
            for pvc in watches.pvcs.items.values():
                row = found.get(str(meta(pvc).get("namespace")))
                if row is not None:
                    row[1][str(meta(pvc).get("name"))] = pvc
    return found


def page(
    hubs: Sequence[HubWatches] | None = None,
    *,
    now: float | None = None,
    premium_resources: Sequence[str] = GPU_RESOURCES,
    unknown_claim_modes: Sequence[str] = (RWO,),
) -> JsonDict:
    """The page's JSON now (``hubs``: the running hubs' watches, by default)."""
    return build(
        gather(
            HubWatches.running() if hubs is None else hubs,
            now=time.time() if now is None else now,
            premium_resources=premium_resources,
            unknown_claim_modes=unknown_claim_modes,
        )
    )


async def render_body(template: Template, found: JsonDict) -> Markup:
    """The page's content (:data:`BODY`, a template compiled without async support), rendered in
    a thread: thousands of rows at 10,000 pods.  It reads ``found`` only (no handler, no user
    object: nothing the event loop changes meanwhile).  Rendered with the hub's autoescape, the
    result is HTML already escaped: it goes into the page as it is."""
    return Markup(await asyncio.to_thread(template.render, status=found))


# --------------------------------------------------------------------------------------------------
# the handler


class StatusHandler(BaseHandler):  # type: ignore[misc]  # JupyterHub ships no types
    """``GET {hub}/colocate/status``: see the module docstring."""

    # A script's token (``Authorization: token ...``) as well as the session's cookie: JupyterHub
    # accepts tokens on its API only since 4.1, for requests that change something; this page
    # only reads, and a header is never sent by a browser on its own (as UserUrlHandler).
    _accept_token_auth = True

    @web.authenticated
    async def get(self) -> None:
        if not allowed(self.parsed_scopes):
            raise web.HTTPError(403, "reading the co-location status needs the %s scope", SCOPE)
        premium, modes, mode = self._settings()
        as_json = wants_json(self.get_argument("format", None), self.request.headers.get("Accept"))
        body = self.get_template(BODY, sync=True)
        # 10,000 pods take a tenth of a second or more to go through (docs/performance.md): in
        # a thread, so the hub's event loop goes on meanwhile; and without the garbage
        # collector, whose full collection of a hub's heap, set off by what the page allocates
        # (and frees at once), would hold every thread (as while a LIST is applied)
        with collector_paused():
            facts = gather(
                HubWatches.running(),
                now=time.time(),
                premium_resources=premium,
                unknown_claim_modes=modes,
                mode=mode,
            )
            found = await asyncio.to_thread(build, facts)
            if as_json:
                text = await asyncio.to_thread(json.dumps, found, indent=1)
            else:
                content = await render_body(body, found)
        if as_json:
            self.set_header("Content-Type", "application/json; charset=UTF-8")
            self.finish(text)
            return
        self.finish(await self.render_template(PAGE, colocate_status_body=content))

    def _settings(self) -> tuple[tuple[str, ...], tuple[str, ...], str | None]:
        """The premium resources, the access mode of a claim not yet known and
        ``colocation_mode``, as the hub's spawners have them (any spawner object the hub holds;
        the defaults, and no mode, without one)."""
        for user in list(getattr(self, "users", {}).values()):
            for spawner in list(getattr(user, "spawners", {}).values()):
                premium = getattr(spawner, "premium_resources", None)
                access = getattr(spawner, "storage_access_mode", None)
                if premium is not None and isinstance(access, str):
                    mode = getattr(spawner, "colocation_mode", None)
                    return tuple(premium), (access,), mode if isinstance(mode, str) else None
        return GPU_RESOURCES, (RWO,), None


# --------------------------------------------------------------------------------------------------
# the navbar's link: a page.html laid over the hub's own


class _Layered(BaseLoader):
    """The hub's loader with ``page.html`` answered by the layer, which extends the page.html
    the hub's loader gives (reached as ``colocate-below/page.html``)."""

    def __init__(self, below: BaseLoader) -> None:
        self.below = below

    def get_source(self, environment: Environment, template: str) -> Any:
        if template == "page.html":
            try:
                source = LAYER.read_text(encoding="utf-8")
            except OSError as exc:  # pragma: no cover - the package ships it
                raise TemplateNotFound(template) from exc
            return source, str(LAYER), lambda: True
        if template.startswith(BELOW):
            return self.below.get_source(environment, template[len(BELOW) :])
        return self.below.get_source(environment, template)

    def list_templates(self) -> list[str]:
        return list(self.below.list_templates())


class NavLink(Extension):
    """A Jinja extension that only wraps the environment's loader (:class:`_Layered`): every
    hub page then gets the operator's page's link in its navbar, for those allowed."""

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        below = environment.loader
        if below is not None and not isinstance(below, _Layered):
            environment.loader = _Layered(below)


NAV_LINK = f"{NavLink.__module__}.{NavLink.__qualname__}"


def install(c: Config) -> None:
    """The page's handler in ``c.JupyterHub.extra_handlers``, its scope in
    ``c.JupyterHub.custom_scopes`` and the navbar's link (:class:`NavLink`) in
    ``c.JupyterHub.jinja_environment_options``, each once, keeping what the operator set."""
    handlers = list(jupyterhub_value(c, "extra_handlers") or [])
    if not any(len(h) > 1 and h[1] is StatusHandler for h in handlers):
        handlers.append((STATUS_PATH, StatusHandler))
    c.JupyterHub.extra_handlers = handlers
    scopes = dict(jupyterhub_value(c, "custom_scopes") or {})
    scopes.setdefault(SCOPE, dict(SCOPE_DEFINITION))
    c.JupyterHub.custom_scopes = scopes
    options = dict(jupyterhub_value(c, "jinja_environment_options") or {})
    extensions = list(options.get("extensions") or [])
    if NAV_LINK not in extensions and NavLink not in extensions:
        extensions.append(NAV_LINK)
    options["extensions"] = extensions
    c.JupyterHub.jinja_environment_options = options
