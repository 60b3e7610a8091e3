"""Decision -> user text, user HTML and operator line (docs/decisions.md, "What the user sees")."""

from __future__ import annotations

import json
import re
from datetime import datetime

import pytest

from nebari_colocate import autoscaler_events, events, fit, messages
from nebari_colocate.events import FAIL, IMAGE_BAD_NAME, IMAGE_INVALID, EventVerdict
from nebari_colocate.placement import REASON_CODES, REFUSE, Decision, Policy, decide
from tests.support.builders import gpu_node, node, pod, pvc, state, taint, volume_attachment

HOME = "claim-alice"
CPU = {"nebari.dev/node-type": "cpu"}
GPU = {"nebari.dev/node-type": "gpu"}
NODES = (node("cpu-1", labels=CPU), gpu_node("gpu-1", labels=GPU))
XSS = "<img src=x onerror=alert(1)>"
DEFAULT_POLICY = Policy()


def alice(server: str, node_name: str | None = "cpu-1", claims=(HOME,), **kwargs) -> dict:
    """A pod of alice's: running on ``node_name`` (a holder), or ``None`` for the new pod."""
    name = f"jupyter-alice--{server}" if server else "jupyter-alice"
    if node_name is None:
        return pod(name, claims=claims, user="alice", server=server, **kwargs)
    return pod(
        name,
        claims=claims,
        node_name=node_name,
        phase="Running",
        user="alice",
        server=server,
        **kwargs,
    )


def gpu_lab(server: str = "", **kwargs) -> dict:
    return alice(server, None, limits={"nvidia.com/gpu": "1"}, node_selector=GPU, **kwargs)


def refusal(new_pod, *objects, policy=DEFAULT_POLICY):
    decision = decide(new_pod, state(*NODES, *objects), policy)
    assert decision.verdict == "refuse", decision
    return decision


def texts(new_pod, *objects, server: str, policy=DEFAULT_POLICY) -> tuple[str, str]:
    decision = refusal(new_pod, *objects, policy=policy)
    args = {"username": "alice", "server_name": server}
    return (
        messages.user_message(decision, new_pod, **args),
        messages.user_html(decision, new_pod, **args),
    )


# --------------------------------------------------------------------------------------------------
# what the user reads


SCENARIOS = {
    "gpu-lab-blocked-by-app": lambda: (
        gpu_lab(""),
        [pvc(HOME), alice("pandas-app")],
        "",
        Policy(),
    ),
    "named-server-blocked-by-default-server": lambda: (
        gpu_lab("gpu-lab"),
        [pvc(HOME), alice("")],
        "gpu-lab",
        Policy(),
    ),
    "capacity-cap": lambda: (
        alice("big-app", None, requests={"cpu": "2"}),
        [pvc(HOME), alice("", requests={"cpu": "3"})],
        "big-app",
        Policy(),
    ),
    "cordoned-node": lambda: (
        alice("app", None),
        [node("old-1", unschedulable=True), pvc(HOME), alice("", "old-1")],
        "app",
        Policy(),
    ),
    "tainted-node": lambda: (
        alice("app", None),
        [node("ml-1", taints=[taint("dedicated", "ml")]), pvc(HOME), alice("", "ml-1")],
        "app",
        Policy(),
    ),
    "premium-node-refused": lambda: (
        alice("dashboard", None),
        [pvc(HOME), alice("", "gpu-1", limits={"nvidia.com/gpu": "1"})],
        "dashboard",
        Policy(premium_node_policy="refuse"),
    ),
    "claim-in-use": lambda: (
        alice("app", None),
        [pvc(HOME, modes=["ReadWriteOncePod"]), alice("")],
        "app",
        Policy(),
    ),
    "split-attachment": lambda: (
        alice("app", None),
        [pvc(HOME), alice("", "cpu-1"), alice("other", "gpu-1")],
        "app",
        Policy(),
    ),
    "volume-still-detaching": lambda: (
        gpu_lab(""),
        [pvc(HOME), volume_attachment(f"pv-{HOME}", "cpu-1")],
        "",
        Policy(),
    ),
}


