"""The move off a premium node (docs/decisions.md, "The move off a premium node"): which servers
keep a GPU node running alone, how a moved pod is kept off it, the notice's words, and how
configure(c) puts the notice on the home page without losing the operator's template_vars."""

from __future__ import annotations

import html

import pytest
from traitlets.config import Config

from nebari_colocate import messages
from nebari_colocate.affinity import avoid_nodes
from nebari_colocate.handlers import (
    MOVE_PATH,
    HomeNotice,
    MoveHandler,
    WayOutHandler,
    install,
    install_notice,
)
from nebari_colocate.objects import HOSTNAME
from nebari_colocate.wayout import PremiumRide, premium_rides
from tests.support.builders import gpu_node, node, pod

HOME = "claim-alice"
GPU = {"nvidia.com/gpu": "1"}


def hosted(name: str, labels: dict | None = None, **kwargs) -> dict:
    """A node whose hostname label differs from its name (as Karpenter's kwok nodes have it)."""
    return {**kwargs, "labels": {HOSTNAME: f"host-{name}", **(labels or {})}}


GPU1 = gpu_node("gpu-1", **hosted("gpu-1"))
GPU2 = gpu_node("gpu-2", **hosted("gpu-2"))
CPU1 = node("cpu-1", **hosted("cpu-1"))
NODES = {n["metadata"]["name"]: n for n in (GPU1, GPU2, CPU1)}


def server(
    name: str,
    node_name: str | None = "gpu-1",
    *,
    user: str = "alice",
    gpu: bool = False,
    phase: str = "Running",
    **kwargs,
) -> dict:
    pod_name = f"jupyter-{user}" + (f"--{name}" if name else "")
    requests = {"cpu": "1", **(GPU if gpu else {})}
    return pod(
        pod_name,
        user=user,
        server=name,
        node_name=node_name,
        phase=phase if node_name else "Pending",
        claims=[f"claim-{user}"],
        requests=requests,
        **kwargs,
    )


def no_hostname(obj: dict) -> dict:
    obj["metadata"]["labels"].pop(HOSTNAME, None)
    return obj


def job_pod(node_name: str = "gpu-1") -> dict:
    return pod("backup-alice", node_name=node_name, phase="Running", claims=[HOME])


@pytest.mark.parametrize(
    "test_variation_id, pods, nodes, expect",
    [
        (
            "the-lab-stopped-one-app-rides-on",
            [server("pandas-app")],
            NODES,
            [("gpu-1", "host-gpu-1", ("pandas-app",))],
        ),
        (
            "two-apps-ride-on-one-button-moves-both",
            [server("pandas-app"), server("dash")],
            NODES,
            [("gpu-1", "host-gpu-1", ("dash", "pandas-app"))],
        ),
        (
            "the-default-server-rides-on",
            [server("")],
            NODES,
            [("gpu-1", "host-gpu-1", ("",))],
        ),
        ("the-lab-still-runs-nothing-to-move", [server("", gpu=True), server("app")], NODES, []),
        (
            "the-lab-being-started-again-unbound-nothing-to-move",
            [server("", node_name=None, gpu=True), server("app")],
            NODES,
            [],
        ),
        (
            "a-gpu-lab-on-another-gpu-node-does-not-keep-this-one",
            [server("", node_name="gpu-2", gpu=True), server("app")],
            NODES,
            [("gpu-1", "host-gpu-1", ("app",))],
        ),
        ("on-a-standard-node-nothing-to-move", [server("app", "cpu-1")], NODES, []),
        ("without-node-access-nothing-can-be-told", [server("app")], None, []),
        ("a-node-not-in-the-view-is-not-judged", [server("app", "gpu-9")], NODES, []),
        ("another-users-server-is-not-alices", [server("app", user="bob")], NODES, []),
        (
            "another-users-gpu-lab-there-does-not-count-alices-app-still-moves",
            [server("", user="bob", gpu=True), server("app")],
            NODES,
            [("gpu-1", "host-gpu-1", ("app",))],
        ),
        ("a-job-pod-is-no-server-to-move", [job_pod()], NODES, []),
        ("a-terminating-app-is-on-its-way-already", [server("app", deleting=True)], NODES, []),
        ("a-finished-app-holds-nothing", [server("app", phase="Succeeded")], NODES, []),
        (
            "rides-on-two-gpu-nodes-sorted-by-node",
            [server("b", "gpu-2"), server("a", "gpu-1")],
            NODES,
            [("gpu-1", "host-gpu-1", ("a",)), ("gpu-2", "host-gpu-2", ("b",))],
        ),
        (
            "a-gpu-node-without-a-hostname-label",
            [server("app")],
            {"gpu-1": no_hostname(gpu_node("gpu-1"))},
            [("gpu-1", None, ("app",))],
        ),
        (
            "a-gpu-node-whose-gpus-are-not-allocatable-is-not-premium",
            [server("app")],
            {"gpu-1": gpu_node("gpu-1", allocatable={"nvidia.com/gpu": "0"})},
            [],
        ),
    ],
)
def test_premium_rides(test_variation_id, pods, nodes, expect):
    found = premium_rides(
        pods,
        nodes,
        username="alice",
        label_value="alice",
        premium_resources=("nvidia.com/gpu", "amd.com/gpu"),
    )
    assert [(r.node, r.hostname, r.servers) for r in found] == expect


