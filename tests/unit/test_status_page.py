"""The operator's page (nebari_colocate.status, nebari_colocate.status_page): its JSON for a
built state, row by row; who may read it; JSON or HTML; what install() adds to a hub config; the
page rendered inside JupyterHub's own page.html, names escaped; the navbar's link laid over each
page.html a hub may use (JupyterHub's, a theme that replaces the navbar's left items, one that
replaces the whole navbar)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from jinja2 import ChoiceLoader, DictLoader, Environment, FileSystemLoader, PrefixLoader
from jupyterhub._data import DATA_FILES_PATH
from jupyterhub.scopes import Scope
from traitlets.config import Config

from nebari_colocate import history
from nebari_colocate.helm import HUB_TEMPLATES
from nebari_colocate.history import (
    MOVE_OFF_PREMIUM,
    OBSERVE,
    WAY_OUT,
    premium_pod_ended,
    record_refusal,
    record_way_out,
    the_history,
)
from nebari_colocate.status import NamespaceInput, StatusInput, build
from nebari_colocate.status_page import (
    BODY,
    NAV_LINK,
    PAGE,
    SCOPE,
    STATUS_PATH,
    NavLink,
    StatusHandler,
    allowed,
    install,
    render_body,
    wants_json,
)
from tests.support.builders import gpu_node, node, pod, pv, pvc, running

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
JUPYTERHUB_TEMPLATES = str(Path(DATA_FILES_PATH) / "templates")


@pytest.fixture(autouse=True)
def _fresh_history():
    the_history().clear()
    the_history().started = NOW - 7200
    yield
    the_history().clear()


def facts(pods, pvcs, nodes, *, pvs=None, leases=None, **kwargs) -> StatusInput:
    by_node: dict[str, list] = {}
    for p in pods:
        if p["spec"].get("nodeName"):
            by_node.setdefault(p["spec"]["nodeName"], []).append(p)
    return StatusInput(
        namespaces=[NamespaceInput("dev", pods, {c["metadata"]["name"]: c for c in pvcs})],
        nodes=None if nodes is None else {n["metadata"]["name"]: n for n in nodes},
        node_pods=by_node,
        pvs=pvs,
        leases=leases,
        history=the_history(),
        now=NOW,
        **kwargs,
    )


def lab(name, node_name, user, server="", claims=("claim-alice",), **kwargs):
    return running(name, node_name, user=user, server=server, claims=claims, **kwargs)


# --------------------------------------------------------------------------------------------------
# who is pinned where, and the headroom there


@pytest.mark.parametrize(
    ("test_variation_id", "pods", "pvcs", "expect_pinned"),
    [
        (
            "alice_pinned_by_her_lab_and_app_on_one_node",
            [lab("jupyter-alice", "cpu-1", "alice"), lab("app", "cpu-1", "alice", "pandas-app")],
            [pvc("claim-alice")],
            [("alice", "claim-alice", "cpu-1", [], ["", "pandas-app"], [])],
        ),
        (
            "a_shared_claim_pins_nobody",
            [lab("jupyter-bob", "cpu-1", "bob", claims=("home",))],
            [pvc("home", modes=("ReadWriteMany",))],
            [],
        ),
        (
            "a_pending_pod_holds_nothing",
            [pod("jupyter-carol", user="carol", claims=("claim-carol",))],
            [pvc("claim-carol")],
            [],
        ),
        (
            "a_backup_job_holding_the_claim_is_named_by_its_pod",
            [running("backup-alice", "cpu-2", claims=("claim-alice",))],
            [pvc("claim-alice")],
            [("", "claim-alice", "cpu-2", [], [], ["backup-alice"])],
        ),
        (
            "a_claim_on_two_nodes_is_shown_split",
            [lab("a", "cpu-1", "alice"), lab("b", "cpu-2", "alice", "x")],
            [pvc("claim-alice")],
            [("alice", "claim-alice", None, ["cpu-1", "cpu-2"], ["", "x"], [])],
        ),
        (
            "a_claim_the_view_does_not_hold_is_judged_by_the_setting",
            [lab("jupyter-dave", "cpu-1", "dave", claims=("claim-dave",))],
            [],
            [("dave", "claim-dave", "cpu-1", [], [""], [])],
        ),
    ],
)
def test_who_is_pinned_where(test_variation_id, pods, pvcs, expect_pinned):
    found = build(facts(pods, pvcs, [node("cpu-1"), node("cpu-2")]))["pinned"]
    assert [
        (p["user"], p["claim"], p["node"], p["split"], p["servers"], p["others"]) for p in found
    ] == expect_pinned


def test_the_headroom_of_a_pinned_node_counts_every_pod_bound_there():
    pods = [
        lab("jupyter-alice", "cpu-1", "alice", requests={"cpu": "1", "memory": "2Gi"}),
        running("other", "cpu-1", namespace="kube-system", requests={"cpu": "500m"}),
        running("done", "cpu-1", requests={"cpu": "2"}) | {"status": {"phase": "Succeeded"}},
    ]
    (row,) = build(facts(pods, [pvc("claim-alice")], [node("cpu-1"), node("cpu-2")]))["nodes"]
    free = {r["resource"]: (r["free"], r["free_text"]) for r in row["resources"]}
    assert row["node"] == "cpu-1" and row["known"] and not row["premium"]
    assert free["cpu"] == (2500, "2.5 CPU")
    assert free["memory"] == (14 * 2**30, "14 GiB")
    assert free["pods"] == (108, "108")
    assert [r["resource"] for r in row["resources"]] == ["cpu", "memory", "pods"]


def test_without_nodes_the_headroom_is_not_known_and_no_ride_is_told():
    pods = [lab("jupyter-alice", "gpu-1", "alice")]
    page = build(facts(pods, [pvc("claim-alice")], None))
    assert page["nodes"] == [{"node": "gpu-1", "known": False, "premium": None, "resources": []}]
    assert page["premium_rides"] == [] and page["view"]["nodes_readable"] is False


# --------------------------------------------------------------------------------------------------
# refusals, ways out


def test_refusals_of_the_last_24_hours_by_reason_with_the_words_the_user_read():
    record_refusal("old", "", reasons=["taint"], message="old", at=NOW - 25 * 3600)
    record_refusal(
        "alice",
        "gpu-lab",
        reasons=["insufficient:nvidia.com/gpu"],
        message="Your server 'GPU Lab' cannot start: <b>",
        node="cpu-1",
        way_out=True,
        at=NOW - 60,
    )
    record_refusal("bob", "", reasons=["taint"], message="would", mode=OBSERVE, at=NOW - 30)
    record_refusal("carol", "", reasons=["insufficient:nvidia.com/gpu"], message="m", at=NOW - 10)
    refusals = build(facts([], [], []))["refusals"]
    assert refusals["by_reason"] == [
        {"reason": "insufficient:nvidia.com/gpu", "enforce": 2, "observe": 0},
        {"reason": "taint", "enforce": 0, "observe": 1},
    ]
    assert [r["user"] for r in refusals["items"]] == ["carol", "bob", "alice"]
    alice = refusals["items"][2]
    assert alice == {
        "at": "2027-01-15T07:59:00Z",
        "user": "alice",
        "server": "gpu-lab",
        "reasons": ["insufficient:nvidia.com/gpu"],
        "message": "Your server 'GPU Lab' cannot start: <b>",
        "node": "cpu-1",
        "way_out": True,
        "source": "check",
        "mode": "enforce",
    }


def test_ways_out_and_moves_newest_first_with_their_outcome():
    record_way_out("alice", WAY_OUT, "started", server="", servers=["app"], at=NOW - 9)
    record_way_out("bob", MOVE_OFF_PREMIUM, "release-timeout", servers=["a", "b"], at=NOW - 5)
    items = build(facts([], [], []))["ways_out"]["items"]
    assert [(w["user"], w["kind"], w["outcome"], w["servers"]) for w in items] == [
        ("bob", "move-off-premium", "release-timeout", ["a", "b"]),
        ("alice", "way-out", "started", ["app"]),
    ]


# --------------------------------------------------------------------------------------------------
# migrations, premium rides


def test_a_home_being_moved_shows_since_when_its_step_and_its_leases_holder():
    claim = pvc("claim-alice")
    claim["metadata"]["annotations"] = {
        "nebari.dev/migration": "moving",
        "nebari.dev/migration-started": "2027-01-15T07:00:00Z",
    }
    old = pv("pv-claim-alice")
    old["metadata"]["annotations"] = {
        "nebari.dev/migrate-claim": "dev/claim-alice",
        "nebari.dev/migrate-step": "copying",
    }
    lease = {
        "metadata": {
            "name": "migrate-claim-alice",
            "namespace": "dev",
            "annotations": {
                "nebari.dev/migration-of": "claim-alice",
                "nebari.dev/migrate-host": "ops",
            },
        },
        "spec": {
            "holderIdentity": "root@ops pid 7 abc123",
            "acquireTime": "2027-01-15T07:00:01.000000Z",
            "renewTime": "2027-01-15T07:59:40.000000Z",
        },
    }
    (row,) = build(facts([], [claim, pvc("claim-bob")], [], pvs=[old], leases=[lease]))[
        "migrations"
    ]
    assert row == {
        "namespace": "dev",
        "claim": "claim-alice",
        "user": None,
        "since": "2027-01-15T07:00:00Z",
        "stalled": None,
        "step": "copying",
        "holder": "root@ops pid 7 abc123",
        "holder_host": "ops",
        "held_since": "2027-01-15T07:00:01.000000Z",
        "renewed": "2027-01-15T07:59:40.000000Z",
    }
    (unknown,) = build(facts([], [claim], []))["migrations"]
    assert (unknown["step"], unknown["holder"]) == (None, None)


def test_servers_riding_on_a_premium_node_and_for_how_long():
    pods = [
        lab("app-a", "gpu-1", "alice", "pandas-app"),
        lab("app-b", "gpu-2", "bob", "dash", claims=("claim-bob",)),
        lab(
            "lab-c", "gpu-3", "carol", "lab", claims=("claim-carol",), limits={"nvidia.com/gpu": 1}
        ),
    ]
    premium_pod_ended("gpu-1", at=NOW - 3 * 3600)
    nodes = [gpu_node("gpu-1"), gpu_node("gpu-2"), gpu_node("gpu-3")]
    rides = build(facts(pods, [], nodes))["premium_rides"]
    assert [
        (r["user"], r["node"], r["servers"], r["seconds"], r["at_least_since"]) for r in rides
    ] == [
        ("alice", "gpu-1", ["pandas-app"], 10800.0, None),
        ("bob", "gpu-2", ["dash"], None, "2027-01-15T06:00:00Z"),
    ]


async def test_in_observe_mode_the_page_says_nothing_is_refused():
    record_refusal("bob", "", reasons=["taint"], message="would", mode=OBSERVE, at=NOW - 30)
    page = build(facts([], [], [], mode="observe"))
    assert page["mode"] == "observe"
    body = await render_body(hub_environment().get_template(BODY), page)
    assert 'id="colocate-status-observe"' in body and "observe: not refused" in body
    enforced = await render_body(hub_environment().get_template(BODY), build(facts([], [], [])))
    assert 'id="colocate-status-observe"' not in enforced


def test_the_page_says_when_the_view_is_not_complete():
    page = build(facts([], [], [], problems=("pods (all namespaces): not listed yet",)))
    assert page["view"]["live"] is False and page["view"]["problems"]
    assert page["version"] == 1 and page["generated_at"] == "2027-01-15T08:00:00Z"


# --------------------------------------------------------------------------------------------------
# who may read it; JSON or HTML; the hub config


@pytest.mark.parametrize(
    ("test_variation_id", "scopes", "expect"),
    [
        ("an_admin", {"admin-ui": Scope.ALL, "admin:users": Scope.ALL}, True),
        ("granted_the_custom_scope", {SCOPE: Scope.ALL}, True),
        ("the_scope_for_one_user_only_is_not_enough", {SCOPE: {"user": {"alice"}}}, False),
        (
            "a_plain_user",
            {"read:users:name": {"user": {"bob"}}, "servers": {"user": {"bob"}}},
            False,
        ),
        ("nobody", {}, False),
    ],
)
def test_who_may_read_the_page(test_variation_id, scopes, expect):
    assert allowed(scopes) is expect


@pytest.mark.parametrize(
    ("format_arg", "accept", "expect"),
    [
        ("json", None, True),
        ("JSON", "text/html", True),
        ("html", "application/json", False),
        (None, "application/json", True),
        (None, "text/html,application/xhtml+xml,*/*", False),
        (None, None, False),
    ],
)
def test_json_for_scripts_html_for_people(format_arg, accept, expect):
    assert wants_json(format_arg, accept) is expect


def test_install_adds_the_handler_the_scope_and_the_link_once_keeping_the_operators():
    c = Config()
    c.JupyterHub.extra_handlers.extend([("/custom/(.*)", object)])  # as Nebari's theme does
    c.JupyterHub.custom_scopes = {"custom:mine:read": {"description": "mine"}}
    c.JupyterHub.jinja_environment_options = {"extensions": ["jinja2.ext.do"], "trim_blocks": True}
    install(c)
    install(c)
    assert [h[0] for h in c.JupyterHub.extra_handlers] == ["/custom/(.*)", STATUS_PATH]
    assert c.JupyterHub.extra_handlers[1][1] is StatusHandler
    assert sorted(c.JupyterHub.custom_scopes) == sorted(["custom:mine:read", SCOPE])
    assert c.JupyterHub.jinja_environment_options == {
        "extensions": ["jinja2.ext.do", NAV_LINK],
        "trim_blocks": True,
    }


def test_the_custom_scope_is_one_jupyterhub_accepts():
    from jupyterhub.scopes import define_custom_scopes

    c = Config()
    install(c)
    define_custom_scopes(dict(c.JupyterHub.custom_scopes))  # raises on a name it refuses


# --------------------------------------------------------------------------------------------------
# the page and its link, rendered as JupyterHub renders them

NEBARI_LIKE = """{% extends "templates/page.html" %}
{% block nav_bar_left_items %}
<li class="nav-item"><a class="nav-link" href="/argo">Argo Workflows</a></li>
{% endblock %}"""
JHUB_APPS_LIKE = """{% extends "templates/page.html" %}
{% block nav_bar %}<nav><div id="thenavbar"><div class="profile-menu"><ul class="menu">
<li><a href="/hub/token">Tokens</a></li><li><a href="/hub/logout">Logout</a></li>
</ul></div></div></nav>{% endblock %}"""


def hub_environment(theme: dict[str, str] | None = None) -> Environment:
    """JupyterHub's environment (jupyterhub/app.py): its own templates under ``templates/``, then
    ``template_paths`` (a theme's, ours, JupyterHub's), with the extension install() adds."""
    paths: list = [FileSystemLoader([str(HUB_TEMPLATES), JUPYTERHUB_TEMPLATES])]
    if theme:
        paths.insert(0, DictLoader(theme))
    loader = ChoiceLoader(
        [PrefixLoader({"templates": FileSystemLoader([JUPYTERHUB_TEMPLATES])}, "/"), *paths]
    )
    return Environment(loader=loader, autoescape=True, extensions=[NAV_LINK])


def ns(scopes: dict) -> dict:
    return {
        "static_url": lambda *a, **k: "/hub/static/x",
        "base_url": "/hub/",
        "prefix": "/",
        "user": SimpleNamespace(name="root", admin=True, spawner=SimpleNamespace(options_form="")),
        "no_spawner_check": True,
        "xsrf": "t",
        "parsed_scopes": scopes,
        "version_hash": "",
        "services": [],
    }


@pytest.mark.parametrize("theme", [None, {"page.html": NEBARI_LIKE}, {"page.html": JHUB_APPS_LIKE}])
@pytest.mark.parametrize(
    ("scopes", "expect_link"),
    [({"admin-ui": Scope.ALL}, True), ({SCOPE: Scope.ALL}, True), ({"servers": Scope.ALL}, False)],
)
def test_the_navbar_links_the_page_for_those_allowed_whatever_page_html_is_used(
    theme, scopes, expect_link
):
    env = hub_environment(theme)
    html = env.get_template("token.html").render(**ns(scopes), api_tokens=[], oauth_clients=[])
    assert ("colocate-status-link" in html) is expect_link
    if theme is None or "nav_bar_left_items" in theme["page.html"]:
        assert ('<a class="nav-link" id="colocate-status-link"' in html) is expect_link
    else:  # a navbar without left items: the link goes into its menu, by script
        assert ('link.id = "colocate-status-link"' in html) is expect_link
        assert ("profile-menu ul.menu" in html) is expect_link
    if theme is not None:  # the theme's own navbar is still there
        assert ("Argo Workflows" in html) or ("profile-menu" in html)


async def test_the_page_renders_every_section_with_hostile_names_escaped():
    hostile = '<img src=x onerror="alert(1)">'
    pods = [lab("jupyter-alice", "cpu-1", "alice", hostile)]
    record_refusal(
        "alice", hostile, reasons=["insufficient:cpu"], message=f"Your server '{hostile}'", at=NOW
    )
    record_way_out("alice", WAY_OUT, "started", server=hostile, servers=[hostile], at=NOW)
    page = build(facts(pods, [pvc("claim-alice")], [node("cpu-1")]))
    env = hub_environment()
    body = await render_body(env.get_template(BODY), page)
    html = env.get_template(PAGE).render(**ns({"admin-ui": Scope.ALL}), colocate_status_body=body)
    assert hostile not in html and "&lt;img src=x onerror=" in html
    for section in (
        "colocate-pinned",
        "colocate-headroom",
        "colocate-refusals",
        "colocate-ways-out",
    ):
        assert f'id="{section}"' in html
    assert "Nobody is pinned now." not in html and "No home is being moved." in html
    assert html.count('id="colocate-status"') == 1  # the content once, inside the hub's page
    assert 'id="colocate-status-link"' in html


def test_the_extension_wraps_a_loader_once():
    env = Environment(loader=DictLoader({"x.html": "x"}), extensions=[NavLink])
    again = NavLink(env)
    assert again is not None and env.loader is not None
    assert type(env.loader).__name__ == "_Layered"
    assert type(env.loader.below).__name__ == "DictLoader"  # type: ignore[attr-defined]
    assert history.the_history() is the_history()