@pytest.mark.parametrize(
    "test_variation_id, expect_patterns",
    [
        (
            "gpu-lab-blocked-by-app",
            [
                r"^Your default server cannot start",
                r"nebari\.dev/node-type=gpu",
                r"needs a GPU node \(nvidia\.com/gpu\); node cpu-1\b.* has none",
                r"in use by 'pandas-app'",
                r"'pandas-app' uses your home folder.*stop it",
                r"choose a profile",
            ],
        ),
        (
            "named-server-blocked-by-default-server",
            [
                r"^Your server 'gpu-lab' cannot start",
                r"in use by your default server",
                r"your default server (uses|is using) your home folder.*stop it",
            ],
        ),
        (
            "capacity-cap",
            [
                r"^Your server 'big-app' cannot start",
                r"needs 2 CPU but node cpu-1\b.* has only 1 CPU free",
                r"your default server (uses|is using) your home folder.*stop it",
            ],
        ),
        ("cordoned-node", [r"node old-1\b.* cordoned"]),
        ("tainted-node", [r"node ml-1\b.* reserved \(dedicated=ml:NoSchedule\)"]),
        (
            "premium-node-refused",
            [
                r"node gpu-1\b.* is a GPU node",
                r"your default server (uses|is using) your home folder.*stop it",
                r"a GPU profile",
            ],
        ),
        (
            "claim-in-use",
            [
                rf"{HOME}\b.* only one server at a time",
                r"your default server (uses|is using) your home folder.*stop it",
            ],
        ),
        (
            "split-attachment",
            [r"more than one node \(cpu-1 and gpu-1\)", r"ask your administrator"],
        ),
        ("volume-still-detaching", [r"try again in a minute"]),
    ],
)
def test_refusal_says_which_server_why_and_what_to_do(test_variation_id, expect_patterns):
    new_pod, objects, server, policy = SCENARIOS[test_variation_id]()
    text, html = texts(new_pod, *objects, server=server, policy=policy)
    for pattern in expect_patterns:
        assert re.search(pattern, text, re.I), (pattern, text)
    # Python's None and empty lists must never reach a person.
    assert "None" not in text
    assert "[]" not in text
    assert html.startswith('<div class="colocate-message"') and "cannot start" in html


# --------------------------------------------------------------------------------------------------
# never another user's pods or servers


BOB_SERVER = "secret-project"


def bob(server: str = BOB_SERVER, claims=("team-data",), node_name="cpu-1") -> dict:
    return pod(
        f"jupyter-bob--{server}",
        claims=claims,
        node_name=node_name,
        phase="Running",
        user="bob",
        server=server,
    )


@pytest.mark.parametrize(
    "test_variation_id, new_pod, objects",
    [
        (
            "shared-claim-held-only-by-bob",
            gpu_lab("", claims=["team-data"]),
            [pvc("team-data"), bob()],
        ),
        (
            "shared-claim-held-by-bob-and-alice",
            gpu_lab("", claims=[HOME, "team-data"]),
            [pvc(HOME), pvc("team-data"), bob(), alice("pandas-app")],
        ),
        (
            "shared-rwop-claim-in-use-by-bob",
            alice("app", None, claims=["team-data"]),
            [pvc("team-data", modes=["ReadWriteOncePod"]), bob()],
        ),
        (
            "shared-claim-split-across-bob-and-alice",
            alice("app", None, claims=["team-data"]),
            [pvc("team-data"), bob(node_name="gpu-1"), alice("pandas-app", claims=["team-data"])],
        ),
        (
            "bob-without-annotations-found-by-label",
            gpu_lab("", claims=["team-data"]),
            [pvc("team-data"), {**bob(), "metadata": {**bob()["metadata"], "annotations": {}}}],
        ),
    ],
)
def test_refusal_never_names_another_users_pods_or_servers(test_variation_id, new_pod, objects):
    decision = refusal(new_pod, *objects)
    assert "jupyter-bob--secret-project" in decision.holders  # bob really holds it
    args = {"username": "alice", "server_name": "", "user_label": "alice"}
    text = messages.user_message(decision, new_pod, **args)
    html = messages.user_html(decision, new_pod, **args)
    for output in (text, html):
        assert "bob" not in output.lower()
        assert BOB_SERVER not in output
    assert re.search(r"other users?", text)


@pytest.mark.parametrize(
    "test_variation_id, new_pod, objects, has_profiles, expect_advice",
    [
        (
            "held-by-alices-app-and-bobs-server",
            gpu_lab("", claims=["team-data"]),
            [pvc("team-data"), bob(), alice("pandas-app", claims=["team-data"])],
            True,
            "Choose a profile without a GPU, or ask your administrator.",
        ),
        (
            "held-by-two-other-users-only",
            gpu_lab("", claims=["team-data"]),
            [pvc("team-data"), bob(), bob("other-project")],
            True,
            "Choose a profile without a GPU, or ask your administrator.",
        ),
        (
            "on-a-hub-without-profiles",
            gpu_lab("", claims=["team-data"]),
            [pvc("team-data"), bob(), alice("pandas-app", claims=["team-data"])],
            False,
            "Please ask your administrator.",
        ),
        (
            "readwriteoncepod-in-use-by-bob",
            alice("app", None, claims=["team-data"]),
            [pvc("team-data", modes=["ReadWriteOncePod"]), bob()],
            True,
            "Please ask your administrator.",
        ),
    ],
)
def test_advice_for_a_volume_other_users_servers_hold_is_what_can_help(
    test_variation_id, new_pod, objects, has_profiles, expect_advice
):
    decision = refusal(new_pod, *objects)
    args = {
        "username": "alice",
        "server_name": "",
        "user_label": "alice",
        "has_profiles": has_profiles,
        "display_names": {"pandas-app": "Pandas App"},
    }
    text = messages.user_message(decision, new_pod, **args)
    html = messages.user_html(decision, new_pod, **args)
    for output in (text, html.replace("&#x27;", "'")):
        assert expect_advice in output
        assert "stop" not in output.lower()


