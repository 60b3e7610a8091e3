"""The words of a way out or a move that stopped part-way: one row per outcome, the exact
sentence a person reads (docs/decisions.md, "The way out"), and a guard that every outcome the
handlers can end in has words of its own."""

# ruff: noqa: E501 - each expected sentence stands on one line, as the person reads it

from __future__ import annotations

import ast
import asyncio
import html
import inspect
import time

import pytest

from nebari_colocate import handlers, messages
from nebari_colocate.wayout import (
    LEFT_BEHIND,
    STILL_RUNNING,
    STOP_ERROR,
    TOO_SLOW,
    StepFacts,
    left_behind,
)
from tests.support import builders

NAMES = {"": "JupyterLab", "pandas-app": "Pandas App", "b": "B <b>"}
SHAPES = {
    # one stopped server, the default one started; two stopped (one of them the default), an
    # app started; nothing named at all
    "one": ({"start": "", "stop": ["pandas-app"]}, {"servers": ["pandas-app"]}),
    "two": ({"start": "pandas-app", "stop": ["", "b"]}, {"servers": ["", "b"]}),
    "none": ({"start": ""}, {}),
}
EXTRAS = {"plain": {}, "detail": {"detail": "Boom: x", "seconds": 120}}


def _words(family: str, outcome: str, shape: str, extra: str) -> str:
    way_out, move = SHAPES[shape]
    names = NAMES if shape != "none" else None
    if family == "way-out":
        return messages.way_out_failed(outcome, display_names=names, **way_out, **EXTRAS[extra])
    return messages.move_failed(outcome, display_names=names, **move, **EXTRAS[extra])


