"""The headline of every refusal and event verdict: what happened and what to do, in plain words
a person reads first; the technical facts go under "Details" (docs/surfaces.md, "How the words
are written").  (pure)

A headline names no node, label, resource, claim or pod: "a GPU machine", "your home folder",
"your server 'Pandas App'".  When the way out's button is on the page, the headline leaves the
stop to the button (:func:`page_html`): the remedy is said once.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from .. import events, fit
from ..objects import GPU_RESOURCES, Obj
from ..placement import (
    CLAIM_IN_USE,
    HOME_BEING_MOVED,
    NODE_NOT_FOUND,
    PINNED_BY_ATTACHMENT,
    PINNED_BY_HOLDERS,
    PREMIUM_NODE,
    REFUSE,
    SPLIT_ATTACHMENT,
    Decision,
    stopping_helps,
)
from ..wayout import WayOut
from .advice import _join, nothing_the_user_does_helps, profile_can_help
from .refusals import (
    _RESOURCE_WORDS,
    _clock,
    _exclusivity,
    counted_holders,
    holder_facts,
    move_sentence,
    reason_sentences,
    server_label,
    subject,
)


class Headline(NamedTuple):
    """What a person reads first: ``what`` happened (one sentence, the subject first), what
    to ``do`` in words, and what ``also`` helps beside the way out's button (the button says
    the stop itself)."""

    what: str
    do: str = ""
    also: str = ""

    @property
    def text(self) -> str:
        """The headline where no button is shown: what happened, then what to do."""
        return " ".join(p for p in (self.what, self.do) if p)


# --------------------------------------------------------------------------------------------------
# refusals (placement.decide)

#: node state (``fit.NODE_STATE_*``) -> what the machine "is", in plain words
STATE_WORDS = {
    fit.NODE_STATE_UNREACHABLE: "is not responding",
    fit.NODE_STATE_NOT_READY: "is not working properly",
    fit.NODE_STATE_CORDONED: "is closed for maintenance",
    fit.NODE_STATE_PRESSURE: "is short of memory or disk space",
    fit.NODE_STATE_NO_NETWORK: "has no working network",
    fit.NODE_STATE_OUT_OF_SERVICE: "is out of service",
    fit.NODE_STATE_STARTING: "is still starting up",
    fit.NODE_STATE_SHUT_DOWN: "is shut down",
    fit.NODE_STATE_BEING_REMOVED: "is being shut down",
}

#: the reason a headline tells when a refusal has several, most telling first (the rest are in
#: Details); ``gpu-none`` is an ``insufficient:<gpu>`` on a machine without any
_TOLD_FIRST = (
    HOME_BEING_MOVED,
    SPLIT_ATTACHMENT,
    NODE_NOT_FOUND,
    CLAIM_IN_USE,
    "node-state",
    "gpu-none",
    fit.NODE_SELECTOR,
    fit.INSUFFICIENT_ANY,
    fit.TAINT,
    fit.TOO_MANY_PODS,
    fit.VOLUME_NODE_AFFINITY,
    PREMIUM_NODE,
)


def _gpu_none(decision: Decision) -> bool:
    shortfalls = decision.fit.shortfalls if decision.fit else []
    return any(s.resource in GPU_RESOURCES and s.allocatable <= 0 for s in shortfalls)


def _families(decision: Decision) -> list[str]:
    found = []
    for code in decision.reasons:
        resource = fit.insufficient_resource(code)
        if resource is not None:
            found.append(fit.INSUFFICIENT_ANY)
        elif code == fit.NODE_UNSCHEDULABLE:
            found.append("node-state")
        elif code != fit.TAINT or _workload_taints(decision):
            found.append(code)
    if decision.fit is not None and fit.node_states(decision.fit):
        found.append("node-state")
    if _gpu_none(decision):
        found.append("gpu-none")
    return found


def _workload_taints(decision: Decision) -> bool:
    taints = decision.fit.taints if decision.fit else []
    return not taints or any(not fit.node_state(t) for t in taints)


def _told(decision: Decision) -> str:
    found = _families(decision)
    for family in _TOLD_FIRST:
        if family in found:
            return family
    return found[0] if found else ""


def _short_of(decision: Decision) -> str:
    """What the machine lacks, as a person says it: "CPU", "memory", "GPUs"; "room" for a
    resource without plain words."""
    for code in decision.reasons:
        resource = fit.insufficient_resource(code)
        if resource is not None:
            return _RESOURCE_WORDS[resource].amount if resource in _RESOURCE_WORDS else "room"
    return "room"


#: the holders' words that are plural on their own
_PLURAL = frozenset({"your other jobs", "your servers", "your other servers", "others"})


def _users(who: Sequence[str]) -> tuple[str, str]:
    """(the holders joined, their verb): ("'Pandas App'", "uses"), ("'A' and 'B'", "use")."""
    plural = len(who) > 1 or (len(who) == 1 and who[0] in _PLURAL)
    return _join(list(who)), "use" if plural else "uses"


#: what is wrong with the machine the home folder is on, after "on a machine ", by the reason
#: told (``_TOLD_FIRST``); ``{short}`` is what it lacks
_MACHINE_WORDS = {
    "gpu-none": "with no GPU",
    fit.NODE_SELECTOR: "of the wrong kind",
    fit.INSUFFICIENT_ANY: "without enough free {short}",
    fit.TAINT: "kept for other work",
    fit.TOO_MANY_PODS: "that is full",
}


def _why(decision: Decision, who: Sequence[str]) -> str:
    users, verb = _users(who)
    holds = f"{users} {verb} your home folder" if who else "your home folder is"
    told = _told(decision)
    if told == HOME_BEING_MOVED and decision.moving_stalled:
        return "the move of your home folder to new storage stopped part-way"
    if told == HOME_BEING_MOVED:
        since = _clock(decision.moving_since)
        return "your home folder is being moved to new storage" + (
            f" (since {since})" if since else ""
        )
    if told == SPLIT_ATTACHMENT:
        return "your home folder is in use on two machines at once"
    if told == NODE_NOT_FOUND:
        return "your home folder is still held by a machine that no longer exists"
    if told == CLAIM_IN_USE:
        if who:
            return (
                f"{users} {'is' if verb == 'uses' else 'are'} using your home folder, which "
                "allows one server at a time"
            )
        return "your home folder is in use, and it allows one server at a time"
    if told == "node-state":
        states = fit.node_states(decision.fit) if decision.fit else []
        return f"{holds} on a machine that {STATE_WORDS[(states or [fit.NODE_STATE_CORDONED])[0]]}"
    if told == fit.VOLUME_NODE_AFFINITY:
        return "another storage folder it uses cannot be reached from where your home folder is"
    if told == PREMIUM_NODE and "others" in who:
        return "it needs no GPU, but your home folder is in use on a GPU machine"
    if told == PREMIUM_NODE:
        return f"it needs no GPU, but {holds} on a GPU machine"
    if told in _MACHINE_WORDS:
        return f"{holds} on a machine {_MACHINE_WORDS[told].format(short=_short_of(decision))}"
    return "a check refused it"


def _choice(decision: Decision) -> str:
    """The other profile that can help, in words."""
    told = _told(decision)
    if told == PREMIUM_NODE:
        return "choose a GPU profile"
    if told == "gpu-none":
        return "choose a profile without a GPU"
    if told == fit.INSUFFICIENT_ANY:
        return "choose a smaller profile"
    return "choose another profile"


def _unresolvable_do(decision: Decision) -> str:
    if HOME_BEING_MOVED in decision.reasons and decision.moving_stalled:
        return "Your files are safe. Ask your administrator to finish the move."
    if HOME_BEING_MOVED in decision.reasons:
        return "Your files are safe. Try again in a few minutes."
    if NODE_NOT_FOUND in decision.reasons:
        return "Please ask your administrator to free your home folder."
    if fit.VOLUME_NODE_AFFINITY in decision.reasons:
        return "Please ask your administrator."
    return "Please ask your administrator."


def _refusal_do(
    decision: Decision, servers: list[str], has_profiles: bool, own_pods: int, others: int
) -> tuple[str, str]:
    """(what to do, what else helps beside the button), from what can help (:mod:`.advice`)."""
    if nothing_the_user_does_helps(decision.reasons):
        return _unresolvable_do(decision), ""
    if decision.pinned_by == PINNED_BY_ATTACHMENT and not servers:
        return "It is still being freed: try again in a minute.", ""
    if not servers and decision.holder_pods and decision.pinned_by == PINNED_BY_HOLDERS:
        stop = (
            "wait for your other jobs to finish"
            if own_pods
            else "wait for the other work to finish, or ask your administrator"
        )
    else:
        stop = (
            f"stop {'it' if len(servers) == 1 else 'them'}"
            if servers
            else "stop your other servers"
        )
    states = fit.node_states(decision.fit) if decision.fit else []
    profiles = has_profiles and not states and profile_can_help(decision.reasons)
    if others:
        if profiles and CLAIM_IN_USE not in decision.reasons:
            choice = _choice(decision)
            return f"{choice[:1].upper()}{choice[1:]}, or ask your administrator.", ""
        return "Please ask your administrator.", ""
    if states:
        later = (
            " If it still cannot start in a few minutes, ask your administrator."
            if any(s in fit.NODE_STATES_UNRESPONSIVE for s in states)
            else ""
        )
        first = " first" if servers else ""
        return f"{stop[:1].upper()}{stop[1:]}{first}.{later}", later.strip()
    stop = stop[:1].upper() + stop[1:]
    if not profiles:
        return f"{stop}{' first' if servers else ''}.", ""
    choice = _choice(decision)
    return f"{stop}, or {choice}.", f"You can also {choice}."


def _who(servers: list[str], own_pods: Sequence[str], others: int) -> list[str]:
    """Who holds the home, as short as a headline needs: the user's servers by name (two at
    most, one beside others), their other pods as "your other jobs", everything else as "others"."""
    most = 1 if others else 2
    who = (
        list(servers)
        if len(servers) <= most
        else ["your servers" if others else "your other servers"]
    )
    if own_pods:
        who.append("your other jobs")
    if others:
        who.append("others" if who else "other people's work")
    return who


def refusal_headline(
    decision: Decision,
    *,
    username: str,
    server_name: str,
    user_label: str | None = None,
    has_profiles: bool = True,
    display_names: Mapping[str, str] | None = None,
) -> Headline:
    """The headline of a refusal (``decision.verdict`` refuse): which server cannot start, why,
    and what to do, in plain words."""
    facts = holder_facts(decision, username, user_label)
    servers = [server_label(n, display_names) for n in facts.servers]
    who = _who(servers, facts.pods, facts.other_servers + facts.not_servers)
    why = _why(decision, who)
    what = f"{subject(server_name, display_names)} cannot start. {why[:1].upper()}{why[1:]}."
    do, also = _refusal_do(decision, servers, has_profiles, len(facts.pods), facts.other_servers)
    return Headline(what, do, also)


def refusal_details(
    decision: Decision,
    pod: Obj,
    *,
    username: str,
    user_label: str | None = None,
    display_names: Mapping[str, str] | None = None,
) -> list[str]:
    """The technical facts of a refusal, for the administrator (the Details): one sentence per
    reason, who holds the volume, and the node, claims and reason codes."""
    facts = holder_facts(decision, username, user_label)
    lines = [s[:1].upper() + s[1:] + "." for s in reason_sentences(decision, pod)]
    in_use = [server_label(n, display_names) for n in facts.servers]
    if facts.pods:
        in_use.append(f"your pod(s) {_join(facts.pods)} (not servers)")
    in_use += counted_holders(other_servers=facts.other_servers, not_servers=facts.not_servers)
    if in_use:
        lines.append(f"{_exclusivity(decision)} and is in use by {_join(in_use)}.")
    if HOME_BEING_MOVED in decision.reasons and decision.moving_stalled:
        lines.append(
            "An administrator finishes the move, or puts the home back, with "
            "nebari-colocate migrate apply or rollback."
        )
    states = fit.node_states(decision.fit) if decision.fit else []
    if any(s in fit.NODE_STATES_UNRESPONSIVE for s in states):
        lines.append(
            f"Node {decision.node} may not end its pods cleanly: an administrator may have to "
            f"release the volume from node {decision.node}."
        )
    codes = ", ".join(decision.reasons) or "-"
    lines.append(
        f"Node: {decision.node or '-'}; claims: {', '.join(decision.claims) or '-'}; "
        f"reasons: {codes}."
    )
    return lines


# --------------------------------------------------------------------------------------------------
# rendering: the text every text surface shows, and the HTML of the pages

#: the label of the closed disclosure that holds the technical facts on the pages
DETAILS_LABEL = "Details"


def text_message(headline: Headline, details: Sequence[str], more: str = "") -> str:
    """The plain text of a refusal: the headline, ``more`` (a second way out, in words), then
    "Details:" and the facts."""
    said = " ".join(p for p in (headline.text, more) if p)
    if not details:
        return said
    return f"{said} {DETAILS_LABEL}: {' '.join(details)}"


def or_move(way_out: WayOut | None, display_names: Mapping[str, str] | None = None) -> str:
    """The second way out in words, after the first ("Or: Restart ... Running kernels
    restart."), when ``way_out`` carries the move of the whole set; "" otherwise."""
    move = way_out.move if way_out is not None else None
    return f"Or: {move_sentence(move, display_names)}" if move is not None else ""


def details_html(details: Sequence[str]) -> str:
    """The facts as a closed disclosure (``<details>`` without ``open``), escaped."""
    if not details:
        return ""
    items = "".join(f"<li>{html.escape(line)}</li>" for line in details)
    return (
        f'<details class="colocate-details"><summary>{DETAILS_LABEL}</summary>'
        f'<ul class="colocate-reasons">{items}</ul></details>'
    )


def page_html(
    headline: Headline,
    details: Sequence[str],
    button: str = "",
    way_out: WayOut | None = None,
) -> str:
    """A refusal as the pages show it, escaped: the headline, the way out's ``button`` (its
    form's HTML) when there is one and what else helps, then the closed Details; ``way_out`` as
    JSON in ``data-way-out``."""
    shown = headline.what if button else headline.text
    also = f'<div class="colocate-also">{html.escape(headline.also)}</div>' if button else ""
    if not headline.also:
        also = ""
    # <div>, not <p>: JupyterHub's error page puts the message inside a <p> of its own; and
    # left-aligned, as the spawn pages centre their text.
    # the way out as JSON, for a front end that reads only JupyterHub's closing "failed" event
    # (its html_message), which carries no way_out field of its own
    data = ""
    if way_out is not None:
        data = f' data-way-out="{html.escape(json.dumps(way_out.as_json()), quote=True)}"'
    return (
        f'<div class="colocate-message" style="text-align: left"{data}>'
        f'<div class="colocate-headline">{html.escape(shown)}</div>'
        f"{button}{also}{details_html(details)}</div>"
    )


# --------------------------------------------------------------------------------------------------
# event verdicts (events.classify): plain words, the technical text goes to Details


def _storage_unavailable(verdict: events.EventVerdict) -> bool:
    return any(f.cause == events.FRAGMENT_UNBOUND_CLAIM for f in verdict.fragments)


def _multi_attach_plain(verdict: events.EventVerdict) -> tuple[str, str]:
    own = [server_label(s) for s in verdict.servers]
    if own:
        users, _ = _users(own)
        return (
            f"your home folder is still in use by {users} on another machine",
            f"Stop {'it' if len(own) == 1 else 'them'}, then start this server again.",
        )
    if verdict.others:
        return (
            "your home folder is in use by other work on another machine",
            "Try again once it is free, or ask your administrator.",
        )
    return (
        "your home folder is still in use on another machine",
        "Try again in a minute, or stop your other servers first.",
    )


def _pinned_plain(verdict: events.EventVerdict) -> tuple[str, str]:
    """Why a pod pinned to the home's machine cannot start there, and what helps, as
    ``_refusal_do`` says it of a decision: the fragments' causes that are reason codes follow
    ``placement.STOPPING_HELPS`` (no stop where stopping cannot help) and
    ``advice._PROFILE_CAN_CHANGE``."""
    codes = [f.cause for f in verdict.fragments if f.cause and stopping_helps(f.cause) is not None]
    states = [f.node_state for f in verdict.fragments if f.node_state]
    why = "the machine your home folder is on cannot take it"
    if fit.VOLUME_NODE_AFFINITY in codes:
        why = "another storage folder it uses cannot be reached from where your home folder is"
    elif states:
        why = f"the machine your home folder is on {STATE_WORDS[states[0]]}"
    if nothing_the_user_does_helps(codes):
        return why, "Please ask your administrator."
    if states:
        later = (
            " If it still cannot start in a few minutes, ask your administrator."
            if any(s in fit.NODE_STATES_UNRESPONSIVE for s in states)
            else ""
        )
        return why, f"Stop your other servers.{later}"
    if not profile_can_help(codes):  # a machine's pod limit: no profile changes it
        return why, "Stop your other servers."
    return why, "Stop your other servers, or choose another profile."


def _event_plain(verdict: events.EventVerdict) -> tuple[str, str]:
    """(why it cannot start, what to do) of a failing verdict."""
    code = verdict.code
    if _storage_unavailable(verdict):
        return "the storage it asks for is not available", "Please tell your administrator."
    if code == events.UNSCHEDULABLE_PINNED:
        return _pinned_plain(verdict)
    if code == events.PREEMPTION_STALLED:
        return (
            "there was no room for it, even after making space",
            "Try again in a few minutes. If this keeps happening, tell your administrator.",
        )
    if code == events.NO_SCHEDULER:
        return (
            "nothing in the cluster is placing new servers right now",
            "Please tell your administrator. Trying again will not help until it is fixed.",
        )
    if code == events.NO_SCALE_UP and events.KARPENTER_COLOCATION in verdict.causes:
        return (
            "it must run beside your other servers, and that machine has no room",
            "Stop your other servers, or choose a smaller profile.",
        )
    if code == events.NO_SCALE_UP:
        return (
            "no machine can run it, and the cluster cannot add one that could",
            "Choose a different profile, or ask your administrator.",
        )
    if code == events.MULTI_ATTACH:
        return _multi_attach_plain(verdict)
    if code == events.IMAGE_INVALID:
        return (
            "the software image it needs cannot be used",
            "Choose a different profile, or ask your administrator.",
        )
    if code == events.IMAGE_PULL:
        return (
            "the software image it needs could not be downloaded",
            "Choose a different profile, or ask your administrator.",
        )
    if code == events.UNSCHEDULABLE:
        return (
            f"no machine had room for it within {verdict.grace:g} seconds",
            "Choose a smaller profile or try again later.",
        )
    return "something went wrong", "Please tell your administrator."


#: what the spawn page says while a server waits (``events.WAIT_CODES``); ``{gpu}`` is " with a
#: GPU" for a server that asks for one
_WAIT_WORDS = {
    events.SCALING_UP: "Waiting for a new machine{gpu}: the cluster is adding one",
    events.NO_NODE_YET: "Waiting for a machine that can run this server",
    events.RETRYING_PULL: "Retrying the download of the server's software",
    events.PREEMPTING: "Making room for this server by stopping less urgent work",
}

#: the latest ordinary event (``events.PROGRESS_EVENTS``) in plain words
PROGRESS_WORDS = {
    "Scheduled": "A machine was found for the server",
    "SuccessfulAttachVolume": "Your home folder is ready",
    "FailedMount": "Waiting for your home folder",
    "FailedAttachVolume": "Waiting for your home folder to be freed on another machine",
    "Pulling": "Downloading the server's software",
    "Pulled": "The server's software is ready",
    "Created": "The server was created",
    "Started": "The server started",
}


def event_plain_text(verdict: events.EventVerdict) -> str:
    """What a person reads about an event verdict, in plain words: why the spawn cannot
    succeed and what to do (fail), or what it waits for (wait); "" when there is nothing to
    say."""
    if verdict.action == events.FAIL:
        why, do = _event_plain(verdict)
        return f"This server cannot start. {why[:1].upper()}{why[1:]}. {do}"
    if verdict.code == events.NO_NODE_YET and _storage_unavailable(verdict):
        return "Waiting for the storage of this server"
    if verdict.code == events.PROGRESS:
        return PROGRESS_WORDS.get(verdict.event, "")
    words = _WAIT_WORDS.get(verdict.code, "")
    return words.format(gpu=" with a GPU" if verdict.gpu else "")


def event_headline(
    verdict: events.EventVerdict,
    server_name: str,
    display_names: Mapping[str, str] | None = None,
) -> Headline:
    """The headline of a spawn ended by a hopeless pod event."""
    why, do = _event_plain(verdict)
    what = f"{subject(server_name, display_names)} could not start. {why[:1].upper()}{why[1:]}."
    also = ""
    if verdict.way_out is not None and verdict.code == events.UNSCHEDULABLE_PINNED:
        also = "You can also choose another profile."
    return Headline(what, do, also)


# --------------------------------------------------------------------------------------------------
# a refusal's words, as every surface shows them


def user_headline(
    decision: Decision,
    pod: Obj,
    *,
    username: str,
    server_name: str,
    user_label: str | None = None,
    has_profiles: bool = True,
    display_names: Mapping[str, str] | None = None,
) -> str:
    """The headline of a refusal as text (``simulate --json``'s ``headline``); "" for any
    other verdict."""
    if decision.verdict != REFUSE:
        return ""
    return refusal_headline(
        decision,
        username=username,
        server_name=server_name,
        user_label=user_label,
        has_profiles=has_profiles,
        display_names=display_names,
    ).text


def _layers(
    decision: Decision,
    pod: Obj,
    *,
    username: str,
    server_name: str,
    user_label: str | None,
    has_profiles: bool,
    display_names: Mapping[str, str] | None,
) -> tuple[Headline, list[str]]:
    """A refusal's two layers, the headline and the Details, for the text and the page alike."""
    headline = refusal_headline(
        decision,
        username=username,
        server_name=server_name,
        user_label=user_label,
        has_profiles=has_profiles,
        display_names=display_names,
    )
    details = refusal_details(
        decision, pod, username=username, user_label=user_label, display_names=display_names
    )
    return headline, details


def user_message(
    decision: Decision,
    pod: Obj,
    *,
    username: str,
    server_name: str,
    user_label: str | None = None,
    has_profiles: bool = True,
    display_names: Mapping[str, str] | None = None,
) -> str:
    """Plain text of a refusal: the headline, then the Details.  ``display_names``: server
    name -> the name the user knows (only the user's own servers; see
    :func:`~nebari_colocate.messages.refusals.server_label`)."""
    if decision.verdict != REFUSE:
        return ""
    headline, details = _layers(
        decision,
        pod,
        username=username,
        server_name=server_name,
        user_label=user_label,
        has_profiles=has_profiles,
        display_names=display_names,
    )
    return text_message(headline, details, or_move(decision.way_out, display_names))


def user_html(
    decision: Decision,
    pod: Obj,
    *,
    username: str,
    server_name: str,
    user_label: str | None = None,
    has_profiles: bool = True,
    display_names: Mapping[str, str] | None = None,
    button: str = "",
) -> str:
    """The same refusal as the pages show it (:func:`page_html`): the headline, the way out's
    ``button`` (``way_out.way_out_form_html``) when given, the closed Details; every
    user-controlled string escaped."""
    if decision.verdict != REFUSE:
        return ""
    headline, details = _layers(
        decision,
        pod,
        username=username,
        server_name=server_name,
        user_label=user_label,
        has_profiles=has_profiles,
        display_names=display_names,
    )
    return page_html(headline, details, button, decision.way_out)