def test_a_holder_of_another_user_is_not_listed_as_yours():
    decision = refusal(gpu_lab("", claims=["team-data"]), pvc("team-data"), bob())
    assert messages.own_servers(decision, "alice", "alice") == []


# --------------------------------------------------------------------------------------------------
# HTML


@pytest.mark.parametrize(
    "test_variation_id, refused_server, holder_server",
    [
        ("refused-server-name", XSS, "pandas-app"),
        ("holder-server-name", "gpu-lab", XSS),
    ],
)
def test_html_escapes_user_controlled_server_names(
    test_variation_id, refused_server, holder_server
):
    new_pod = gpu_lab(refused_server)
    _, html = texts(new_pod, pvc(HOME), alice(holder_server), server=refused_server)
    assert "<img" not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html


def test_plain_text_keeps_the_server_name_as_typed():
    text, _ = texts(gpu_lab(XSS), pvc(HOME), alice("pandas-app"), server=XSS)
    assert f"Your server '{XSS}' cannot start" in text


@pytest.mark.parametrize(
    "test_variation_id, new_pod, objects",
    [
        ("skip", alice("app", None), [pvc(HOME, modes=["ReadWriteMany"]), alice("")]),
        ("colocate", alice("app", None), [pvc(HOME), alice("")]),
    ],
)
def test_no_user_message_unless_refused(test_variation_id, new_pod, objects):
    decision = decide(new_pod, state(*NODES, *objects), Policy())
    args = {"username": "alice", "server_name": "app"}
    assert messages.user_message(decision, new_pod, **args) == ""
    assert messages.user_html(decision, new_pod, **args) == ""


# --------------------------------------------------------------------------------------------------
# operator line


@pytest.mark.parametrize(
    "test_variation_id, expect_fields",
    [
        (
            "gpu-lab-blocked-by-app",
            [
                "verdict=refuse",
                "node=cpu-1",
                "reasons=insufficient:nvidia.com/gpu,node-selector",
                "holders=jupyter-alice--pandas-app",
                "pinned_by=holders",
                f"claims={HOME}",
            ],
        ),
        (
            "split-attachment",
            [
                "verdict=refuse",
                "reasons=split-attachment",
                "holders=jupyter-alice,jupyter-alice--other",
            ],
        ),
        ("volume-still-detaching", ["node=cpu-1", "pinned_by=attachment", "holders=-"]),
    ],
)
def test_operator_line_carries_codes_node_and_holders(test_variation_id, expect_fields):
    new_pod, objects, server, policy = SCENARIOS[test_variation_id]()
    decision = refusal(new_pod, *objects, policy=policy)
    line = messages.operator_line(decision, username="alice", server_name=server)
    assert line.startswith("colocate ")
    assert "\n" not in line
    for expected in expect_fields:
        assert f" {expected} " in f"{line} ", (expected, line)


def test_operator_line_names_warnings_and_unverified_decisions():
    the_state = state(
        pvc(HOME), alice("", "gpu-1", limits={"nvidia.com/gpu": "1"}), node_access=False
    )
    decision = decide(alice("app", None), the_state, Policy())
    line = messages.operator_line(decision, username="alice", server_name="app")
    assert "verdict=colocate" in line
    assert "warnings=premium-node" in line
    assert "verified=false" in line
    assert "not readable" in line


@pytest.mark.parametrize(
    "has_profiles, expect_tail",
    [
        (True, "Stop it, or choose a smaller profile."),
        (False, "Stop it first."),
    ],
)
def test_advice_suggests_a_profile_only_on_a_hub_that_has_profiles(has_profiles, expect_tail):
    from nebari_colocate.placement import Decision

    app = {
        "metadata": {
            "name": "jupyter-alice--pandas-app",
            "annotations": {
                "hub.jupyter.org/username": "alice",
                "hub.jupyter.org/servername": "pandas-app",
            },
        }
    }
    decision = Decision(
        "refuse",
        node="cpu-1",
        reasons=["insufficient:cpu"],
        holder_pods=[app],
        claims=["claim-alice"],
        pinned_by="holders",
    )
    headline = messages.user_headline(
        decision, {"spec": {}}, username="alice", server_name="", has_profiles=has_profiles
    )
    assert headline.endswith(expect_tail)
    html = messages.user_html(
        decision, {"spec": {}}, username="alice", server_name="", has_profiles=has_profiles
    )
    assert ("profile" in html) is has_profiles


# --------------------------------------------------------------------------------------------------
# names the user knows (jhub-apps display names)


