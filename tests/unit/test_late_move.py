"""Fail fast's late refusal offers the move of the whole set (docs/failure-modes.md, mode 3): the
check said 'big' fits cpu-1, another pod took the room there before its pod was created, and
the scheduler's word ended the spawn (``unschedulable-pinned``).  One row per case of the move
(``late_move.late_move``), then its words, its HTML and what the move's button re-checks, as
the check's refusal has them."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any, NamedTuple

import pytest

from nebari_colocate import fail_fast, messages, refusing
from nebari_colocate.events import (
    FAIL,
    FRAGMENT_INSUFFICIENT,
    MULTI_ATTACH,
    UNSCHEDULABLE_PINNED,
    EventVerdict,
    Fragment,
    classify,
)
from nebari_colocate.late_move import late_move, room_reasons
from nebari_colocate.placement import Decision, Policy, decide
from nebari_colocate.refusal import Refusal, kept
from nebari_colocate.setmove import Move
from nebari_colocate.wayout import WayOut
from tests.support.builders import gpu_node, name_is, node, pod, pvc, required_affinity, state, term

from .test_events import T0, scheduler
from .test_setmove import FULL_CPU1, HOME, KARPENTER, SET, new, other, server

PINNED = required_affinity(term(fields=[name_is("cpu-1")]))
#: what kube-scheduler says of a pod pinned to a full cpu-1, with one other node
NODE_FULL = (
    "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) didn't satisfy plugin(s) "
    "[NodeAffinity]. preemption: 0/2 nodes are available: 1 No preemption victims found for "
    "incoming pod, 1 Preemption is not helpful for scheduling."
)
CPU = Fragment(1, FRAGMENT_INSUFFICIENT, "Insufficient cpu", "cpu")
GPU = Fragment(1, FRAGMENT_INSUFFICIENT, "Insufficient nvidia.com/gpu", "nvidia.com/gpu")
PODS = Fragment(1, "too-many-pods", "Too many pods")
CORDONED = Fragment(1, "cordoned", "node(s) were unschedulable", node_state="cordoned")
STOP_BOTH = WayOut(("", "pandas-app"), "big")
TO_CPU2 = Move(("", "pandas-app"), "big", "cpu-2")


def late(*fragments: Fragment, way_out: WayOut | None = STOP_BOTH, code=UNSCHEDULABLE_PINNED):
    """The verdict that ends 'big''s spawn, with the way out that stops every holder."""
    return EventVerdict(FAIL, code, node="cpu-1", fragments=fragments, way_out=way_out)


def pinned_big(cpu: str = "2", **kwargs: Any) -> dict:
    """'big' as created: pinned to cpu-1 by the check, not bound."""
    return new(cpu=cpu, affinity=PINNED, **kwargs)


class Row(NamedTuple):
    verdict: EventVerdict
    objects: list[dict]
    want: Move | None
    pod: dict = pinned_big()


JOB = pod("backup-alice-x7k2p", claims=[HOME], node_name="cpu-1", phase="Running")
GPU_LAB = pod(
    "jupyter-alice--big",
    user="alice",
    server="big",
    claims=[HOME],
    affinity=PINNED,
    requests={"cpu": "1", "nvidia.com/gpu": "1"},
)

