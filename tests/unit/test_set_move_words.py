"""The move of the whole set in words (docs/decisions.md, "The move of the whole set"): the offer
beside the way out, its button (names escaped), and every end part-way, plain and short."""

from __future__ import annotations

import ast
import inspect

import pytest

from nebari_colocate import messages, set_move_step
from nebari_colocate.placement import Policy, decide
from nebari_colocate.setmove import Move
from nebari_colocate.wayout import StepFacts
from tests.support.builders import node, pod, pvc, state

NAMES = {"": "JupyterLab", "pandas-app": "Pandas <App>", "big": 'Big "App"'}
MOVE = Move(("", "pandas-app"), "big", "cpu-2")


@pytest.mark.parametrize(
    "test_variation_id, move, names, expect",
    [
        (
            "onto-an-existing-machine",
            MOVE,
            NAMES,
            "Restart 'JupyterLab' and 'Pandas <App>' together on a machine with room for all "
            "three, then start 'Big \"App\"'. Running kernels restart.",
        ),
        (
            "onto-a-new-machine",
            Move(("pandas-app",), "big", None),
            {},
            "Restart 'pandas-app' together on a new machine with room for both, then start "
            "'big'. Running kernels restart.",
        ),
    ],
)
def test_the_move_is_offered_in_plain_words(test_variation_id, move, names, expect):
    said = messages.move_sentence(move, names)
    assert said == expect, test_variation_id
    assert "cpu-2" not in said and "claim" not in said  # no node or claim in the words


def test_the_move_s_form_escapes_every_name_and_carries_the_set():
    form = messages.move_form_html(
        MOVE, action="/hub/colocate/move-set/a%3Cb/big", display_names=NAMES
    )
    assert "Pandas &lt;App&gt;" in form and "Pandas <App>" not in form
    assert "Big &quot;App&quot;" in form or "Big &#x27;" in form
    assert '<input type="hidden" name="restart" value="">' in form
    assert '<input type="hidden" name="restart" value="pandas-app">' in form
    assert '<input type="hidden" name="node" value="cpu-2">' in form
    assert 'class="colocate-way-out-form colocate-set-move-form"' in form  # armed as the way out
    assert form.count("<form") == 1 and " hidden " in form


def test_a_refusal_for_lack_of_room_says_both_ways_out():
    objects = [
        node("cpu-1"),
        node("cpu-2"),
        pvc("claim-alice"),
        pod(
            "bob", user="bob", server="", node_name="cpu-1", phase="Running", requests={"cpu": "2"}
        ),
        *(
            pod(
                f"jupyter-alice{'--' + n if n else ''}",
                user="alice",
                server=n,
                claims=["claim-alice"],
                node_name="cpu-1",
                phase="Running",
                requests={"cpu": "1"},
            )
            for n in ("", "pandas-app")
        ),
    ]
    new = pod(
        "jupyter-alice--big",
        user="alice",
        server="big",
        claims=["claim-alice"],
        requests={"cpu": "2"},
    )
    decision = decide(new, state(*objects), Policy())
    text = messages.user_message(
        decision, new, username="alice", server_name="big", display_names=NAMES
    )
    assert "use your home folder on a machine without enough free CPU. Stop them, or " in text
    assert (
        "Or: Restart 'JupyterLab' and 'Pandas <App>' together on a machine with room for all "
        "three, then start 'Big \"App\"'. Running kernels restart. Details: "
    ) in text
    assert decision.way_out is not None and decision.way_out.move is not None
    button = messages.way_out_form_html(decision.way_out, action="/w", display_names=NAMES)
    button += messages.move_form_html(decision.way_out.move, action="/m", display_names=NAMES)
    shown = messages.user_html(
        decision, new, username="alice", server_name="big", display_names=NAMES, button=button
    )
    # on the page: the headline, then each way out once, as its button
    headline = shown.split('class="colocate-headline">')[1].split("</div>")[0]
    assert "Stop" not in headline and "Restart" not in headline
    assert shown.count("Restart &#x27;JupyterLab&#x27; and &#x27;Pandas &lt;App&gt;&#x27;") == 1
    assert shown.count("colocate-way-out-button") == 1
    assert shown.count("colocate-set-move-button") == 1