@pytest.mark.parametrize(
    "test_variation_id, refused, holder, display_names, expect_subject, expect_holder",
    [
        (
            "app-names-instead-of-slugs",
            "my-dashboard",
            "pandas-app",
            {"my-dashboard": "My Dashboard", "pandas-app": "Pandas App"},
            "Your server 'My Dashboard' cannot start",
            "'Pandas App'",
        ),
        (
            "jhub-apps-calls-the-default-server-jupyterlab",
            "",
            "pandas-app",
            {"": "JupyterLab", "pandas-app": "Pandas App"},
            "Your server 'JupyterLab' cannot start",
            "'Pandas App'",
        ),
        (
            "default-server-holder-as-jupyterlab",
            "my-dashboard",
            "",
            {"": "JupyterLab"},
            "Your server 'my-dashboard' cannot start",
            "'JupyterLab'",
        ),
        (
            "no-display-names-keeps-server-names",
            "my-dashboard",
            "",
            {},
            "Your server 'my-dashboard' cannot start",
            "your default server",
        ),
    ],
)
def test_messages_call_servers_by_the_names_the_user_knows(
    test_variation_id, refused, holder, display_names, expect_subject, expect_holder
):
    new_pod = gpu_lab(refused)
    decision = refusal(new_pod, pvc(HOME), alice(holder))
    args = {"username": "alice", "server_name": refused, "display_names": display_names}
    text = messages.user_message(decision, new_pod, **args)
    html = messages.user_html(decision, new_pod, **args)
    assert text.startswith(expect_subject), text
    assert f"in use by {expect_holder}." in text
    assert f"{expect_holder} uses your home folder".lower() in text.lower()
    assert expect_holder.replace("'", "&#x27;") in html


def test_display_names_are_escaped_in_html():
    new_pod = gpu_lab("my-app")
    decision = refusal(new_pod, pvc(HOME), alice("pandas-app"))
    names = {"my-app": XSS, "pandas-app": f"Pandas {XSS}"}
    args = {"username": "alice", "server_name": "my-app", "display_names": names}
    html = messages.user_html(decision, new_pod, **args)
    text = messages.user_message(decision, new_pod, **args)
    assert "<img" not in html and html.count("&lt;img src=x onerror=alert(1)&gt;") >= 2
    assert XSS in text


def test_display_names_of_other_users_servers_are_never_used():
    new_pod = gpu_lab("", claims=["team-data"])
    decision = refusal(new_pod, pvc("team-data"), bob())
    args = {"username": "alice", "server_name": "", "display_names": {BOB_SERVER: "Bob's Plan"}}
    for output in (
        messages.user_message(decision, new_pod, **args),
        messages.user_html(decision, new_pod, **args),
    ):
        assert "Bob" not in output and BOB_SERVER not in output


def test_event_failure_names_the_server_by_its_display_name():
    verdict = EventVerdict(FAIL, IMAGE_INVALID, "Error: InvalidImageName", causes=(IMAGE_BAD_NAME,))
    text, html = messages.event_failure(verdict, "my-app", {"my-app": "<b>My App</b>"})
    assert text == (
        "Your server '<b>My App</b>' could not start. The software image it needs cannot be "
        "used. Choose a different profile, or ask your administrator. Details: This server "
        "cannot start: its image name is not valid."
    )
    assert "<b>" not in html and "&lt;b&gt;My App&lt;/b&gt;" in html


def test_a_verdict_without_words_still_says_the_server_could_not_start():
    text, _ = messages.event_failure(EventVerdict(FAIL, "a-code-of-tomorrow", "raw"), "")
    assert text == (
        "Your default server could not start. Something went wrong. Please tell your "
        "administrator. Details: The server could not start."
    )


@pytest.mark.parametrize(
    "test_variation_id, event, words, expect",
    [
        ("scheduler-event-in-words", {"reason": "FailedScheduling", "type": "Warning"}, "W", "W"),
        (
            "ordinary-event-as-written",
            {"reason": "Pulling", "type": "Normal", "message": "Pulling image"},
            "W",
            "[Normal] Pulling image",
        ),
        (
            "no-words-the-event-as-written",
            {"reason": "FailedScheduling", "type": "Warning", "message": "0/1 nodes"},
            "",
            "[Warning] 0/1 nodes",
        ),
    ],
)
def test_progress_line_tells_the_classified_events_in_words(
    test_variation_id, event, words, expect
):
    assert messages.progress_line(event, words) == expect


@pytest.mark.parametrize(
    "test_variation_id, resource, free, requested, expect",
    [
        ("one-gpu-free", "nvidia.com/gpu", 1, 2, "it needs 2 GPUs but node gpu-1"),
        ("one-gpu-wanted", "amd.com/gpu", 0, 1, "it needs 1 GPU but node gpu-1"),
        ("cpu-is-a-mass-noun", "cpu", 1000, 2000, "it needs 2 CPU but node gpu-1"),
    ],
)
def test_resource_words_agree_with_their_number(
    test_variation_id, resource, free, requested, expect
):
    shortfall = fit.Shortfall(resource, requested=requested, free=free, allocatable=4000)
    decision = Decision(
        REFUSE,
        node="gpu-1",
        reasons=[f"insufficient:{resource}"],
        fit=fit.FitResult(shortfalls=[shortfall]),
    )
    (sentence,) = messages.reason_sentences(decision, {})
    assert sentence.startswith(expect), sentence
    assert (" 1 GPUs" not in sentence) and (" 2 GPU " not in sentence)