ROWS = [
    pytest.param(
        "way-out",
        "forbidden",
        "one",
        "plain",
        "You are not allowed to stop and start these servers.",
        id="way-out-forbidden-one-plain",
    ),
    pytest.param(
        "move",
        "forbidden",
        "one",
        "plain",
        "You are not allowed to stop and start these servers.",
        id="move-forbidden-one-plain",
    ),
    pytest.param(
        "way-out",
        "stale",
        "one",
        "plain",
        "Nothing was stopped: what blocks 'JupyterLab' has changed since it was refused (a server started or stopped in between). Start 'JupyterLab' again to see what blocks it now.",
        id="way-out-stale-one-plain",
    ),
    pytest.param(
        "move",
        "stale",
        "one",
        "plain",
        "Nothing was stopped: 'Pandas App' no longer keeps that machine running alone. Reload the home page to see what runs now.",
        id="move-stale-one-plain",
    ),
    pytest.param(
        "way-out",
        "stale",
        "two",
        "plain",
        "Nothing was stopped: what blocks 'Pandas App' has changed since it was refused (a server started or stopped in between). Start 'Pandas App' again to see what blocks it now.",
        id="way-out-stale-two-plain",
    ),
    pytest.param(
        "move",
        "stale",
        "two",
        "plain",
        "Nothing was stopped: 'JupyterLab' and 'B <b>' no longer keep that machine running alone. Reload the home page to see what runs now.",
        id="move-stale-two-plain",
    ),
    pytest.param(
        "way-out",
        "busy",
        "one",
        "plain",
        "Nothing was stopped: another way out of yours is under way. Wait for it to end, then try again.",
        id="way-out-busy-one-plain",
    ),
    pytest.param(
        "move",
        "busy",
        "one",
        "plain",
        "Nothing was stopped: another way out or move of yours is under way. Wait for it to end, then try again.",
        id="move-busy-one-plain",
    ),
    pytest.param(
        "way-out",
        "stop-failed",
        "one",
        "plain",
        "'Pandas App' did not stop, so 'JupyterLab' was not started. Stop 'Pandas App' on the home page, then start 'JupyterLab' again.",
        id="way-out-stop-failed-one-plain",
    ),
    pytest.param(
        "move",
        "stop-failed",
        "one",
        "plain",
        "'Pandas App' did not stop. Try the move again in a minute.",
        id="move-stop-failed-one-plain",
    ),
    pytest.param(
        "way-out",
        "stop-failed",
        "two",
        "plain",
        "'JupyterLab' did not stop; 'B <b>' was not stopped, so 'Pandas App' was not started. Stop 'JupyterLab' and 'B <b>' on the home page, then start 'Pandas App' again.",
        id="way-out-stop-failed-two-plain",
    ),
    pytest.param(
        "move",
        "stop-failed",
        "two",
        "plain",
        "'JupyterLab' did not stop; 'B <b>' was not stopped. Try the move again in a minute.",
        id="move-stop-failed-two-plain",
    ),
    pytest.param(
        "way-out",
        "stop-failed",
        "one",
        "detail",
        "'Pandas App' did not stop, so 'JupyterLab' was not started. Stop 'Pandas App' on the home page, then start 'JupyterLab' again.",
        id="way-out-stop-failed-one-detail",
    ),
    pytest.param(
        "move",
        "stop-failed",
        "one",
        "detail",
        "'Pandas App' did not stop. Try the move again in a minute.",
        id="move-stop-failed-one-detail",
    ),
    pytest.param(
        "way-out",
        "stop-failed",
        "two",
        "detail",
        "'JupyterLab' did not stop; 'B <b>' was not stopped, so 'Pandas App' was not started. Stop 'JupyterLab' and 'B <b>' on the home page, then start 'Pandas App' again.",
        id="way-out-stop-failed-two-detail",
    ),
    pytest.param(
        "move",
        "stop-failed",
        "two",
        "detail",
        "'JupyterLab' did not stop; 'B <b>' was not stopped. Try the move again in a minute.",
        id="move-stop-failed-two-detail",
    ),
    pytest.param(
        "way-out",
        "release-timeout",
        "one",
        "plain",
        "'Pandas App' stopped, but your home folder was not freed within 0 seconds; 'JupyterLab' was not started. Start it again in a minute, or ask an administrator.",
        id="way-out-release-timeout-one-plain",
    ),
    pytest.param(
        "move",
        "release-timeout",
        "one",
        "plain",
        "'Pandas App' stopped, but your home folder was not freed within 0 seconds. Start it again in a minute, or ask an administrator.",
        id="move-release-timeout-one-plain",
    ),
    pytest.param(
        "way-out",
        "release-timeout",
        "two",
        "plain",
        "'JupyterLab' and 'B <b>' stopped, but your home folder was not freed within 0 seconds; 'Pandas App' was not started. Start it again in a minute, or ask an administrator.",
        id="way-out-release-timeout-two-plain",
    ),
    pytest.param(
        "move",
        "release-timeout",
        "two",
        "plain",
        "'JupyterLab' and 'B <b>' stopped, but your home folder was not freed within 0 seconds. Start them again in a minute, or ask an administrator.",
        id="move-release-timeout-two-plain",
    ),
    pytest.param(
        "way-out",
        "release-timeout",
        "one",
        "detail",
        "'Pandas App' stopped, but your home folder was not freed within 120 seconds; 'JupyterLab' was not started. Start it again in a minute, or ask an administrator.",
        id="way-out-release-timeout-one-detail",
    ),
    pytest.param(
        "move",
        "release-timeout",
        "one",
        "detail",
        "'Pandas App' stopped, but your home folder was not freed within 120 seconds. Start it again in a minute, or ask an administrator.",
        id="move-release-timeout-one-detail",
    ),
    pytest.param(
        "way-out",
        "release-timeout",
        "two",
        "detail",
        "'JupyterLab' and 'B <b>' stopped, but your home folder was not freed within 120 seconds; 'Pandas App' was not started. Start it again in a minute, or ask an administrator.",
        id="way-out-release-timeout-two-detail",
    ),
    pytest.param(
        "move",
        "release-timeout",
        "two",
        "detail",
        "'JupyterLab' and 'B <b>' stopped, but your home folder was not freed within 120 seconds. Start them again in a minute, or ask an administrator.",
        id="move-release-timeout-two-detail",
    ),
    pytest.param(
        "way-out",
        "start-failed",
        "one",
        "plain",
        "'Pandas App' stopped, but 'JupyterLab' did not start.",
        id="way-out-start-failed-one-plain",
    ),
    pytest.param(
        "move",
        "start-failed",
        "one",
        "plain",
        "'Pandas App' stopped, but did not start again.",
        id="move-start-failed-one-plain",
    ),
    pytest.param(
        "way-out",
        "start-failed",
        "two",
        "plain",
        "'JupyterLab' and 'B <b>' stopped, but 'Pandas App' did not start.",
        id="way-out-start-failed-two-plain",
    ),
    pytest.param(
        "move",
        "start-failed",
        "two",
        "plain",
        "'JupyterLab' and 'B <b>' stopped, but did not start again.",
        id="move-start-failed-two-plain",
    ),
    pytest.param(
        "way-out",
        "start-failed",
        "one",
        "detail",
        "'Pandas App' stopped, but 'JupyterLab' did not start. Boom: x",
        id="way-out-start-failed-one-detail",
    ),
    pytest.param(
        "move",
        "start-failed",
        "one",
        "detail",
        "'Pandas App' stopped, but did not start again. Boom: x",
        id="move-start-failed-one-detail",
    ),
    pytest.param(
        "way-out",
        "start-failed",
        "two",
        "detail",
        "'JupyterLab' and 'B <b>' stopped, but 'Pandas App' did not start. Boom: x",
        id="way-out-start-failed-two-detail",
    ),
    pytest.param(
        "move",
        "start-failed",
        "two",
        "detail",
        "'JupyterLab' and 'B <b>' stopped, but did not start again. Boom: x",
        id="move-start-failed-two-detail",
    ),
    pytest.param(
        "way-out",
        "something-new",
        "one",
        "plain",
        "The way out did not finish (something-new); 'JupyterLab' was not started.",
        id="way-out-something-new-one-plain",
    ),
    pytest.param(
        "move",
        "something-new",
        "one",
        "plain",
        "The move did not finish (something-new).",
        id="move-something-new-one-plain",
    ),
    pytest.param(
        "way-out",
        "something-new",
        "two",
        "plain",
        "The way out did not finish (something-new); 'Pandas App' was not started.",
        id="way-out-something-new-two-plain",
    ),
    pytest.param(
        "way-out",
        "stop-failed",
        "none",
        "plain",
        "The stop did not finish, so your default server was not started. Stop your servers on the home page, then start your default server again.",
        id="way-out-stop-failed-none-plain",
    ),
    pytest.param(
        "move",
        "stop-failed",
        "none",
        "plain",
        "The stop did not finish. Try the move again in a minute.",
        id="move-stop-failed-none-plain",
    ),
]


