"""The way out and the move off a premium node: the form, the button, and every outcome in words.
(pure)
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from .. import events
from ..wayout import StepFacts, WayOut
from .advice import _join
from .progress import event_failure
from .refusals import server_label, way_out_sentence

# --------------------------------------------------------------------------------------------------
# the way out, taken (nebari_colocate.handlers)


class OutcomeWords(NamedTuple):
    """The sentence of one outcome, for the way out and for the move (templates: ``{started}``
    the server to start, ``{stopped}`` / ``{Stopped}`` what was stopped, ``{them}`` it or them,
    ``{keep}`` keep or keeps, ``{did_not_stop}`` what stopped and what did not, and why,
    ``{still}`` what still runs, ``{ran_again}`` what runs again, ``{then}`` " detail",
    ``{seconds}``, ``{outcome}``)."""

    way_out: str
    move: str


#: why the way out or the move stopped part-way: outcome (a label of
#: ``nebari_colocate_way_out_total``, ``nebari_colocate.handlers.FAILURES``) -> its sentence
OUTCOME_WORDS: dict[str, OutcomeWords] = {
    "forbidden": OutcomeWords(
        "You are not allowed to stop and start these servers.",
        "You are not allowed to stop and start these servers.",
    ),
    "stale": OutcomeWords(
        "Nothing was stopped: what blocks {started} has changed since it was refused "
        "(a server started or stopped in between). Start {started} again to see what "
        "blocks it now.",
        "Nothing was stopped: {stopped} no longer {keep} that machine running alone. Reload "
        "the home page to see what runs now.",
    ),
    "busy": OutcomeWords(
        "Nothing was stopped: another way out of yours is under way. Wait for it to end, "
        "then try again.",
        "Nothing was stopped: another way out or move of yours is under way. Wait for it "
        "to end, then try again.",
    ),
    "stop-failed": OutcomeWords(
        "{did_not_stop}, so {started} was not started. Stop {still} on the home page, then "
        "start {started} again.",
        "{did_not_stop}. {Stopped} {was} not started again: start {them} on the home page.",
    ),
    "release-timeout": OutcomeWords(
        "{Stopped} stopped, but your home folder was not freed within {seconds:g} seconds; "
        "{started} was not started. Start it again in a minute, or ask an administrator.",
        "{Stopped} stopped, but your home folder was not freed within {seconds:g} seconds. "
        "Start {them} again in a minute, or ask an administrator.",
    ),
    "start-failed": OutcomeWords(
        "{Stopped} stopped, but {started} did not start.{then}",
        "{ran_again}{Stopped} stopped, but did not start again.{then}",
    ),
}

#: a move whose stops all failed: nothing to start again
MOVE_NOTHING_STOPPED = "{did_not_stop}. Try the move again in a minute."
#: a stop JupyterHub gave up on: it shows the server stopped, its pod is still there
LEFT_BEHIND_WORDS = OutcomeWords(
    "{did_not_stop}, so {started} was not started. Ask an administrator to remove {still}, then "
    "start {started} again.",
    "{did_not_stop}. Ask an administrator to remove {still}, then try the move again.",
)

#: why a server did not stop (``wayout.StepFacts.why``)
STOP_FAILURES = {
    "still-running": "it is still running",
    "too-slow": "it took too long",
    "error": "the hub log says why",
    "left-behind": "it is stuck",
}

#: an outcome without words names itself
UNWORDED_OUTCOME = OutcomeWords(
    "The way out did not finish ({outcome}); {started} was not started.",
    "The move did not finish ({outcome}).",
)

_OUTCOME_CLASS = OutcomeWords("colocate-way-out", "colocate-move")


def _did_not_stop(facts: StepFacts, label: Callable[[str], str]) -> str:
    """ "'A' stopped, but 'B' did not stop (it is still running); 'C' was not stopped"."""
    if not facts.not_stopped:
        return "The stop did not finish"
    first, rest = facts.not_stopped[0], facts.not_stopped[1:]
    why = STOP_FAILURES.get(facts.why)
    failed = label(first) + " did not stop" + (f" ({why})" if why else "")
    if facts.stopped:
        said = f"{_join([label(n) for n in facts.stopped])} stopped, but {failed}"
    else:
        said = failed
    said = said[:1].upper() + said[1:]
    if rest:
        said += f"; {_join([label(n) for n in rest])} {'was' if len(rest) == 1 else 'were'}"
        said += " not stopped"
    return said


def _facts(outcome: str, servers: Sequence[str], facts: StepFacts | None) -> StepFacts:
    """The facts a caller gave, else those ``outcome`` implies of ``servers`` (the servers the
    step was to stop): a stop that failed stopped none of them; after it, all stopped."""
    if facts is not None:
        return facts
    if outcome == "stop-failed":
        return StepFacts(not_stopped=tuple(servers))
    return StepFacts(stopped=tuple(servers), not_started=tuple(servers))


def outcome_text(
    family: str,
    outcome: str,
    *,
    stopped: Sequence[str] = (),
    started: str = "",
    display_names: Mapping[str, str] | None = None,
    detail: str = "",
    seconds: float = 0.0,
    facts: StepFacts | None = None,
) -> str:
    """The sentence of ``outcome`` for ``family`` (``"way_out"`` or ``"move"``, a field of
    :class:`OutcomeWords`), in plain text; ``stopped`` the servers the step was to stop,
    ``facts`` what it did with them (else what ``outcome`` implies); ``detail`` the start's
    refusal in its own words."""
    known = _facts(outcome, stopped, facts)

    def label(name: str) -> str:
        return server_label(name, display_names)

    template = getattr(OUTCOME_WORDS.get(outcome, UNWORDED_OUTCOME), family)
    shown = stopped
    if outcome in ("stop-failed", "release-timeout"):
        shown = known.stopped
        if outcome == "stop-failed" and known.why == "left-behind":
            template = getattr(LEFT_BEHIND_WORDS, family)
        elif family == "move" and outcome == "stop-failed" and not shown:
            template = MOVE_NOTHING_STOPPED
    elif outcome == "start-failed" and family == "move":
        shown = known.not_started
    names = _join([label(n) for n in shown]) or "nothing"
    ran_again = _join([label(n) for n in known.running])
    if ran_again:
        ran_again = f"{ran_again[:1].upper()}{ran_again[1:]} "
        ran_again += f"{'runs' if len(known.running) == 1 else 'run'} again; "
    return str(template).format(
        started=label(started),
        stopped=names,
        Stopped=names[:1].upper() + names[1:],
        them="it" if len(shown) == 1 else "them",
        keep="keep" if len(shown) > 1 else "keeps",
        was="was" if len(shown) == 1 else "were",
        did_not_stop=_did_not_stop(known, label),
        still=_join([label(n) for n in known.not_stopped]) or "your servers",
        ran_again=ran_again,
        then=f" {detail}" if detail else "",
        seconds=seconds,
        outcome=outcome,
    )


def outcome_html(family: str, text: str) -> str:
    """An :func:`outcome_text` of ``family`` as the error page's HTML, escaped."""
    css = getattr(_OUTCOME_CLASS, family)
    return f'<div class="colocate-message {css}" style="text-align: left">{html.escape(text)}</div>'