# holders that are not servers, and holders on a node that is gone

BACKUP_JOB = "backup-claim-alice-29381"


def backup_job(**kwargs) -> dict:
    """A Job's pod mounting alice's home: no hub labels or annotations."""
    return pod(
        BACKUP_JOB,
        claims=[HOME],
        node_name="cpu-1",
        phase="Running",
        labels={"job-name": "backup"},
        **kwargs,
    )


def alices_own_job() -> dict:
    """A pod alice started herself (labelled with her name) that is not a server."""
    return pod(
        "alice-dask-worker",
        claims=[HOME],
        node_name="cpu-1",
        phase="Running",
        labels={"hub.jupyter.org/username": "alice", "component": "dask-worker"},
    )


@pytest.mark.parametrize(
    "test_variation_id, holders, expect_present, expect_absent",
    [
        (
            "a-job-pod-is-counted-as-a-pod-that-is-not-a-server",
            [backup_job()],
            ["1 other pod(s) that are not JupyterHub servers", "ask your administrator"],
            [BACKUP_JOB, "other users", "stop the servers"],
        ),
        (
            "the-users-own-non-server-pod-is-named-as-hers",
            [alices_own_job()],
            ["your pod(s) alice-dask-worker (not servers)", "Wait for your other jobs"],
            ["other users", "not JupyterHub servers"],
        ),
        (
            "a-server-and-a-job-pod",
            [alice("pandas-app"), backup_job()],
            [
                "'pandas-app' and others use your home folder",
                "1 other pod(s) that are not JupyterHub servers",
                "Stop it",
            ],
            [BACKUP_JOB, "other users"],
        ),
    ],
)
def test_holders_that_are_not_servers_are_called_what_they_are(
    test_variation_id, holders, expect_present, expect_absent
):
    new_pod = gpu_lab("")
    decision = refusal(new_pod, pvc(HOME), *holders)
    args = {"username": "alice", "server_name": "", "user_label": "alice"}
    text = messages.user_message(decision, new_pod, **args)
    html = messages.user_html(decision, new_pod, **args)
    for fragment in expect_present:
        assert fragment in text
    for fragment in expect_absent:
        assert fragment not in text
        assert fragment not in html


def test_a_holder_on_a_deleted_node_asks_for_an_administrator_not_to_stop_servers():
    gone = alice("pandas-app", node_name="spot-7")
    text, html = texts(alice("app", None), pvc(HOME), gone, server="app")
    assert "node spot-7, which no longer exists" in text
    assert "ask your administrator" in text
    assert "or choose a profile" not in text
    assert "no longer exists" in html


# --------------------------------------------------------------------------------------------------
# a pinned node no profile can fit: cordoned, unreachable, not ready (advice that can work)

UNSCHEDULABLE_TAINT = taint("node.kubernetes.io/unschedulable")
UNREACHABLE = [
    taint("node.kubernetes.io/unreachable"),
    taint("node.kubernetes.io/unreachable", effect="NoExecute"),
]
NOT_READY = [taint("node.kubernetes.io/not-ready", effect="NoExecute")]


@pytest.mark.parametrize(
    "test_variation_id, pinned_node, expect_present, expect_absent",
    [
        (
            # kubectl cordon: spec.unschedulable, and the node lifecycle controller's taint
            "a-cordoned-node-is-cordoned-and-no-profile-is-suggested",
            node("node-a", unschedulable=True, taints=[UNSCHEDULABLE_TAINT]),
            ["Node node-a, where your volume is attached, is cordoned", "Stop it first."],
            ["choose a profile", "reserved", "node.kubernetes.io"],
        ),
        (
            "an-unreachable-node-is-not-responding-never-reserved",
            node("node-a", taints=UNREACHABLE),
            [
                "is not responding",
                "Stop it first.",
                "release the volume from node node-a",
            ],
            ["choose a profile", "reserved", "node.kubernetes.io"],
        ),
        (
            "a-not-ready-node-with-a-workload-taint-names-both",
            node("node-a", taints=[*NOT_READY, taint("dedicated", "ml")]),
            ["is not ready", "reserved (dedicated=ml:NoSchedule)", "ask your administrator"],
            ["choose a profile", "not-ready"],
        ),
        (
            "a-workload-taint-alone-still-suggests-a-profile",
            node("node-a", taints=[taint("dedicated", "ml")]),
            ["reserved (dedicated=ml:NoSchedule)", "or choose another profile"],
            ["administrator"],
        ),
    ],
)
def test_advice_for_a_node_no_profile_can_fit_is_advice_that_can_work(
    test_variation_id, pinned_node, expect_present, expect_absent
):
    new_pod = alice("app", None)
    holder = alice("pandas-app", node_name="node-a")
    text, html = texts(new_pod, pinned_node, pvc(HOME), holder, server="app")
    for fragment in expect_present:
        assert fragment in text, text
    for fragment in expect_absent:
        assert fragment not in text, text
        assert fragment not in html


