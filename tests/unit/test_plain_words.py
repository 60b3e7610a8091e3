"""The guard over the words a person reads first (docs/surfaces.md, "How the words are
written"): every headline of every code family (the decision's reasons, the event verdicts, the
way out's and the move's outcomes, the storage and scheduler cases, the API's faults) is at most
30 words, reads at grade 9 or below (Flesch-Kincaid, by textstat), uses no Kubernetes word of
:data:`JARGON`, and says the remedy once on each surface.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
import textstat

from nebari_colocate import events, faults, messages
from nebari_colocate.placement import REFUSE
from nebari_colocate.setmove import Move
from nebari_colocate.wayout import StepFacts, WayOut
from tests.support import golden

#: words a data scientist should not have to know: Kubernetes' own (whole words, any case)
JARGON = (
    "node",
    "nodes",
    "pod",
    "pods",
    "PVC",
    "PVCs",
    "claim",
    "claims",
    "affinity",
    "anti-affinity",
    "taint",
    "taints",
    "toleration",
    "tolerate",
    "nodeSelector",
    "selector",
    "label",
    "labels",
    "namespace",
    "scheduler",
    "RWO",
    "RWX",
    "ReadWriteOnce",
    "ReadWriteMany",
    "ReadWriteOncePod",
    "Kubernetes",
    "kubelet",
    "container",
    "cordoned",
    "preemption",
    "autoscaler",
    "NodePool",
    "NodeClaim",
    "Karpenter",
    "volume",
    "attached",
    "mount",
    "manifest",
)
_JARGON = re.compile(r"(?<![\w-])(" + "|".join(map(re.escape, JARGON)) + r")(?![\w-])", re.I)

MAX_WORDS = 30
MAX_GRADE = 9.0
#: server names as jhub-apps users name them (the hostile name is the escape tests' business)
NAMES = {"": "JupyterLab", "pandas-app": "Pandas App", "gpu-lab": "GPU Dash"}


def _refusal_headlines() -> Iterator[tuple[str, str]]:
    new_pod = golden._alice("gpu-lab", None)
    for code in [*golden.REASON_CODES, "a-code-from-the-future"]:
        if code == golden.fit.INSUFFICIENT_ANY:
            continue
        for shared in (True, False):
            for way_out in (True, False):
                decision = golden._refused_for(code, shared=shared, way_out=way_out)
                for names in (None, NAMES):
                    yield (
                        f"{code} shared={shared} way_out={way_out} names={bool(names)}",
                        messages.user_headline(
                            decision,
                            new_pod,
                            username="alice",
                            server_name="gpu-lab",
                            display_names=names,
                        ),
                    )
    for resource in ("cpu", "memory", "nvidia.com/gpu", "example.com/fpga"):
        decision = golden._refused_for(golden.fit.insufficient(resource), shared=False)
        yield resource, messages.user_headline(decision, new_pod, username="alice", server_name="")
    for name, (case_pod, decision, server) in golden._decided().items():
        if server == golden.XSS:
            continue
        for names in (None, NAMES):
            yield (
                f"{name} names={bool(names)}",
                messages.user_headline(
                    decision, case_pod, username="alice", server_name=server, display_names=names
                ),
            )


def _event_headlines() -> Iterator[tuple[str, str]]:
    for name, verdict in golden._verdicts():
        if verdict.image == golden.XSS:
            verdict = replace(verdict, image="quay.io/x/y:1")
        if golden.XSS in verdict.servers:
            verdict = replace(verdict, servers=("", "pandas-app"))
        yield f"{name} progress", messages.event_text(verdict)
        if verdict.action == events.FAIL:
            for server in ("", "pandas-app"):
                headline = messages.event_headline(verdict, server, NAMES)
                yield f"{name} [{server!r}]", headline.text


def _outcome_headlines() -> Iterator[tuple[str, str]]:
    stops = ((), ("pandas-app",), ("", "pandas-app"))
    facts = (
        None,
        StepFacts(stopped=("",), not_stopped=("pandas-app",), why="too-slow"),
        StepFacts(not_stopped=("pandas-app",), why="left-behind"),
        StepFacts(stopped=("pandas-app",), running=("",), not_started=("pandas-app",)),
    )
    for outcome in [*messages.OUTCOME_WORDS, "an-outcome-from-the-future"]:
        for family in ("way_out", "move"):
            for stop in stops:
                for fact in facts:
                    text = messages.outcome_text(
                        family,
                        outcome,
                        stopped=stop,
                        started="gpu-lab",
                        display_names=NAMES,
                        seconds=90.0,
                        facts=fact,
                    )
                    yield f"{family} {outcome} {stop} {fact}", text


def _set_move_headlines() -> Iterator[tuple[str, str]]:
    """The move of the whole set (the second way out): its sentence, its button, every end."""
    facts = (
        None,
        StepFacts(stopped=("",), not_stopped=("pandas-app",), why="too-slow"),
        StepFacts(stopped=("", "pandas-app"), running=("",), not_started=("pandas-app",)),
    )
    for outcome in [*messages.SET_MOVE_WORDS, *messages.OUTCOME_WORDS, "an-outcome-from-later"]:
        for fact in facts if outcome != "stale" else (None,):  # stale: nothing was stopped
            text = messages.set_move_failed(
                outcome,
                start="gpu-lab",
                restart=("", "pandas-app"),
                display_names=NAMES,
                seconds=90.0,
                facts=fact,
            )
            yield f"set-move {outcome} {fact}", text
    for node in ("cpu-2", None):
        for restart in (("pandas-app",), ("", "pandas-app")):
            move = Move(restart=restart, start="gpu-lab", node=node)
            yield f"set-move sentence {restart} {node}", messages.move_sentence(move, NAMES)
            yield f"set-move button {restart} {node}", messages.move_button_label(move, NAMES)
            yield f"set-move busy {restart} {node}", messages.move_busy_label(move, NAMES)


def _other_headlines() -> Iterator[tuple[str, str]]:
    for fault in messages.API_FAULTS:
        yield f"api-fault {fault}", messages.api_fault_message(fault, server_name="pandas-app")
    for servers in (("pandas-app",), ("pandas-app", "")):
        yield f"premium ride {servers}", messages.premium_ride_text(servers, NAMES)
    way_out = WayOut(stop=("", "pandas-app"), start="gpu-lab")
    yield "way out button", messages.way_out_button_label(way_out, NAMES)
    yield "way out busy", messages.way_out_busy_label(way_out, NAMES)


HEADLINES = [
    *_refusal_headlines(),
    *_event_headlines(),
    *_outcome_headlines(),
    *_set_move_headlines(),
    *_other_headlines(),
]


def test_the_guard_reads_every_family():
    families = {case.split()[0] for case, _ in HEADLINES}
    for code in golden.REASON_CODES:
        if code != golden.fit.INSUFFICIENT_ANY:
            assert code in families
    for name, _ in golden._verdicts():
        assert name in families
    assert {"way_out", "move", "set-move", "api-fault", "premium"} <= families
    assert all(text for case, text in HEADLINES if "progress-none" not in case), [
        case for case, text in HEADLINES if not text and "progress-none" not in case
    ]


@pytest.mark.parametrize(("case", "text"), HEADLINES, ids=[c for c, _ in HEADLINES])
def test_every_headline_is_short_plain_and_free_of_jargon(case: str, text: str):
    if not text:
        return
    words = len(text.split())
    assert words <= MAX_WORDS, f"{words} words: {text}"
    grade = textstat.flesch_kincaid_grade(text)
    assert grade <= MAX_GRADE, f"grade {grade}: {text}"
    found = _JARGON.findall(text)
    assert not found, f"jargon {found}: {text}"


def test_the_measures_can_fail():
    long = "Your server cannot start because " + "the machine is very busy and " * 6
    assert len(long.split()) > MAX_WORDS
    hard = (
        "Consequently, the administrative infrastructure necessitates comprehensive "
        "reconfiguration of persistent storage provisioning characteristics."
    )
    assert textstat.flesch_kincaid_grade(hard) > MAX_GRADE
    assert _JARGON.findall("the PVC is bound to node cpu-1") == ["PVC", "node"]
    assert not _JARGON.findall("your home folder is on a machine with no GPU")


# --------------------------------------------------------------------------------------------------
# the remedy once per surface


def _visible(page: str) -> str:
    """The words a person sees before opening Details: no <details>, no tags, no attributes."""
    shown = re.sub(r"<details.*?</details>", " ", page, flags=re.S)
    shown = re.sub(r"<script.*?</script>", " ", shown, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", " ", shown))


def _count(word: str, text: str) -> int:
    return len(re.findall(rf"\b{word}\b", text, flags=re.I))


def _refusal_surfaces() -> Iterator[tuple[str, str, str, bool]]:
    new_pod = golden._alice("gpu-lab", None)
    for code in golden.REASON_CODES:
        if code == golden.fit.INSUFFICIENT_ANY:
            continue
        for shared in (True, False):
            for way_out in (True, False):
                decision = golden._refused_for(code, shared=shared, way_out=way_out)
                args: dict[str, Any] = {
                    "username": "alice",
                    "server_name": "gpu-lab",
                    "display_names": NAMES,
                }
                button = ""
                if decision.way_out is not None:
                    button = messages.way_out_form_html(
                        decision.way_out, action=golden.ACTION, display_names=NAMES
                    )
                page = messages.user_html(decision, new_pod, button=button, **args)
                text = messages.user_message(decision, new_pod, **args)
                yield f"{code} {shared} {way_out}", page, text, bool(button)
    for name, verdict in golden._verdicts():
        if verdict.action != events.FAIL:
            continue
        text, page = messages.event_refusal(verdict, "gpu-lab", NAMES, action=golden.ACTION)
        yield name, page, text, verdict.way_out is not None


SURFACES = list(_refusal_surfaces())


@pytest.mark.parametrize(("case", "page", "text", "button"), SURFACES, ids=[s[0] for s in SURFACES])
def test_the_remedy_is_said_once_on_each_surface(case: str, page: str, text: str, button: bool):
    shown = _visible(page)
    for surface in (shown, text):
        assert _count("stop", surface) <= 1, surface
        assert _count("choose", surface) <= 1, surface
    if button:
        # the button says the stop; the headline above it does not
        assert _count("stop", shown) == 1, shown
        assert page.count("colocate-way-out-button") == 1
    assert "<details" in page or REFUSE not in case
    assert "<details open" not in page
    assert "Details" in page


def test_the_details_hold_the_technical_facts():
    decision = golden._decided()["gpu-lab-blocked-by-app"][1]
    page = messages.user_html(
        decision, golden._gpu_lab(""), username="alice", server_name="", display_names=NAMES
    )
    details = page[page.index("<details") :]
    assert "cpu-1" in details and "nebari.dev/node-type=gpu" in details
    assert "cpu-1" not in _visible(page)


def test_a_fault_code_of_the_api_has_plain_words():
    assert set(messages.API_FAULTS) == set(faults.FAULT_CODES)
