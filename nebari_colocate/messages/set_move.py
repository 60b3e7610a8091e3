"""The move of the whole set: the offer beside the way out, its button, and every end in words.
(pure)

Plain and short, names the user knows only (no node, label or claim names): "Restart 'Pandas App'
and your default server together on a machine with room for all three, then start 'Big App'.
Running kernels restart."
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from ..setmove import Move
from ..wayout import StepFacts
from .refusals import _names, move_sentence, server_label
from .way_out import OUTCOME_WORDS, WAY_OUT_FORM_CLASS, _did_not_stop


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


#: said with the move's button: what restarting the servers costs the person
KERNELS_RESTART = "Running kernels restart."


def move_button_label(move: Move, display_names: Mapping[str, str] | None = None) -> str:
    """The words of the move's button: its sentence without the note on kernels (said under
    the button, :data:`KERNELS_RESTART`)."""
    return move_sentence(move, display_names).removesuffix(" " + KERNELS_RESTART).removesuffix(".")


def move_busy_label(move: Move, display_names: Mapping[str, str] | None = None) -> str:
    """What the button says once clicked, while the hub stops, waits and starts."""
    return (
        f"Restarting {_names(move.restart, display_names)} on a machine with room, then "
        f"starting {server_label(move.start, display_names)}\N{HORIZONTAL ELLIPSIS}"
    )


def move_form_html(
    move: Move, *, action: str, display_names: Mapping[str, str] | None = None
) -> str:
    """The move as a second form beside the way out's: hidden until a page of
    nebari-colocate's shows it and adds ``_xsrf`` (the way out's form class, so the same
    script arms it); fields ``restart`` (each server) and ``node`` (``""``: a new machine);
    every name escaped."""
    esc = html.escape
    fields = "".join(
        f'<input type="hidden" name="restart" value="{esc(n, quote=True)}">' for n in move.restart
    )
    fields += f'<input type="hidden" name="node" value="{esc(move.node or "", quote=True)}">'
    label = esc(move_button_label(move, display_names))
    busy = esc(move_busy_label(move, display_names), quote=True)
    return (
        f'<form class="{WAY_OUT_FORM_CLASS} colocate-set-move-form" method="post" '
        f'action="{esc(action, quote=True)}" data-busy="{busy}" hidden '
        'style="text-align: left; margin: 0.5rem 0">'
        "<div>Or:</div>"
        f"{fields}"
        '<button type="submit" class="btn btn-primary colocate-set-move-button" style="'
        "display: inline-block; padding: 0.5rem 1rem; border: 0; border-radius: 0.375rem; "
        f'background: #1d4ed8; color: #fff; font: inherit; cursor: pointer">{label}</button>'
        # what the person consents to, beside the button they click (the button's own words
        # leave it out to stay short)
        f'<div class="colocate-set-move-note">{esc(KERNELS_RESTART)}</div>'
        "</form>"
    )


# --------------------------------------------------------------------------------------------------
# the move, ended part-way (nebari_colocate.set_move_step)

#: why the move ended before its servers ran together (outcome -> the first sentence); the
#: others are the way out's (``OUTCOME_WORDS``)
SET_MOVE_WORDS = {
    "stale": "Nothing was stopped: your servers or the room for them changed since {started} "
    "was refused. Start {started} again to see what can be done now.",
    "stop-failed": "{did_not_stop}, so nothing was moved.",
    "release-timeout": "Your home folder was not freed within {seconds:g} seconds, so nothing "
    "was moved.",
    "no-room": "No machine had room for all your servers when they started, so nothing was moved.",
    "start-failed": "Your servers were moved, but {started} did not start.",
}


def set_move_failed(
    outcome: str,
    *,
    start: str,
    restart: Sequence[str] = (),
    display_names: Mapping[str, str] | None = None,
    detail: str = "",
    seconds: float = 0.0,
    facts: StepFacts | None = None,
) -> str:
    """Why the move of the whole set ended part-way (``outcome``, a label of
    ``nebari_colocate_way_out_total``), in plain text: what happened, which servers run again
    (started where they fit), which did not start again, and whether ``start`` was started."""
    known = facts or StepFacts()

    def label(name: str) -> str:
        return server_label(name, display_names)

    if outcome not in SET_MOVE_WORDS:
        words = OUTCOME_WORDS.get(outcome)
        return (words.way_out if words else "The move did not finish ({outcome}).").format(
            started=label(start), outcome=outcome
        )
    said = [
        SET_MOVE_WORDS[outcome].format(
            started=label(start), did_not_stop=_did_not_stop(known, label), seconds=seconds
        )
    ]
    moved = outcome == "start-failed"
    if known.running and not moved:
        verb = "runs" if len(known.running) == 1 else "run"
        said.append(f"{_capital(_names(known.running, display_names))} {verb} again.")
    if known.not_started:
        said.append(f"Start {_names(known.not_started, display_names)} on the home page.")
    if outcome in ("stop-failed", "release-timeout", "no-room"):
        said.append(f"{_capital(label(start))} was not started.")
    if detail:
        said.append(detail)
    return " ".join(said)


def set_move_failed_html(outcome: str, **kwargs: Any) -> str:
    """:func:`set_move_failed` as HTML, escaped."""
    text = html.escape(set_move_failed(outcome, **kwargs))
    return f'<div class="colocate-message colocate-set-move" style="text-align: left">{text}</div>'