def _pinned_verdict(fragment: str) -> events.EventVerdict:
    message = (
        f"0/3 nodes are available: {fragment}, 2 node(s) didn't satisfy plugin(s) "
        "[NodeAffinity]. preemption: 0/3 nodes are available: 3 Preemption is not helpful."
    )
    event = {"reason": "FailedScheduling", "type": "Warning", "message": message}
    return events.classify([event], pinned_node="node-a", now=datetime(2026, 1, 1))


@pytest.mark.parametrize(
    "test_variation_id, fragment, expect_present, expect_absent",
    [
        (
            "cordoned",
            "1 node(s) were unschedulable",
            ["cordoned", "Stop your other servers."],
            ["choose a profile"],
        ),
        (
            "unreachable-named-by-an-older-scheduler",
            "1 node(s) had untolerated taint {node.kubernetes.io/unreachable: }",
            ["not responding", "If it still cannot start in a few minutes, ask your administrator"],
            ["choose a profile", "reserved"],
        ),
        (
            "a-workload-taint",
            "1 node(s) had untolerated taint {dedicated: ml}",
            ["reserved by a taint", "or choose another profile"],
            [],
        ),
    ],
)
def test_a_pinned_spawn_ended_by_a_node_state_is_not_told_to_choose_a_profile(
    test_variation_id, fragment, expect_present, expect_absent
):
    text = messages.event_words(_pinned_verdict(fragment))
    for words in expect_present:
        assert words in text, text
    for words in expect_absent:
        assert words not in text, text


# --------------------------------------------------------------------------------------------------
# the progress stream: JupyterHub sends every field of it to the browser

OWN_PODS = ("jupyter-alice--gpu-lab", "jupyter-alice")


@pytest.mark.parametrize(
    "test_variation_id, event, other_pods, expect_message, expect_absent",
    [
        (
            "multi-attach-names-another-users-server",
            {
                "reason": "FailedAttachVolume",
                "message": 'Multi-Attach error for volume "pv-1" Volume is already used by '
                "pod(s) jupyter-bob--secret-project",
            },
            (),
            'Multi-Attach error for volume "pv-1" Volume is already used by pod(s) (another pod)',
            ["bob", "secret-project"],
        ),
        (
            "waiting-for-detach-keeps-the-users-own-pod-and-hides-the-rest",
            {
                "reason": "FailedAttachVolume",
                "message": 'Waiting for detach for volume "pv-1" Volume is already used by '
                "pod(s) jupyter-alice, backup-29123-x7k2p, jupyter-bob and 2 pod(s) in "
                "different namespaces",
            },
            (),
            'Waiting for detach for volume "pv-1" Volume is already used by pod(s) '
            "jupyter-alice, (another pod), (another pod) and 2 pod(s) in different namespaces",
            ["bob", "backup"],
        ),
        (
            "a-known-pod-name-anywhere-in-a-message",
            {"reason": "Preempted", "message": "Preempted by jupyter-bob on node cpu-1."},
            ("jupyter-bob",),
            "Preempted by (another pod) on node cpu-1.",
            ["bob"],
        ),
        (
            "a-name-is-replaced-only-as-a-whole-word",
            {"reason": "Pulling", "message": 'Pulling image "quay.io/jupyter-bob-image:1"'},
            ("jupyter-bob",),
            'Pulling image "quay.io/jupyter-bob-image:1"',
            [],
        ),
        (
            "events-k8s-io-note-and-the-related-preemptor",
            {
                "reason": "Preempted",
                "message": "",
                "note": "Preempted by pod 1234 on node cpu-1",
                "related": {"kind": "Pod", "name": "jupyter-bob", "namespace": "jhub"},
            },
            ("jupyter-bob",),
            "",
            ["bob", "related"],
        ),
    ],
)
def test_the_progress_stream_never_names_another_users_pods(
    test_variation_id, event, other_pods, expect_message, expect_absent
):
    shown = messages.browser_event(event, OWN_PODS, other_pods)
    assert shown["message"] == expect_message
    line = messages.progress_line(shown, "")
    for words in expect_absent:
        # every field, as JupyterHub serialises the progress event for the browser
        assert words not in json.dumps(shown), shown
        assert words not in line
    assert event["message"] == expect_message or event != shown  # a copy; the cache is untouched


def test_the_progress_stream_keeps_the_users_own_pod_as_related():
    event = {"reason": "X", "message": "m", "related": {"kind": "Pod", "name": "jupyter-alice"}}
    assert messages.browser_event(event, OWN_PODS)["related"] == event["related"]


# --------------------------------------------------------------------------------------------------
# storage that is not there: an operator must fix it, no profile helps

UNBOUND_CLAIM = (
    "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/3 "
    "nodes are available: 3 Preemption is not helpful for scheduling."
)