#: what a step did, server by server (the facts the handlers give), and the exact words
FACT_ROWS = [
    pytest.param(
        "way-out",
        "stop-failed",
        StepFacts(stopped=("",), not_stopped=("b",), why=STILL_RUNNING),
        "",
        "'JupyterLab' stopped, but 'B <b>' did not stop (it is still running), so 'Pandas App' was not started. Stop 'B <b>' on the home page, then start 'Pandas App' again.",
        id="way-out-stopped-one-of-two-the-other-still-running",
    ),
    pytest.param(
        "way-out",
        "stop-failed",
        StepFacts(not_stopped=("", "b"), why=TOO_SLOW),
        "",
        "'JupyterLab' did not stop (it took too long); 'B <b>' was not stopped, so 'Pandas App' was not started. Stop 'JupyterLab' and 'B <b>' on the home page, then start 'Pandas App' again.",
        id="way-out-stopped-none-of-two-too-slow",
    ),
    pytest.param(
        "way-out",
        "stop-failed",
        StepFacts(stopped=("",), not_stopped=("b",), why=STOP_ERROR),
        "",
        "'JupyterLab' stopped, but 'B <b>' did not stop (the hub log says why), so 'Pandas App' was not started. Stop 'B <b>' on the home page, then start 'Pandas App' again.",
        id="way-out-stopped-one-of-two-an-error-named-in-the-log-only",
    ),
    pytest.param(
        "way-out",
        "stop-failed",
        StepFacts(stopped=("",), not_stopped=("b",), why=LEFT_BEHIND),
        "",
        "'JupyterLab' stopped, but 'B <b>' did not stop (it is stuck), so 'Pandas App' was not started. Ask an administrator to remove 'B <b>', then start 'Pandas App' again.",
        id="way-out-jupyterhub-gave-up-on-one-of-two",
    ),
    pytest.param(
        "move",
        "stop-failed",
        StepFacts(stopped=("",), not_stopped=("b",), why=LEFT_BEHIND),
        "",
        "'JupyterLab' stopped, but 'B <b>' did not stop (it is stuck). Ask an administrator to remove 'B <b>', then try the move again.",
        id="move-jupyterhub-gave-up-on-one-of-two",
    ),
    pytest.param(
        "move",
        "stop-failed",
        StepFacts(stopped=("",), not_stopped=("b",), why=STILL_RUNNING),
        "",
        "'JupyterLab' stopped, but 'B <b>' did not stop (it is still running). 'JupyterLab' was not started again: start it on the home page.",
        id="move-stopped-one-of-two",
    ),
    pytest.param(
        "move",
        "start-failed",
        StepFacts(stopped=("", "b"), running=("",), not_started=("b",)),
        "Your server 'B <b>' cannot start: it needs 4 CPU.",
        "'JupyterLab' runs again; 'B <b>' stopped, but did not start again. Your server 'B <b>' cannot start: it needs 4 CPU.",
        id="move-restarted-one-of-two-the-other-refused",
    ),
    pytest.param(
        "move",
        "start-failed",
        StepFacts(stopped=("", "b"), running=("b",), not_started=("",)),
        "",
        "'B <b>' runs again; 'JupyterLab' stopped, but did not start again.",
        id="move-restarted-the-other-one-of-two",
    ),
    pytest.param(
        "move",
        "start-failed",
        StepFacts(stopped=("", "b"), not_started=("", "b")),
        "",
        "'JupyterLab' and 'B <b>' stopped, but did not start again.",
        id="move-restarted-none-of-two",
    ),
]