def test_premium_rides_reads_the_operators_premium_resources():
    fpga = node("fpga-1", allocatable={"example.com/fpga": "2"})
    found = premium_rides(
        [server("app", "fpga-1")],
        {"fpga-1": fpga},
        username="alice",
        label_value="alice",
        premium_resources=("example.com/fpga",),
    )
    assert found == (PremiumRide("fpga-1", "fpga-1", ("app",)),)
    assert found[0].as_json() == {"node": "fpga-1", "hostname": "fpga-1", "servers": ["app"]}


# --- kept off the premium nodes ------------------------------------------------------------------


def affinity_terms(manifest: dict) -> list[dict]:
    node_affinity = manifest["spec"]["affinity"]["nodeAffinity"]
    return node_affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]


AWAY = {"key": HOSTNAME, "operator": "NotIn", "values": ["host-gpu-1", "host-gpu-2"]}
NOT_GPU_POOL = {"key": "karpenter.sh/nodepool", "operator": "NotIn", "values": ["gpu"]}


@pytest.mark.parametrize(
    "test_variation_id, affinity, nodes, expect_terms",
    [
        (
            "no-node-affinity-one-term-of-its-own",
            None,
            [("gpu-1", "host-gpu-1", None), ("gpu-2", "host-gpu-2", None)],
            [{"matchExpressions": [AWAY]}],
        ),
        (
            "every-profile-term-is-narrowed-terms-are-ored",
            {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "a", "operator": "Exists"}]},
                            {"matchExpressions": [{"key": "b", "operator": "Exists"}]},
                        ]
                    }
                }
            },
            [("gpu-2", "host-gpu-2", None), ("gpu-1", "host-gpu-1", None)],
            [
                {"matchExpressions": [{"key": "a", "operator": "Exists"}, AWAY]},
                {"matchExpressions": [{"key": "b", "operator": "Exists"}, AWAY]},
            ],
        ),
        (
            # Karpenter ignores a pod that selects on kubernetes.io/hostname or uses matchFields
            # ("using label kubernetes.io/hostname is not allowed"): its nodes by their NodePool
            "karpenter-nodes-by-their-nodepool-never-by-hostname",
            None,
            [("kwok-gpu-a", "gpu-a", "gpu"), ("kwok-gpu-b", "gpu-b", "gpu")],
            [{"matchExpressions": [NOT_GPU_POOL]}],
        ),
        (
            "a-karpenter-node-and-a-static-one",
            None,
            [("kwok-gpu-a", "gpu-a", "gpu"), ("gpu-1", "host-gpu-1", None)],
            [
                {
                    "matchExpressions": [
                        NOT_GPU_POOL,
                        {"key": HOSTNAME, "operator": "NotIn", "values": ["host-gpu-1"]},
                    ]
                }
            ],
        ),
        (
            "a-node-without-labels-by-its-name",
            None,
            [("gpu-1", None, None)],
            [{"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["gpu-1"]}]}],
        ),
    ],
)
def test_avoid_nodes(test_variation_id, affinity, nodes, expect_terms):
    manifest = pod("jupyter-alice--app", claims=[HOME], affinity=affinity)
    before = repr(manifest)
    moved = avoid_nodes(manifest, nodes)
    assert affinity_terms(moved) == expect_terms
    assert repr(manifest) == before  # a copy
    assert avoid_nodes(moved, nodes) == moved  # once


def test_avoid_nodes_with_nothing_to_avoid_changes_nothing():
    manifest = pod("jupyter-alice--app", claims=[HOME])
    assert avoid_nodes(manifest, []) == manifest


# --- the words -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "test_variation_id, servers, names, expect",
    [
        (
            "one-app-by-its-display-name",
            ["pandas-app"],
            {"pandas-app": "Pandas App"},
            "'Pandas App' keeps a GPU machine running: move it to a standard machine",
        ),
        (
            "two-servers",
            ["", "dash"],
            {"": "JupyterLab"},
            "'JupyterLab' and 'dash' keep a GPU machine running: move them to a standard machine",
        ),
        (
            "the-default-server-without-a-display-name",
            [""],
            {},
            "Your default server keeps a GPU machine running: move it to a standard machine",
        ),
    ],
)
def test_premium_ride_words(test_variation_id, servers, names, expect):
    assert messages.premium_ride_text(servers, names) == expect