# kube-scheduler v1.37.2's own text for a home claim whose StorageClass does not exist
# (tests/cluster/test_words_on_real_events.py), no preemption part.
UNBOUND_CLAIM_V1_37 = (
    "0/2 nodes are available: pod has unbound immediate PersistentVolumeClaims. not found"
)


@pytest.mark.parametrize("message", [UNBOUND_CLAIM, UNBOUND_CLAIM_V1_37])
@pytest.mark.parametrize(
    "test_variation_id, pinned_node",
    [("not-pinned", None), ("pinned-to-the-home-node", "node-a")],
)
def test_a_claim_no_one_provides_says_the_storage_is_not_available(
    test_variation_id, pinned_node, message
):
    event = {
        "reason": "FailedScheduling",
        "type": "Warning",
        "message": message,
        "firstTimestamp": "2026-01-01T00:00:00Z",
        "lastTimestamp": "2026-01-01T00:01:01Z",
    }
    verdict = events.classify([event], pinned_node=pinned_node, now=datetime(2026, 1, 1, 0, 1, 1))
    assert verdict.action == events.FAIL
    text = messages.event_words(verdict)
    assert "storage it asks for is not available" in text
    assert "tell your administrator" in text
    assert "smaller profile" not in text
    assert "choose a profile" not in text.lower()


@pytest.mark.parametrize("message", [UNBOUND_CLAIM, UNBOUND_CLAIM_V1_37])
def test_a_claim_no_one_provides_yet_is_waited_for_as_storage_not_as_a_node(message):
    # Within the grace: a new volume may take a minute to be provided; no node is missing.
    event = {
        "reason": "FailedScheduling",
        "type": "Warning",
        "message": message,
        "firstTimestamp": "2026-01-01T00:00:00Z",
        "lastTimestamp": "2026-01-01T00:00:10Z",
    }
    verdict = events.classify([event], pinned_node=None, now=datetime(2026, 1, 1, 0, 0, 10))
    assert verdict.code == events.NO_NODE_YET
    assert messages.event_text(verdict) == "Waiting for the storage of this server"


# --------------------------------------------------------------------------------------------------
# the way out, in words (docs/decisions.md, "The way out")


@pytest.mark.parametrize(
    "test_variation_id, stop, start, display_names, expect",
    [
        (
            "app-then-jupyterlab",
            ("pandas-app",),
            "",
            {"": "JupyterLab", "pandas-app": "Pandas App"},
            "Stop 'Pandas App' and start 'JupyterLab'.",
        ),
        (
            "two-servers-by-server-name",
            ("app-a", "app-b"),
            "gpu-lab",
            {},
            "Stop 'app-a' and 'app-b' and start 'gpu-lab'.",
        ),
        (
            "the-default-server-without-a-display-name",
            ("",),
            "gpu-lab",
            {},
            "Stop your default server and start 'gpu-lab'.",
        ),
    ],
)
def test_the_way_out_reads_with_the_names_the_user_knows(
    test_variation_id, stop, start, display_names, expect
):
    from nebari_colocate.wayout import WayOut

    assert messages.way_out_sentence(WayOut(stop, start), display_names) == expect


@pytest.mark.parametrize(
    "test_variation_id, new_pod, objects, server, display_names, expect_sentence",
    [
        (
            "gpu-lab-blocked-by-an-app",
            gpu_lab(""),
            [pvc(HOME), alice("pandas-app")],
            "",
            {"": "JupyterLab", "pandas-app": "Pandas App"},
            "Stop 'Pandas App' and start 'JupyterLab'",
        ),
        (
            "no-way-out-when-a-job-holds-the-home",
            gpu_lab(""),
            [pvc(HOME), pod("etl-job", claims=(HOME,), node_name="cpu-1", phase="Running")],
            "",
            {"": "JupyterLab"},
            None,
        ),
    ],
)
def test_a_refusal_with_a_way_out_says_it(
    test_variation_id, new_pod, objects, server, display_names, expect_sentence
):
    names = display_names
    decision = refusal(new_pod, *objects)
    args = {"username": "alice", "server_name": server, "display_names": display_names}
    text = messages.user_message(decision, new_pod, **args)
    button = ""
    if decision.way_out is not None:
        button = messages.way_out_form_html(decision.way_out, action="/x", display_names=names)
    html = messages.user_html(decision, new_pod, button=button, **args)
    if expect_sentence is None:
        assert decision.way_out is None and "colocate-way-out" not in html
    else:
        # the text says the stop once; the page leaves it to the button, said once
        assert text.count("Stop it") == 1, text
        escaped = expect_sentence.replace("'", "&#x27;")
        assert html.count(escaped) == 1 and html.count("colocate-way-out-button") == 1, html
        headline = html.split('class="colocate-headline">')[1].split("</div>")[0]
        assert "Stop" not in headline