@pytest.mark.parametrize(("family", "outcome", "facts", "detail", "expect"), FACT_ROWS)
def test_a_step_that_ended_part_way_says_which_servers_stopped_which_did_not_and_which_run(
    family, outcome, facts, detail, expect
):
    if family == "way-out":
        text = messages.way_out_failed(
            outcome,
            start="pandas-app",
            stop=["", "b"],
            display_names=NAMES,
            facts=facts,
            detail=detail,
        )
    else:
        text = messages.move_failed(
            outcome, servers=["", "b"], display_names=NAMES, facts=facts, detail=detail
        )
    assert text == expect
    assert "Error" not in text and "Exception" not in text


@pytest.mark.parametrize(("family", "outcome", "shape", "extra", "expect"), ROWS)
def test_a_way_out_or_move_that_stopped_part_way_says_exactly_this(
    family, outcome, shape, extra, expect
):
    assert _words(family, outcome, shape, extra) == expect


@pytest.mark.parametrize(("family", "outcome", "shape", "extra", "expect"), ROWS)
def test_the_error_page_shows_the_same_words_escaped(family, outcome, shape, extra, expect):
    way_out, move = SHAPES[shape]
    names = NAMES if shape != "none" else None
    if family == "way-out":
        page = messages.way_out_failed_html(
            outcome, display_names=names, **way_out, **EXTRAS[extra]
        )
        css = "colocate-way-out"
    else:
        page = messages.move_failed_html(outcome, display_names=names, **move, **EXTRAS[extra])
        css = "colocate-move"
    assert page == (
        f'<div class="colocate-message {css}" style="text-align: left">{html.escape(expect)}</div>'
    )


# every outcome the handlers end in has words (as every reason and event code has)


def _raised_outcomes() -> set[str]:
    """The outcomes handlers.py ends a way out or a move with: the second argument (or
    ``outcome=``) of every WayOutFailed / MoveFailed / ``_failed`` / ``failed`` / ``failure`` it
    builds, and
    what ``_start_failure`` returns."""
    tree = ast.parse(inspect.getsource(handlers))
    builders = {"WayOutFailed", "MoveFailed", "_failed", "failed", "failure"}
    found: set[str] = set()
    for call in ast.walk(tree):
        if not isinstance(call, ast.Call):
            continue
        name = getattr(call.func, "id", None) or getattr(call.func, "attr", None)
        if name not in builders:
            continue
        args = [*call.args[1:2], *(k.value for k in call.keywords if k.arg == "outcome")]
        found |= {a.id for a in args if isinstance(a, ast.Name) and a.id.isupper()}
    start_failure = next(
        f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and f.name == "_start_failure"
    )
    for ret in ast.walk(start_failure):
        if isinstance(ret, ast.Return) and isinstance(ret.value, ast.Tuple):
            found |= {e.id for e in ret.value.elts if isinstance(e, ast.Name)}
    return {getattr(handlers, name) for name in found}


def test_the_guard_finds_every_outcome_the_handlers_end_in():
    assert _raised_outcomes() == set(handlers.FAILURES)


@pytest.mark.parametrize("outcome", handlers.FAILURES)
@pytest.mark.parametrize("family", ["way_out", "move"])
def test_every_outcome_that_ends_a_way_out_or_a_move_has_words_of_its_own(family, outcome):
    assert outcome in messages.OUTCOME_WORDS, outcome
    text = messages.outcome_text(family, outcome, stopped=["a"], detail="why", seconds=5)
    assert text.strip() and f"({outcome})" not in text, text