def test_premium_ride_html_escapes_every_name_and_posts_the_servers():
    hostile = '<img src=x onerror="alert(1)">'
    page = messages.premium_ride_html(
        ["evil-app"], 'gpu"1', "/hub/colocate/move/al%3Cice", {"evil-app": hostile}
    )
    assert "<img" not in page
    assert html.escape(hostile) in page
    assert 'name="node" value="gpu&quot;1"' in page
    assert 'name="server" value="evil-app"' in page
    assert 'action="/hub/colocate/move/al%3Cice"' in page
    assert 'name="_xsrf"' in page and "jhdata" in page
    assert "move it to a standard machine</button>" in page


@pytest.mark.parametrize(
    "outcome", ["forbidden", "stale", "busy", "stop-failed", "release-timeout", "start-failed"]
)
def test_every_way_a_move_ends_part_way_has_words_escaped(outcome):
    names = {"a": "<b>App</b>"}
    text = messages.move_failed(outcome, servers=["a"], display_names=names, seconds=120)
    assert "did not finish (" not in text  # not the catch-all
    page = messages.move_failed_html(outcome, servers=["a"], display_names=names, seconds=120)
    assert "<b>" not in page


# --- the home page: configure(c) keeps the operator's template_vars ----------------------------


class FakeUser:
    """What HomeNotice reads of JupyterHub's User: its kind, name and default spawner."""

    kind = "user"
    name = escaped_name = "alice"

    def __init__(self, rides=(), names=None):
        hub = type("Hub", (), {"base_url": "/hub/"})()
        self.settings = {"hub": hub}
        spawner = type(
            "S",
            (),
            {
                "premium_resources": ["nvidia.com/gpu"],
                "premium_rides": lambda self: tuple(rides),
                "server_display_names": lambda self: dict(names or {}),
            },
        )
        self.spawner = spawner()


RIDE = PremiumRide("gpu-1", "host-gpu-1", ("pandas-app",))


def test_the_notice_on_the_home_page_and_the_operators_announcement_after_it():
    notice = HomeNotice("Maintenance on Friday")
    shown = notice(FakeUser([RIDE], {"pandas-app": "Pandas App"}))
    assert "&#x27;Pandas App&#x27; keeps a GPU machine running:" in shown
    assert 'action="/hub/colocate/move/alice"' in shown
    assert shown.endswith("<div>Maintenance on Friday</div>")
    # nothing to move: the operator's value as it was
    assert notice(FakeUser()) == "Maintenance on Friday"


def test_without_a_notice_an_unset_announcement_home_stays_unset():
    # None (not ""): JupyterHub's home then shows the operator's `announcement`
    assert HomeNotice(None, "everywhere")(FakeUser()) is None
    shown = HomeNotice(None, "everywhere")(FakeUser([RIDE]))
    assert shown.endswith("<div>everywhere</div>")


def test_the_operators_callable_is_called_with_the_user():
    notice = HomeNotice(lambda user: f"hello {user.name}")
    assert notice(FakeUser()) == "hello alice"
    assert notice(FakeUser([RIDE])).endswith("<div>hello alice</div>")


def test_a_failing_notice_never_breaks_the_home_page():
    user = FakeUser()
    user.spawner.premium_rides = lambda: 1 / 0
    assert HomeNotice("x")(user) == "x"


def test_a_stock_spawner_shows_no_notice():
    user = FakeUser()
    user.spawner = object()
    assert HomeNotice()(user) is None
    assert HomeNotice.notice(None) == ""


@pytest.mark.parametrize(
    "test_variation_id, set_vars, expect_kept",
    [
        ("nothing-set", lambda c: None, {}),
        (
            "a-dict",
            lambda c: setattr(c.JupyterHub, "template_vars", {"announcement": "a", "custom": 1}),
            {"announcement": "a", "custom": 1},
        ),
        (
            "update-on-the-lazy-value",
            lambda c: c.JupyterHub.template_vars.update({"custom": 2}),
            {"custom": 2},
        ),
    ],
)
def test_install_notice_keeps_every_template_var(test_variation_id, set_vars, expect_kept):
    c = Config()
    set_vars(c)
    assert install_notice(c)
    install_notice(c)  # once
    values = dict(c.JupyterHub.template_vars)
    notice = values.pop("announcement_home")
    assert isinstance(notice, HomeNotice)
    assert values == expect_kept
    assert notice.previous == expect_kept.get("announcement")
    assert not isinstance(notice.previous_home, HomeNotice)


def test_install_notice_keeps_the_operators_announcement_home():
    def theirs(user):
        return "theirs"

    c = Config()
    c.JupyterHub.template_vars = {"announcement_home": theirs}
    install_notice(c)
    assert c.JupyterHub.template_vars["announcement_home"].previous_home is theirs


def test_install_adds_both_handlers_once():
    c = Config()
    install(c)
    install(c)
    assert [h[1] for h in c.JupyterHub.extra_handlers] == [WayOutHandler, MoveHandler]
    assert c.JupyterHub.extra_handlers[1][0] == MOVE_PATH == r"/colocate/move/([^/]+)/?"