def way_out_failed(
    outcome: str,
    *,
    start: str,
    stop: Sequence[str] = (),
    display_names: Mapping[str, str] | None = None,
    detail: str = "",
    seconds: float = 0.0,
    facts: StepFacts | None = None,
) -> str:
    """Why the way out stopped part-way (``outcome``, a label of
    ``nebari_colocate_way_out_total``), in plain text: ``facts`` say which of ``stop`` stopped
    and which did not; ``detail`` is the refusal's own words for a start refused again."""
    return outcome_text(
        "way_out",
        outcome,
        stopped=stop,
        started=start,
        display_names=display_names,
        detail=detail,
        seconds=seconds,
        facts=facts,
    )


def way_out_failed_html(outcome: str, **kwargs: Any) -> str:
    """:func:`way_out_failed` as HTML, escaped."""
    return outcome_html("way_out", way_out_failed(outcome, **kwargs))


# --------------------------------------------------------------------------------------------------
# the move off a premium node (nebari_colocate.handlers.MoveHandler)


def premium_ride_text(
    servers: Sequence[str], display_names: Mapping[str, str] | None = None, *, kind: str = "GPU"
) -> str:
    """ "'Pandas App' keeps a GPU machine running: move it to a standard machine" (the home pages'
    notice once the user's GPU lab has stopped while these servers ride on its node)."""
    return f"{_ride_subject(servers, display_names, kind)}: {_ride_action(servers)}"


def _ride_subject(
    servers: Sequence[str], display_names: Mapping[str, str] | None, kind: str
) -> str:
    names = _join([server_label(s, display_names) for s in servers])
    names = names[:1].upper() + names[1:]
    verb = "keeps" if len(servers) == 1 else "keep"
    return f"{names} {verb} a {kind} machine running"


def _ride_action(servers: Sequence[str]) -> str:
    return f"move {'it' if len(servers) == 1 else 'them'} to a standard machine"