FACTS = StepFacts(stopped=("", "pandas-app"), running=("", "pandas-app"))


@pytest.mark.parametrize(
    "test_variation_id, outcome, kwargs, expect",
    [
        (
            "stale",
            "stale",
            {},
            "Nothing was stopped: your servers or the room for them changed since 'Big \"App\"' "
            "was refused. Start 'Big \"App\"' again to see what can be done now.",
        ),
        (
            "no-room-every-server-runs-again",
            "no-room",
            {"facts": FACTS},
            "No machine had room for all your servers when they started, so nothing was "
            "moved. 'JupyterLab' and 'Pandas <App>' run again. 'Big \"App\"' was not started.",
        ),
        (
            "no-room-one-did-not-start-again",
            "no-room",
            {
                "facts": StepFacts(
                    stopped=("", "pandas-app"), running=("",), not_started=("pandas-app",)
                ),
                "detail": "Your server 'Pandas <App>' cannot start: not enough CPU.",
            },
            "No machine had room for all your servers when they started, so nothing was "
            "moved. 'JupyterLab' runs again. Start 'Pandas <App>' on the home page. "
            "'Big \"App\"' was not started. Your server 'Pandas <App>' cannot start: not enough "
            "CPU.",
        ),
        (
            "stop-failed-the-stopped-one-runs-again",
            "stop-failed",
            {
                "facts": StepFacts(
                    stopped=("",), not_stopped=("pandas-app",), why="too-slow", running=("",)
                )
            },
            "'JupyterLab' stopped, but 'Pandas <App>' did not stop (it took too long), so nothing "
            "was moved. 'JupyterLab' runs again. 'Big \"App\"' was not started.",
        ),
        (
            "release-timeout",
            "release-timeout",
            {"facts": FACTS, "seconds": 120},
            "Your home folder was not freed within 120 seconds, so nothing was moved. 'JupyterLab' "
            "and 'Pandas <App>' run again. 'Big \"App\"' was not started.",
        ),
        (
            "start-failed-after-the-move",
            "start-failed",
            {"facts": FACTS, "detail": "It needs more memory."},
            "Your servers were moved, but 'Big \"App\"' did not start. It needs more memory.",
        ),
        ("busy", "busy", {}, messages.OUTCOME_WORDS["busy"].way_out),
    ],
)
def test_a_move_that_ended_part_way_says_what_it_did(test_variation_id, outcome, kwargs, expect):
    text = messages.set_move_failed(
        outcome, start="big", restart=("", "pandas-app"), display_names=NAMES, **kwargs
    )
    assert text == expect, test_variation_id
    page = messages.set_move_failed_html(
        outcome, start="big", restart=("", "pandas-app"), display_names=NAMES, **kwargs
    )
    assert "Pandas <App>" not in page and 'Big "App"' not in page


def _raised_outcomes() -> set[str]:
    """The outcomes set_move_step ends a move with (its SetMoveFailed calls' second argument)."""
    tree = ast.parse(inspect.getsource(set_move_step))
    found: set[str] = set()
    for call in ast.walk(tree):
        name = getattr(getattr(call, "func", None), "id", None)
        if isinstance(call, ast.Call) and name == "SetMoveFailed":
            found |= {a.id for a in call.args[1:2] if isinstance(a, ast.Name) and a.id.isupper()}
    return found


def test_every_outcome_the_move_ends_in_has_words():
    outcomes = {getattr(set_move_step, n) for n in _raised_outcomes()}
    assert outcomes == {"stale", "release-timeout", "no-room"}, outcomes
    for outcome in outcomes | {"stop-failed", "start-failed", "forbidden", "busy"}:
        text = messages.set_move_failed(outcome, start="big", restart=("a",), facts=FACTS)
        assert text.strip() and f"({outcome})" not in text, outcome