@pytest.mark.parametrize("family", ["way_out", "move"])
def test_an_outcome_without_words_names_itself_rather_than_an_empty_sentence(family):
    text = messages.outcome_text(family, "a-code-from-the-future", stopped=["a"])
    assert "did not finish (a-code-from-the-future)" in text, text


# the wait for the release (JupyterHub's exponential_backoff): True once released, False at the
# deadline, the deadline kept


class _FreshView:
    """A live view with an event a moment ago: the wait reads it from memory."""

    live = True

    @staticmethod
    def fresh():
        return True


class _Attachments:
    """What ``_released`` reads of a spawner: its live view's attachments of the home, the
    volume still attached to cpu-1 for the first ``attached_reads`` reads."""

    def __init__(self, attached_reads: int) -> None:
        self.left = attached_reads
        self.reads = 0

    def home_pods(self, claims):
        return []

    def colocation_view(self):
        return _FreshView()

    def home_attached_nodes(self, claims):
        self.reads += 1
        self.left -= 1
        return {"cpu-1"} if self.left >= 0 else set()


async def _released(view: _Attachments, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    return await handlers._released(
        view, ["claim-alice"], ["app"], all_holders=True, node="cpu-1", deadline=deadline
    )


async def test_the_wait_for_the_release_ends_once_the_volume_is_detached():
    view = _Attachments(attached_reads=3)
    assert await _released(view, 30) is True
    assert view.reads == 4


async def test_the_wait_for_the_release_gives_up_at_the_deadline():
    view = _Attachments(attached_reads=10**6)
    assert await _released(view, 0.3) is False
    assert view.reads >= 1


async def test_a_deadline_already_past_still_looks_once():
    view = _Attachments(attached_reads=0)
    assert await _released(view, -1) is True
    view = _Attachments(attached_reads=1)
    assert await _released(view, -1) is False
    assert view.reads == 1


# the facts a stop that fails part-way gives the words (handlers._stop_all)


async def _stops_fine(name):
    return None


async def _still_running(name):
    raise handlers.StillRunning(name)


async def _raises(name):
    raise RuntimeError(f"{name} is still running")


async def _hangs(name):
    await asyncio.sleep(30)


@pytest.mark.parametrize(
    "test_variation_id, stops, expect",
    [
        (
            "the second is still running",
            [_stops_fine, _still_running],
            (("a",), ("b",), STILL_RUNNING),
        ),
        ("the first takes too long", [_hangs, _stops_fine], ((), ("a", "b"), TOO_SLOW)),
        (
            "the second raises: an error, told by the hub log",
            [_stops_fine, _raises],
            (("a",), ("b",), STOP_ERROR),
        ),
    ],
)
async def test_a_stop_that_fails_part_way_gives_which_stopped_which_did_not_and_why(
    test_variation_id, stops, expect
):
    by_name = dict(zip(["a", "b"], stops, strict=True))

    async def stop_server(name):
        await by_name[name](name)

    with pytest.raises(handlers.WayOutFailed) as failed:
        await handlers._stop_all(
            ["a", "b"],
            stop_server,
            time.monotonic() + 0.3,
            lambda **kw: handlers.WayOutFailed(**kw, start="", stop=("a", "b")),
        )
    facts = failed.value.facts
    assert (facts.stopped, facts.not_stopped, facts.why) == expect
    assert "RuntimeError" not in failed.value.jupyterhub_message
    assert "still running" not in failed.value.jupyterhub_message or expect[2] == STILL_RUNNING


def alice_pod(server: str, **kwargs) -> dict:
    """alice's server ``server`` on cpu-1, mounting her home."""
    kwargs.setdefault("phase", "Running")
    return builders.pod(
        f"jupyter-alice--{server}",
        node_name="cpu-1",
        user="alice",
        server=server,
        claims=["claim-alice"],
        **kwargs,
    )


@pytest.mark.parametrize(
    "test_variation_id, pods, expect",
    [
        ("both gone", [], ()),
        ("the second's pod still holds the home", [alice_pod("b")], ("b",)),
        (
            "a terminating pod still holds it; a finished one does not",
            [alice_pod("a", deleting=True), alice_pod("b", phase="Succeeded")],
            ("a",),
        ),
        ("a pod of a server not stopped is not left behind", [alice_pod("c")], ()),
    ],
)
def test_the_stopped_servers_whose_pods_still_hold_the_home_are_left_behind(
    test_variation_id, pods, expect
):
    assert left_behind(pods, ["claim-alice"], ["a", "b"]) == expect