ROWS = [
    pytest.param(
        Row(late(CPU), [*FULL_CPU1, *SET, node("cpu-2")], TO_CPU2),
        id="the-pinned-node-filled-up-the-set-moves-to-a-node-with-room",
    ),
    pytest.param(
        Row(late(PODS), [*FULL_CPU1, *SET, node("cpu-2")], TO_CPU2),
        id="too-many-pods-is-lack-of-room-too",
    ),
    pytest.param(
        Row(late(CPU), [*FULL_CPU1, *SET, node("cpu-2", allocatable={"cpu": "3"})], None),
        id="no-node-holds-the-set-and-no-autoscaler-no-move",
    ),
    pytest.param(
        Row(
            late(CPU),
            [node("cpu-1", labels=KARPENTER), other("bob-1", "cpu-1", cpu="2"), *SET],
            Move(("", "pandas-app"), "big", None),
        ),
        id="no-node-holds-the-set-but-karpenter-adds-one",
    ),
    pytest.param(
        Row(late(GPU), [node("cpu-1", labels=KARPENTER), *SET, gpu_node("gpu-2")], None, GPU_LAB),
        id="a-gpu-mixed-set-gets-no-move",
    ),
    pytest.param(
        Row(late(CPU), [*FULL_CPU1, *SET, JOB, node("cpu-2")], None),
        id="a-set-with-a-holder-that-is-no-server-gets-none",
    ),
    pytest.param(
        Row(late(CPU), [*FULL_CPU1, *SET, server("dash", cpu="0"), node("cpu-2")], None),
        id="a-server-started-since-the-way-out-was-judged-gets-none",
    ),
    pytest.param(
        Row(late(CORDONED), [*FULL_CPU1, *SET, node("cpu-2")], None),
        id="a-cordoned-pinned-node-is-no-lack-of-room-no-move",
    ),
    pytest.param(
        Row(late(CPU, CORDONED), [*FULL_CPU1, *SET, node("cpu-2")], None),
        id="room-and-something-else-no-move",
    ),
    pytest.param(
        Row(late(), [*FULL_CPU1, *SET, node("cpu-2")], None),
        id="no-reason-read-no-move",
    ),
    pytest.param(
        Row(late(CPU, way_out=None), [*FULL_CPU1, *SET, node("cpu-2")], None),
        id="without-a-way-out-no-move",
    ),
    pytest.param(
        Row(late(CPU, code=MULTI_ATTACH), [*FULL_CPU1, *SET, node("cpu-2")], None),
        id="another-verdict-no-move",
    ),
]


@pytest.mark.parametrize("row", ROWS)
def test_the_late_refusal_offers_the_move_of_the_whole_set_for_lack_of_room_only(row: Row):
    snapshot = state(pvc(HOME), *row.objects, row.pod)
    got = late_move(
        row.verdict,
        row.pod,
        snapshot,
        claims=[HOME],
        policy=Policy(),
        username="alice",
        label_value="alice",
    )
    move = got.way_out.move if got.way_out is not None else None
    assert move == row.want
    offered = WayOut(STOP_BOTH.stop, STOP_BOTH.start, move)
    assert got.way_out == (row.verdict.way_out if move is None else offered)
    assert got.fragments == row.verdict.fragments and got.code == row.verdict.code


def test_the_schedulers_words_are_read_as_the_checks_reason_codes():
    assert room_reasons([CPU, GPU, PODS, CORDONED, Fragment(1, None, "?")]) == [
        "insufficient:cpu",
        "insufficient:nvidia.com/gpu",
        "too-many-pods",
        "cordoned",
        "",
    ]


def test_the_real_schedulers_word_on_a_full_pinned_node_offers_the_move():
    verdict = classify(
        [scheduler(NODE_FULL, 0)],
        pinned_node="cpu-1",
        now=T0,
        server_name="big",
        own_server_names={"jupyter-alice": "", "jupyter-alice--pandas-app": "pandas-app"},
        pinned_holders=("jupyter-alice", "jupyter-alice--pandas-app"),
    )
    assert verdict.way_out == STOP_BOTH
    offered = late_move(
        verdict,
        pinned_big(),
        state(pvc(HOME), *FULL_CPU1, *SET, node("cpu-2")),
        claims=[HOME],
        policy=Policy(),
        username="alice",
        label_value="alice",
    )
    assert offered.way_out.as_json()["move"] == {
        "restart": ["", "pandas-app"],
        "start": "big",
        "node": "cpu-2",
        "new_node": False,
    }


# --------------------------------------------------------------------------------------------------
# the words, the HTML, the progress stream and the button's re-check: as the check's refusal


class Spawner:
    """What the refusals' words read of a spawner, and the live view's state."""

    log = logging.getLogger("test")
    user = SimpleNamespace(name="alice")
    name = "big"
    profile_list = ()
    hub = SimpleNamespace(base_url="/hub/")
    colocation_label_value = "alice"
    colocation_failure: Refusal | None = None

    def __init__(self, objects: list[dict]) -> None:
        self.objects = objects

    def server_display_names(self) -> dict[str, str]:
        return {}

    def way_out_url(self) -> str:
        return refusing.way_out_url(self)

    def whole_set_state(self, pod: dict):
        return state(pvc(HOME), *self.objects, pod)

    def colocation_policy(self) -> Policy:
        return Policy()