def premium_ride_html(
    servers: Sequence[str],
    node: str,
    action: str,
    display_names: Mapping[str, str] | None = None,
    *,
    kind: str = "GPU",
) -> str:
    """The notice as HTML, every name escaped: the sentence, its last words a button that
    POSTs to ``action`` (the move's handler) with the node, the servers and the page's XSRF
    token (JupyterHub's pages carry it in ``window.jhdata.xsrf_token``)."""
    esc = html.escape
    fields = "".join(f'<input type="hidden" name="server" value="{esc(s)}">' for s in servers)
    return (
        f'<form class="colocate-move" method="post" action="{esc(action)}" '
        'style="display: inline; margin: 0">'
        '<input type="hidden" name="_xsrf" value="">'
        f'<input type="hidden" name="node" value="{esc(node)}">{fields}'
        f"{esc(_ride_subject(servers, display_names, kind))}: "
        '<button type="submit" class="btn btn-sm btn-primary colocate-move-button">'
        f"{esc(_ride_action(servers))}</button></form>"
        "<script>(function () {"
        "var t = (window.jhdata || {}).xsrf_token || '';"
        "var f = document.querySelectorAll('form.colocate-move input[name=_xsrf]');"
        "for (var i = 0; i < f.length; i++) { f[i].value = t; }"
        "})();</script>"
    )


def move_failed(
    outcome: str,
    *,
    servers: Sequence[str] = (),
    display_names: Mapping[str, str] | None = None,
    detail: str = "",
    seconds: float = 0.0,
    facts: StepFacts | None = None,
) -> str:
    """Why a move off a premium node stopped part-way (``outcome``: a label of
    ``nebari_colocate_way_out_total``), in plain text: ``facts`` say which of ``servers``
    stopped, which did not, which run again."""
    return outcome_text(
        "move",
        outcome,
        stopped=servers,
        display_names=display_names,
        detail=detail,
        seconds=seconds,
        facts=facts,
    )


def move_failed_html(outcome: str, **kwargs: Any) -> str:
    """:func:`move_failed` as HTML, escaped."""
    return outcome_html("move", move_failed(outcome, **kwargs))


# the way out, offered (the button on every page; nebari_colocate/templates)

#: the class of the way out's form; the pages nebari-colocate installs show it and add the
#: ``_xsrf`` token (templates/hub/colocate_way_out.html), any other page leaves it hidden
WAY_OUT_FORM_CLASS = "colocate-way-out-form"


def way_out_button_label(way_out: WayOut, display_names: Mapping[str, str] | None = None) -> str:
    """ "Stop 'Pandas App' and start 'JupyterLab'": the words of the way out's button."""
    return way_out_sentence(way_out, display_names).removesuffix(".")


def way_out_busy_label(way_out: WayOut, display_names: Mapping[str, str] | None = None) -> str:
    """What the button says once clicked, while the hub stops, waits and starts."""
    stops = _join([server_label(n, display_names) for n in way_out.stop])
    started = server_label(way_out.start, display_names)
    return f"Stopping {stops}, then starting {started}\N{HORIZONTAL ELLIPSIS}"


def way_out_form_html(
    way_out: WayOut, *, action: str, display_names: Mapping[str, str] | None = None
) -> str:
    """The way out as a form: the button, which says what it stops and starts, and POSTs it to
    the hub's handler at ``action`` (``stop`` fields; the page adds ``_xsrf``).  Hidden until a
    page of nebari-colocate's shows it; every name is escaped."""
    esc = html.escape
    fields = "".join(
        f'<input type="hidden" name="stop" value="{esc(n, quote=True)}">' for n in way_out.stop
    )
    label = esc(way_out_button_label(way_out, display_names))
    busy = esc(way_out_busy_label(way_out, display_names), quote=True)
    return (
        f'<form class="{WAY_OUT_FORM_CLASS}" method="post" action="{esc(action, quote=True)}" '
        f'data-busy="{busy}" hidden style="text-align: left; margin: 0.5rem 0">'
        f"{fields}"
        # styled inline: jhub-apps' pages reset buttons to plain text (its CSS has no .btn)
        '<button type="submit" class="btn btn-primary colocate-way-out-button" style="'
        "display: inline-block; padding: 0.5rem 1rem; border: 0; border-radius: 0.375rem; "
        f'background: #1d4ed8; color: #fff; font: inherit; cursor: pointer">{label}</button>'
        "</form>"
    )


def event_refusal(
    verdict: events.EventVerdict,
    server_name: str,
    display_names: Mapping[str, str] | None = None,
    *,
    action: str = "",
) -> tuple[str, str]:
    """(text, html) for a spawn ended by a hopeless pod event (:func:`event_failure`), with its
    way out's form (the button) when the verdict has one and the handler's URL ``action`` is
    given."""
    button = ""
    if verdict.way_out is not None and action:
        button = way_out_form_html(verdict.way_out, action=action, display_names=display_names)
    return event_failure(verdict, server_name, display_names, button=button)