def test_the_way_out_escapes_display_names_in_html():
    new_pod = gpu_lab("my-app")
    decision = refusal(new_pod, pvc(HOME), alice("pandas-app"))
    names = {"my-app": XSS, "pandas-app": f"Pandas {XSS}"}
    args = {"username": "alice", "server_name": "my-app", "display_names": names}
    assert decision.way_out is not None
    button = messages.way_out_form_html(decision.way_out, action="/x", display_names=names)
    html = messages.user_html(decision, new_pod, button=button, **args)
    way_out = html.split('class="colocate-way-out-form"')[1].split("</form>")[0]
    assert "<img" not in html and way_out.count("&lt;img src=x onerror=alert(1)&gt;") >= 2


@pytest.mark.parametrize(
    "test_variation_id, outcome, words, expect",
    [
        ("forbidden", "forbidden", {}, "You are not allowed to stop and start these servers."),
        ("stale", "stale", {}, "Nothing was stopped: what blocks 'JupyterLab' has changed"),
        ("busy", "busy", {}, "Nothing was stopped: another way out of yours is under way."),
        ("stop-failed", "stop-failed", {}, "'Pandas App' did not stop, so 'JupyterLab' was not"),
        (
            "release-timeout",
            "release-timeout",
            {"seconds": 120.0},
            "'Pandas App' stopped, but your home folder was not freed within 120 seconds",
        ),
        (
            "start-failed-with-the-new-reason",
            "start-failed",
            {"detail": "Your default server cannot start: a new reason."},
            "'Pandas App' stopped, but 'JupyterLab' did not start. Your default server cannot",
        ),
    ],
)
def test_a_way_out_that_stops_part_way_says_so(test_variation_id, outcome, words, expect):
    names = {"": "JupyterLab", "pandas-app": "Pandas App"}
    text = messages.way_out_failed(
        outcome, start="", stop=["pandas-app"], display_names=names, **words
    )
    assert expect in text, text


def test_the_way_out_failure_page_escapes_display_names():
    names = {"": XSS, "pandas-app": f"Pandas {XSS}"}
    page = messages.way_out_failed_html(
        "release-timeout", start="", stop=["pandas-app"], display_names=names, seconds=5
    )
    assert "<img" not in page and page.count("&lt;img src=x onerror=alert(1)&gt;") == 2


# every reason code has its words (as every event code has: tests/unit/test_events.py)


def _refused_for(code: str) -> Decision:
    if code == fit.INSUFFICIENT_ANY:  # one code per resource: a known one and an unknown one
        code = fit.insufficient("example.com/fpga")
    return Decision(REFUSE, node="cpu-1", reasons=[code], claims=[HOME], busy_claims=[HOME])


@pytest.mark.parametrize("code", REASON_CODES)
def test_every_reason_code_has_a_sentence_of_its_own(code):
    sentences = messages.reason_sentences(_refused_for(code), pod("new", claims=[HOME]))
    assert sentences, code
    assert all(s.strip() for s in sentences), code
    assert not any("the check refused it" in s for s in sentences), f"{code} has no words"


def test_a_code_without_words_still_says_something_rather_than_an_empty_reason():
    decision = Decision(REFUSE, node="cpu-1", reasons=["a-code-from-the-future"])
    text = messages.user_message(decision, {}, username="alice", server_name="")
    assert "cannot start: ." not in text
    assert "a-code-from-the-future" in text


def test_the_default_server_has_one_name_in_every_sentence():
    assert messages.server_label("") == f"your {messages.DEFAULT_SERVER}"
    assert messages.subject("") == f"Your {messages.DEFAULT_SERVER}"
    assert messages.subject("", {"": "JupyterLab"}) == "Your server 'JupyterLab'"
    assert messages.server_display("") == messages.DEFAULT_SERVER_CELL


def test_holder_facts_name_the_users_own_and_count_everything_else():
    holders = [
        alice("", "cpu-1"),
        alice("app", "cpu-1"),
        alices_own_job(),
        pod("jupyter-bob", claims=[HOME], node_name="cpu-1", phase="Running", user="bob"),
        backup_job(),
    ]
    decision = Decision(REFUSE, node="cpu-1", reasons=["taint"], holder_pods=holders)
    facts = messages.holder_facts(decision, "alice", "alice")
    assert facts == messages.HolderFacts(["", "app"], ["alice-dask-worker"], 1, 1)


def test_every_node_state_has_words_as_a_reason_and_as_a_scheduler_fragment():
    states = set(fit.NODE_STATE_TAINTS.values())  # every state a node's taints tell
    assert set(messages._NODE_STATE_WORDS) == states
    assert set(messages._NODE_STATE_FRAGMENT_WORDS) == states


def test_every_karpenter_cause_and_pull_cause_has_words():
    karpenter = {v for k, v in vars(events).items() if k.startswith("KARPENTER_")}
    causes = {code for _, code in autoscaler_events._KARPENTER_CAUSES}
    assert causes <= karpenter
    assert {code for code, _ in messages._KARPENTER_CAUSE_WORDS} == causes
    assert set(messages._PULL_WORDS) == {events.PULL_NOT_FOUND, events.PULL_DENIED}