MOVE_SENTENCE = (
    "Or: Restart your default server and 'pandas-app' together on a machine with room for all "
    "three, then start 'big'. Running kernels restart."
)


def _move_form(shown: str) -> str:
    start = shown.index('<form class="colocate-way-out-form colocate-set-move-form"')
    return shown[start : shown.index("</form>", start) + len("</form>")]


def test_the_late_refusal_shows_the_moves_button_and_note_as_the_checks_refusal_does():
    objects = [*FULL_CPU1, *SET, node("cpu-2")]
    spawner = Spawner(objects)
    verdict = fail_fast.offer_late_move(spawner, late(CPU), pinned_big(), [HOME])
    text, shown = fail_fast.refusal_words(spawner, verdict)

    # the check's refusal of the same server, on the same cluster with bob's pod already there
    decision = decide(new(), state(pvc(HOME), *objects), Policy())
    refusing.offer_move(spawner, decision, new())
    check = refusing.refused(spawner, decision, new())

    assert MOVE_SENTENCE in text and MOVE_SENTENCE in check.jupyterhub_message
    assert text.index("Or: ") < text.index("Details:")
    assert _move_form(shown) == _move_form(check.jupyterhub_html_message)
    form = _move_form(shown)
    assert 'action="/hub/colocate/move-set/alice/big"' in form
    assert '<input type="hidden" name="restart" value="">' in form
    assert '<input type="hidden" name="restart" value="pandas-app">' in form
    assert '<input type="hidden" name="node" value="cpu-2">' in form
    assert '<div class="colocate-set-move-note">Running kernels restart.</div>' in form
    assert shown.index('class="colocate-way-out-form"') < shown.index(form)  # the stop first
    assert "&quot;move&quot;: {&quot;restart&quot;: [&quot;&quot;, &quot;pandas-app&quot;]" in shown


def test_without_a_move_the_late_refusals_words_are_unchanged():
    spawner = Spawner([*FULL_CPU1, *SET])  # no node with room
    verdict = fail_fast.offer_late_move(spawner, late(CPU), pinned_big(), [HOME])
    assert verdict == late(CPU)
    words = fail_fast.refusal_words(spawner, verdict)
    assert words == messages.event_refusal(verdict, "big", {}, action=spawner.way_out_url())
    assert "Or:" not in words[0] and "colocate-set-move-form" not in words[1]


def test_a_view_that_cannot_tell_or_fails_leaves_the_refusal_without_its_move(caplog):
    class Blind(Spawner):
        def whole_set_state(self, pod):
            return None

    class Broken(Spawner):
        def whole_set_state(self, pod):
            raise RuntimeError("boom")

    assert fail_fast.offer_late_move(Blind([]), late(CPU), pinned_big(), [HOME]) == late(CPU)
    assert fail_fast.offer_late_move(Broken([]), late(CPU), pinned_big(), [HOME]) == late(CPU)
    assert "the move of the whole set could not be judged" in caplog.text


def test_the_kept_late_refusal_has_what_the_moves_button_rechecks_and_the_stream_carries_it():
    objects = [*FULL_CPU1, *SET, node("cpu-2")]
    spawner = Spawner(objects)
    verdict = fail_fast.offer_late_move(spawner, late(CPU), pinned_big(), [HOME])
    text, shown = fail_fast.refusal_words(spawner, verdict)
    placed = Decision("colocate", node="cpu-1", claims=[HOME], holder_pods=list(SET))
    refusal = kept(Refusal(text, shown, "log", event_verdict=verdict), placed, lambda c: SET)
    # what set_move_step._recheck reads: the move, and blockers whose servers are its restart
    assert refusal.way_out.move == Move(("", "pandas-app"), "big", "cpu-2")
    assert refusal.blockers.servers == refusal.way_out.move.restart
    assert refusal.blockers.claims == (HOME,) and refusal.blockers.node == "cpu-1"

    # the progress stream: the refusal's own words and way_out once the spawn is ended...
    spawner.colocation_failure = refusal
    said = fail_fast.verdict_said(spawner, late(CPU))  # (a verdict judged after the pod went)
    assert said == (text, shown, {"way_out": refusal.way_out_json()})
    assert said[2]["way_out"]["move"]["node"] == "cpu-2"
    # ...and the same words before it is
    spawner.colocation_failure = None
    assert fail_fast.verdict_said(spawner, verdict) == said
