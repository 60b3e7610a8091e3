"""Decision -> user text, user HTML (escaped), operator log line.  (pure)

The user text names the server that cannot start, says why in plain words, lists *their own*
servers that hold the volume and says what to do.  It never names another user's pods or servers.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any, NamedTuple

from . import events, faults, fit
from .objects import GPU_RESOURCES, SERVERNAME_ANNOTATION, Obj, has_owner, is_server, owned_by
from .placement import (
    CLAIM_IN_USE,
    HOME_BEING_MOVED,
    NODE_NOT_FOUND,
    PINNED_BY_ATTACHMENT,
    PINNED_BY_HOLDERS,
    PREMIUM_NODE,
    REFUSE,
    SKIP,
    SPLIT_ATTACHMENT,
    Decision,
)
from .wayout import StepFacts, WayOut


class ResourceWords(NamedTuple):
    """The words for a resource, as each sentence needs them."""

    one: str  # a noun before a noun, or one unit: "a GPU node", "1 GPU"
    amount: str  # an amount of it: "not enough free GPUs", "2 GPUs", "enough CPU"


_RESOURCE_WORDS = {
    "cpu": ResourceWords("CPU", "CPU"),
    "memory": ResourceWords("memory", "memory"),
    "ephemeral-storage": ResourceWords("local disk", "local disk"),
    **{gpu: ResourceWords("GPU", "GPUs") for gpu in GPU_RESOURCES},
}


def _resource_words(resource: str) -> ResourceWords:
    """Words for a resource; an unknown one is named as Kubernetes names it."""
    return _RESOURCE_WORDS.get(resource) or ResourceWords(resource, resource)


def _counted(resource: str, units: str) -> str:
    """``units`` of an extended resource in words: "1 GPU", "2 GPUs"."""
    words = _resource_words(resource)
    return f"{units} {words.one if units == '1' else words.amount}"


#: what every sentence calls the default server (its server name is ``""``); a table cell, where
#: a server name stands, shows :data:`DEFAULT_SERVER_CELL`
DEFAULT_SERVER = "default server"
DEFAULT_SERVER_CELL = "(default)"


def server_label(server_name: str, display_names: Mapping[str, str] | None = None) -> str:
    """How the user knows a server: its display name (jhub-apps' app name) when
    ``display_names`` has one, else its server name; the default server without a display name
    is "your default server" (jhub-apps shows it as "JupyterLab": pass ``{"": "JupyterLab"}``)."""
    shown = (display_names or {}).get(server_name) or server_name
    return f"'{shown}'" if shown else f"your {DEFAULT_SERVER}"


class HolderFacts(NamedTuple):
    """Who holds the volume of a refusal, as the user may be told it: their own servers and
    pods by name, everything else counted (never another user's names)."""

    servers: list[str]  # the user's own servers' names, the default server first
    pods: list[str]  # the user's own pods that are not servers (sorted)
    other_servers: int  # servers of other users
    not_servers: int  # pods of no user: a backup Job, a workflow step


def holder_facts(decision: Decision, username: str, user_label: str | None = None) -> HolderFacts:
    """The :class:`HolderFacts` of a decision's holders, for ``username``."""
    servers: set[str] = set()
    pods: set[str] = set()
    other_servers = not_servers = 0
    for p in decision.holder_pods:
        metadata = p.get("metadata") or {}
        if owned_by(p, username, user_label):
            if is_server(p):
                servers.add((metadata.get("annotations") or {}).get(SERVERNAME_ANNOTATION, ""))
            else:
                pods.add(metadata.get("name", ""))
        elif has_owner(p) and is_server(p):
            other_servers += 1
        else:
            not_servers += 1
    return HolderFacts(
        sorted(servers, key=lambda n: (n != "", n)), sorted(pods), other_servers, not_servers
    )


def own_servers(decision: Decision, username: str, user_label: str | None = None) -> list[str]:
    """Server names of the holders that are servers of ``username`` (sorted, default first)."""
    return holder_facts(decision, username, user_label).servers


def _join(items: list[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def _selector_text(pod: Obj) -> str:
    selector = (pod.get("spec") or {}).get("nodeSelector") or {}
    if selector:
        return ", ".join(f"{k}={v}" for k, v in sorted(selector.items()))
    return "its required node affinity"


#: node state (``fit.NODE_STATE_*``, from its taints or ``spec.unschedulable``) -> what the node
#: "is", after its name
_NODE_STATE_WORDS = {
    fit.NODE_STATE_UNREACHABLE: "is not responding (Kubernetes has lost contact with it)",
    fit.NODE_STATE_NOT_READY: "is not ready (Kubernetes reports it unhealthy)",
    fit.NODE_STATE_CORDONED: "is cordoned (closed to new servers for maintenance)",
    fit.NODE_STATE_PRESSURE: "is short of memory, disk space or processes",
    fit.NODE_STATE_NO_NETWORK: "has no working network",
    fit.NODE_STATE_OUT_OF_SERVICE: "is out of service",
    fit.NODE_STATE_STARTING: "is still starting up",
    fit.NODE_STATE_SHUT_DOWN: "is shut down",
    fit.NODE_STATE_BEING_REMOVED: "is being removed by the cluster autoscaler",
}


#: the same, as a scheduler reason reads ("1 node: not responding")
_NODE_STATE_FRAGMENT_WORDS = {
    fit.NODE_STATE_UNREACHABLE: "not responding (Kubernetes has lost contact with it)",
    fit.NODE_STATE_NOT_READY: "not ready (Kubernetes reports it unhealthy)",
    fit.NODE_STATE_CORDONED: "cordoned (closed to new servers)",
    fit.NODE_STATE_PRESSURE: "short of memory, disk space or processes",
    fit.NODE_STATE_NO_NETWORK: "without a working network",
    fit.NODE_STATE_OUT_OF_SERVICE: "out of service",
    fit.NODE_STATE_STARTING: "still starting up",
    fit.NODE_STATE_SHUT_DOWN: "shut down",
    fit.NODE_STATE_BEING_REMOVED: "being removed by the cluster autoscaler",
}


class _Telling:
    """What the sentences of one decision share: the decision, the pod, and whether the node
    where the volume is attached has been named yet (it is said once; later sentences just
    name the node)."""

    def __init__(self, decision: Decision, pod: Obj) -> None:
        self.decision = decision
        self.pod = pod
        self.node = decision.node
        self.shortfalls = {s.resource: s for s in (decision.fit.shortfalls if decision.fit else [])}
        self._placed = False

    def where(self) -> str:
        if not self._placed:
            self._placed = True
            return f"node {self.node}, where your volume is attached,"
        return f"node {self.node}"


def _cordoned_words(t: _Telling, code: str) -> list[str]:
    return [f"{t.where()} {_NODE_STATE_WORDS[fit.NODE_STATE_CORDONED]}"]


def _node_selector_words(t: _Telling, code: str) -> list[str]:
    return [
        f"this server must run on a different kind of node ({_selector_text(t.pod)}); "
        f"{t.where()} is not one"
    ]


def _taint_words(t: _Telling, code: str) -> list[str]:
    taints = t.decision.fit.taints if t.decision.fit else []
    # A taint for the node's state is told as that state (once; "cordoned" is said by
    # node-unschedulable when both are there), never as a reservation.
    sentences = []
    told = set()
    if fit.NODE_UNSCHEDULABLE in t.decision.reasons:
        told.add(fit.NODE_STATE_CORDONED)
    for state in dict.fromkeys(s for s in map(fit.node_state, taints) if s):
        if state not in told:
            told.add(state)
            sentences.append(f"{t.where()} {_NODE_STATE_WORDS[state]}")
    reserved = [taint for taint in taints if not fit.node_state(taint)]
    if reserved or not taints:
        text = ", ".join(
            f"{r.get('key')}{'=' + r['value'] if r.get('value') else ''}:{r.get('effect')}"
            for r in reserved
        )
        sentences.append(f"{t.where()} is reserved ({text}) and this server does not tolerate it")
    return sentences


def _insufficient_words(t: _Telling, code: str) -> list[str]:
    resource = fit.insufficient_resource(code) or ""
    words = _resource_words(resource)
    short = t.shortfalls.get(resource)
    if short and short.allocatable <= 0:
        return [f"it needs a {words.one} node ({resource}); {t.where()} has none"]
    if short:
        have = fit.format_units(resource, max(short.free, 0))
        want = fit.format_units(resource, short.requested)
        if resource not in ("cpu", "memory", "ephemeral-storage"):
            have, want = _counted(resource, have), _counted(resource, want)
        return [f"it needs {want} but {t.where()} has only {have} free"]
    return [f"{t.where()} does not have enough {words.amount} free"]


def _too_many_pods_words(t: _Telling, code: str) -> list[str]:
    limit = t.decision.fit.max_pods if t.decision.fit else None
    limit_text = f" ({limit})" if limit is not None else ""
    return [f"{t.where()} already runs as many pods as it may{limit_text}"]


def _volume_node_affinity_words(t: _Telling, code: str) -> list[str]:
    return [f"another volume this server mounts cannot be used on node {t.node}"]


def _claim_in_use_words(t: _Telling, code: str) -> list[str]:
    return [
        f"the volume {_join(t.decision.busy_claims)} may be used by only one server at a "
        "time and is in use"
    ]


def _split_attachment_words(t: _Telling, code: str) -> list[str]:
    return [
        f"your volume {_join(t.decision.claims)} is in use on more than one node "
        f"({_join(t.decision.split_nodes)}), which needs an administrator to resolve"
    ]


def _node_not_found_words(t: _Telling, code: str) -> list[str]:
    return [
        f"your volume is still in use on node {t.node}, which no longer exists (it may "
        "still be attached to that node)"
    ]


def _home_being_moved_words(t: _Telling, code: str) -> list[str]:
    if t.decision.moving_stalled:
        stopped = _clock(t.decision.moving_stalled)
        return [
            "the move of your home folder to new storage stopped part-way"
            + (f" (at {stopped})" if stopped else "")
            + " and waits for an administrator"
        ]
    since = _clock(t.decision.moving_since)
    return [
        "your home folder is being moved to new storage by an administrator"
        + (f" (since {since})" if since else "")
    ]


def _premium_node_words(t: _Telling, code: str) -> list[str]:
    return [
        f"{t.where()} is a GPU node and this server needs no GPU; starting it there "
        "would keep the expensive node running"
    ]


#: reason code (``placement.REASON_CODES``, the fit check's among them) -> its sentences, in
#: the order the codes come; ``insufficient:<resource>`` has one entry for every resource
_REASON_WORDS: dict[str, Callable[[_Telling, str], list[str]]] = {
    fit.NODE_UNSCHEDULABLE: _cordoned_words,
    fit.NODE_SELECTOR: _node_selector_words,
    fit.TAINT: _taint_words,
    fit.INSUFFICIENT_ANY: _insufficient_words,
    fit.TOO_MANY_PODS: _too_many_pods_words,
    fit.VOLUME_NODE_AFFINITY: _volume_node_affinity_words,
    CLAIM_IN_USE: _claim_in_use_words,
    SPLIT_ATTACHMENT: _split_attachment_words,
    NODE_NOT_FOUND: _node_not_found_words,
    HOME_BEING_MOVED: _home_being_moved_words,
    PREMIUM_NODE: _premium_node_words,
}


def _unworded(t: _Telling, code: str) -> list[str]:
    # Never reached while the guard test (every code has its words) passes; a code without
    # words still says something rather than "cannot start: .".
    return [f"the check refused it ({code})"]


def reason_sentences(decision: Decision, pod: Obj) -> list[str]:
    """One plain sentence per reason code (two or more for a taint that tells a node state)."""
    telling = _Telling(decision, pod)
    sentences = []
    for code in decision.reasons:
        family = fit.INSUFFICIENT_ANY if fit.insufficient_resource(code) is not None else code
        sentences.extend(_REASON_WORDS.get(family, _unworded)(telling, code))
    return sentences


def _exclusivity(decision: Decision) -> str:
    if CLAIM_IN_USE in decision.reasons:  # ReadWriteOncePod: one pod, not one node
        return "Your volume can be used by one server at a time"
    return "Your volume can be attached to one node at a time"


def subject(server_name: str, display_names: Mapping[str, str] | None = None) -> str:
    """ "Your server 'My Dashboard'" / "Your default server": the start of every message."""
    if (display_names or {}).get(server_name) or server_name:
        return f"Your server {server_label(server_name, display_names)}"
    return f"Your {DEFAULT_SERVER}"


def _clock(timestamp: str | None) -> str:
    """``2026-12-01T09:12:00Z`` -> ``09:12 UTC``; anything else as it is."""
    if not timestamp:
        return ""
    _, _, time = timestamp.partition("T")
    return f"{time[:5]} UTC" if len(time) >= 5 and time[2] == ":" else timestamp


#: what a user is told while their home is moved (a move takes minutes for most homes)
HOME_MOVE_ADVICE = (
    "Your files are kept safe meanwhile. Try again in a few minutes; if it still cannot start "
    "after an hour, contact your administrator."
)


#: what a user is told when the move of their home gave up part-way (only an administrator can
#: finish it, or put it back, with ``nebari-colocate migrate apply|rollback``)
HOME_MOVE_STALLED_ADVICE = (
    "Your files are kept safe. Trying again will not help until it is fixed: ask your "
    "administrator to finish the move or put your home back (nebari-colocate migrate)."
)


def _advice(
    decision: Decision,
    holders: list[str],
    has_profiles: bool = True,
    own_pods: int = 0,
    others: int = 0,
) -> str:
    if HOME_BEING_MOVED in decision.reasons and decision.moving_stalled:
        return HOME_MOVE_STALLED_ADVICE
    if HOME_BEING_MOVED in decision.reasons:
        return HOME_MOVE_ADVICE
    if SPLIT_ATTACHMENT in decision.reasons:
        return "Please contact your administrator."
    if NODE_NOT_FOUND in decision.reasons:
        return (
            "Please contact your administrator: the volume must be released from the node that "
            "is gone before it can be used elsewhere."
        )
    if not holders and decision.holder_pods and decision.pinned_by == PINNED_BY_HOLDERS:
        # Only pods that are not servers hold it: nothing on the hub stops them.
        if own_pods:
            stop = "wait for your other pods using it to finish (or delete them)"
        else:
            stop = "wait until the other pods using it have finished (ask your administrator)"
    else:
        stop = f"stop {_join(holders)} first" if holders else "stop the servers using it first"
    if decision.pinned_by == PINNED_BY_ATTACHMENT and not holders:
        return "The volume is still being released from its last node: try again in a minute."
    states = fit.node_states(decision.fit) if decision.fit else []
    if others:
        # no profile fits a cordoned, unreachable or failing node either
        return _shared_advice(decision, has_profiles and not states, others)
    if CLAIM_IN_USE in decision.reasons:
        # ReadWriteOncePod: no node and no profile helps; only the other server stopping does.
        return f"To start it, {stop}."
    if states:
        # No profile fits a cordoned, unreachable or failing node: only freeing the volume helps.
        return f"To start it, {stop}.{_node_state_advice(states, decision.node)}"
    if not has_profiles:  # no profile to choose on this hub: do not suggest one
        return f"To start it, {stop}."
    if PREMIUM_NODE in decision.reasons and len(decision.reasons) == 1:
        return f"To start it, {stop}, or choose a profile with a GPU."
    return f"To start it, {stop}, or choose a profile that fits on node {decision.node}."


def _node_state_advice(states: Sequence[str], node: str | None) -> str:
    """What else to know when the pinned node's state, not the profile, is in the way."""
    if any(s in fit.NODE_STATES_UNRESPONSIVE for s in states):
        return (
            f" Node {node} may not let them stop cleanly: if this server still cannot start in "
            f"a few minutes, ask your administrator to release the volume from node {node}."
        )
    return ""


def _shared_advice(decision: Decision, has_profiles: bool, others: int) -> str:
    """Servers of other users hold the volume: nothing the user stops frees it (counted,
    never named); a profile that fits the node, or an administrator, can help."""
    why = (
        f"Stopping your own servers cannot free it while {others} server(s) of other users "
        "use it too."
    )
    admin = (
        "ask your administrator: a volume that several users' servers use needs storage "
        "that any node can use (ReadWriteMany)"
    )
    if CLAIM_IN_USE in decision.reasons or not has_profiles:
        return f"{why} To start it, {admin}."
    if PREMIUM_NODE in decision.reasons and len(decision.reasons) == 1:
        return f"{why} To start it, choose a profile with a GPU, or {admin}."
    return f"{why} To start it, choose a profile that fits on node {decision.node}, or {admin}."


class _Refusal(NamedTuple):
    """The parts of a refusal's message, computed once and rendered as text or as HTML."""

    subject: str  # "Your server 'big-app'"
    reasons: list[str]  # one sentence per reason (:func:`reason_sentences`)
    exclusivity: str  # "Your volume can be attached to one node at a time"
    servers: list[str]  # the user's own servers holding the volume, as the user knows them
    in_use: list[str]  # every other holder: the user's own pods named, the rest counted
    advice: str  # what to do
    way_out: str | None  # the way out's action (:func:`way_out_sentence`), if there is one


def _refusal(
    decision: Decision,
    pod: Obj,
    *,
    username: str,
    server_name: str,
    user_label: str | None,
    has_profiles: bool,
    display_names: Mapping[str, str] | None,
) -> _Refusal:
    facts = holder_facts(decision, username, user_label)
    servers = [server_label(n, display_names) for n in facts.servers]
    in_use = [f"your pod(s) {_join(facts.pods)} (not servers)"] if facts.pods else []
    in_use += counted_holders(other_servers=facts.other_servers, not_servers=facts.not_servers)
    way_out = decision.way_out
    return _Refusal(
        subject(server_name, display_names),
        reason_sentences(decision, pod),
        _exclusivity(decision),
        servers,
        in_use,
        _advice(decision, servers, has_profiles, len(facts.pods), facts.other_servers),
        None if way_out is None else way_out_sentence(way_out, display_names),
    )


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
    """Plain text for the spawn page.  ``display_names``: server name -> the name the user
    knows (only the user's own servers; see :func:`server_label`)."""
    if decision.verdict != REFUSE:
        return ""
    r = _refusal(
        decision,
        pod,
        username=username,
        server_name=server_name,
        user_label=user_label,
        has_profiles=has_profiles,
        display_names=display_names,
    )
    parts = [f"{r.subject} cannot start: {'; '.join(r.reasons)}."]
    in_use = ([_join(r.servers)] if r.servers else []) + r.in_use
    if in_use:
        parts.append(f"{r.exclusivity} and is in use by {_join(in_use)}.")
    parts.append(r.advice)
    if r.way_out is not None:
        parts.append(f"The way out: {r.way_out}")
    return " ".join(parts)


def way_out_sentence(way_out: WayOut, display_names: Mapping[str, str] | None = None) -> str:
    """ "Stop 'Pandas App' and start 'JupyterLab'.": the way out's action, with the names the
    user knows (:func:`server_label`); the words of its button."""
    stops = [server_label(n, display_names) for n in way_out.stop]
    return f"Stop {_join(stops)} and start {server_label(way_out.start, display_names)}."


def counted_holders(
    *, other_servers: int = 0, not_servers: int = 0, unknown: int = 0, elsewhere: int = 0
) -> list[str]:
    """The holders that are not the user's own, counted (never named), in the same words
    before a spawn (a refusal) and after (a Multi-Attach event)."""
    words = []
    if other_servers:
        words.append(f"{other_servers} server(s) of other users")
    if not_servers:
        words.append(f"{not_servers} other pod(s) that are not JupyterHub servers (such as a job)")
    if unknown:
        words.append(f"{unknown} other pod(s)")
    if elsewhere:
        words.append(f"{elsewhere} pod(s) in other namespaces")
    return words


def user_html(
    decision: Decision,
    pod: Obj,
    *,
    username: str,
    server_name: str,
    user_label: str | None = None,
    has_profiles: bool = True,
    display_names: Mapping[str, str] | None = None,
) -> str:
    """The same message as HTML; every user-controlled string (server and display names) is
    escaped."""
    if decision.verdict != REFUSE:
        return ""
    r = _refusal(
        decision,
        pod,
        username=username,
        server_name=server_name,
        user_label=user_label,
        has_profiles=has_profiles,
        display_names=display_names,
    )
    esc = html.escape
    reasons = "".join(f"<li>{esc(s)}</li>" for s in r.reasons)
    # <div>, not <p>: JupyterHub's error page puts the message inside a <p> of its own; and
    # left-aligned, as the spawn pages centre their text.
    body = [
        f"<div>{esc(r.subject)} cannot start:</div>",
        f'<ul class="colocate-reasons">{reasons}</ul>',
    ]
    in_use = r.servers + r.in_use  # one item per server here, where the text joins them
    if in_use:
        items = "".join(f"<li>{esc(n)}</li>" for n in in_use)
        body.append(
            f"<div>{esc(r.exclusivity)} and is in use by:</div>"
            f'<ul class="colocate-holders">{items}</ul>'
        )
    body.append(f"<div>{esc(r.advice)}</div>")
    if r.way_out is not None:
        body.append(f'<div class="colocate-way-out">The way out: {esc(r.way_out)}</div>')
    return f'<div class="colocate-message" style="text-align: left">{"".join(body)}</div>'


def outcome_lines(decision: Decision, message: str) -> list[str]:
    """What ``explain`` and ``simulate`` say a decision does: the user message of a refusal
    (``message``), else a sentence on where the server starts; then the warnings."""
    if decision.verdict == REFUSE:
        lines = [message]
    elif decision.verdict == SKIP:
        lines = [
            "Its volumes can be used from any node: no co-location needed, the server starts "
            "wherever the scheduler likes."
        ]
    elif decision.node:
        lines = [f"The server starts on node {decision.node}, beside the servers using its volume."]
    else:
        lines = ["The server starts on any node; later servers of this user will join it there."]
    lines.extend(f"warning: {w}" for w in decision.warnings)
    return lines


def missing_priority_class_note(name: str, priority: int) -> str:
    """``simulate``'s input warning for a pod naming a PriorityClass the dump lacks."""
    return (
        f"the pod names PriorityClass {name!r}, which the dump does not contain: judged at "
        f"priority {priority} (add kubectl get priorityclasses -o yaml)"
    )


def simulated_namespace_lines(
    namespace: str, namespace_from: str, missing_claims: Sequence[str], storage_access_mode: str
) -> list[str]:
    """What ``simulate`` says of the namespace it judged a manifest without
    ``metadata.namespace`` in (``namespace_from``: ``pod``, ``dump`` or ``assumed``), and of the
    pod's claims the dump does not have there."""
    lines = []
    if namespace_from == "dump":
        lines.append(f"namespace: {namespace} (the pod manifest names none; taken from the dump)")
    elif namespace_from == "assumed":
        lines.append(
            f"warning: namespace-assumed: the pod manifest names no namespace and the dump "
            f"does not tell one; judged in namespace {namespace} (set metadata.namespace)"
        )
    if missing_claims:
        lines.append(
            f"warning: claim-not-found: {_join(list(missing_claims))} not in the dump in "
            f"namespace {namespace}; judged as {storage_access_mode} (--storage-access-mode)"
        )
    return lines


def operator_line(decision: Decision, *, username: str, server_name: str) -> str:
    """One log line with codes, node and holders, for the hub log."""
    fields = [
        f"verdict={decision.verdict}",
        f"user={username!r}",
        f"server={server_name!r}",
        f"node={decision.node or '-'}",
        f"pinned_by={decision.pinned_by or '-'}",
        f"reasons={','.join(sorted(decision.reasons)) or '-'}",
        f"warnings={','.join(sorted(decision.warnings)) or '-'}",
        f"holders={','.join(decision.holders) or '-'}",
        f"claims={','.join(decision.claims) or '-'}",
        f"verified={str(decision.verified).lower()}",
    ]
    if decision.preferred:
        fields.append("required=false")
    if decision.notes:
        fields.append(f"notes={'; '.join(decision.notes)!r}")
    return "colocate " + " ".join(fields)


# --------------------------------------------------------------------------------------------------
# the Kubernetes API failing a spawn (unreachable, overloaded, too slow): words instead of the raw
# client exception (aiohttp.ClientConnectorError, "Could not create PVC ...")

#: fault code (``faults.FAULT_CODES``) -> what happened, in words a user reads
API_FAULTS = {
    faults.UNREACHABLE: "the Kubernetes API server could not be reached (it may be restarting)",
    faults.OVERLOADED: "the Kubernetes API server is overloaded and asked to retry later",
    faults.SERVER_ERROR: "the Kubernetes API server failed with an internal error",
    faults.TIMEOUT: "the Kubernetes API server did not answer in time",
    faults.REJECTED: "the Kubernetes API server refused to create it",
}


def api_fault_message(fault: str, *, server_name: str, detail: str = "") -> str:
    """Plain text for a spawn the API failed: what happened, and what to do (try again)."""
    what = API_FAULTS.get(fault, API_FAULTS[faults.SERVER_ERROR])
    if fault == faults.REJECTED:
        advice = "Please contact your administrator" + (f" ({detail})." if detail else ".")
    else:
        advice = "Nothing of it was left running; please try again in a minute."
    return f"{subject(server_name)} could not start: {what}. {advice}"


def api_fault_html(fault: str, *, server_name: str, detail: str = "") -> str:
    """The same message as HTML (the server name and the detail are escaped)."""
    text = html.escape(api_fault_message(fault, server_name=server_name, detail=detail))
    return f'<div class="colocate-message" style="text-align: left">{text}</div>'


def api_fault_operator_line(
    fault: str, exc: BaseException, *, username: str, server_name: str, pod_name: str
) -> str:
    """The hub-log line of a spawn the API failed: the fault code and the client's exception."""
    error = " ".join(str(exc).split())[:300]
    return (
        f"colocate api-fault={fault} user={username!r} server={server_name!r} "
        f"pod={pod_name} error={type(exc).__name__}: {error}"
    )


def late_pod_delete_line(pod_name: str, created: object, started: float) -> str:
    """The hub-log line of deleting a pod the API created after its spawn had failed."""
    since = datetime.fromtimestamp(started, timezone.utc).isoformat()
    return (
        f"colocate: deleting pod {pod_name} of a spawn the API failed (created at {created}, "
        f"after the spawn that started at {since} gave up)"
    )


def late_pod_delete_failed_line(pod_name: str, exc: BaseException) -> str:
    """The hub-log line of a failed delete of such a pod (it is retried)."""
    return f"colocate: delete of {pod_name} failed ({exc}); retrying"


# --------------------------------------------------------------------------------------------------
# configure(c): hand-written co-location affinity taken out of a hub config (helm.py)


def removed_affinity_line(removed: Iterable[tuple[str, str]]) -> str:
    """The hub-log line of hand-written co-location terms taken out of the hub config, from
    (where, label key) pairs: ("c.KubeSpawner.extra_pod_config", "hub.jupyter.org/username")."""
    places: dict[str, list[str]] = {}
    for where, key in removed:
        places.setdefault(where, [])
        if key not in places[where]:
            places[where].append(key)
    listed = "; ".join(f"{where} (term on {', '.join(keys)})" for where, keys in places.items())
    return (
        f"nebari-colocate: removed hand-written co-location pod affinity from {listed}: "
        "the spawner adds its own only when a volume needs it"
    )


def cleaned_when_called_line(wheres: Iterable[str]) -> str:
    """The hub-log line of config callables whose results configure(c) cleans when called."""
    return (
        f"nebari-colocate: {', '.join(wheres)}: a callable; co-location pod affinity terms are "
        "removed from what it returns, each time it is called"
    )


def dropped_manifest_terms_line(pod_name: str, label_keys: Iterable[str]) -> str:
    """The hub-log line of user co-location terms taken out of a pod manifest (set outside the
    hub config configure(c) cleans, e.g. by a pre_spawn_hook)."""
    return (
        f"colocate: removed hand-written co-location pod affinity (term on "
        f"{', '.join(label_keys)}) from pod {pod_name}: the spawner adds its own only when a "
        "volume needs it"
    )


# --------------------------------------------------------------------------------------------------
# pod event verdicts (events.classify): why a spawn was ended, or what it waits for

#: scheduler and cluster-autoscaler fragment cause (``events.FRAGMENT_*``) -> words
_FRAGMENT_WORDS = {
    events.FRAGMENT_SINGLE_POD_VOLUME: "its volume allows a single pod, and another pod uses it",
    events.FRAGMENT_PINNED_ELSEWHERE: "ruled out by a pin to one node",
    events.FRAGMENT_ANTI_AFFINITY: "kept apart from other pods (anti-affinity)",
    events.FRAGMENT_POD_AFFINITY: "not the node your other servers run on",
    events.FRAGMENT_NODE_SELECTOR: "not the kind of node this server asks for",
    events.FRAGMENT_TAINT: "reserved by a taint this server does not tolerate",
    events.FRAGMENT_CORDONED: "cordoned (closed to new servers)",
    events.FRAGMENT_TOO_MANY_PODS: "already running as many pods as it may",
    events.FRAGMENT_VOLUME_NODE_AFFINITY: "unable to reach the storage volume",
    events.FRAGMENT_PORTS: "the port this server needs is taken",
    events.FRAGMENT_SPREAD: "would break a spread constraint",
    events.FRAGMENT_VOLUME_COUNT: "no room for more volumes",
    events.FRAGMENT_UNBOUND_CLAIM: "its storage volume is not ready yet",
    events.FRAGMENT_MAX_SIZE: "the node groups that fit are at their maximum size",
    events.FRAGMENT_BACKOFF: "a recent attempt to add such a node failed",
    events.FRAGMENT_LIMIT: "the cluster has reached its size limit",
    events.FRAGMENT_NOT_READY: "the node group is not ready to grow",
}

#: what the spawn page says for the latest ordinary event (``events.PROGRESS_EVENTS``)
_PROGRESS_WORDS = {
    "Scheduled": "Assigned to a node",
    "SuccessfulAttachVolume": "Storage volume attached",
    "FailedMount": "Waiting for the storage volume to be mounted",
    "FailedAttachVolume": "Waiting for the storage volume to be detached from another node",
    "Pulling": "Downloading the server image",
    "Pulled": "Server image ready",
    "Created": "Server container created",
    "Started": "Server container started",
}


def fragment_words(fragment: events.Fragment) -> str:
    """Plain words for one scheduler or cluster-autoscaler reason; as written when not known."""
    if fragment.cause == events.FRAGMENT_INSUFFICIENT:
        return f"not enough free {_resource_words(fragment.resource).amount}"
    if fragment.node_state:
        return _NODE_STATE_FRAGMENT_WORDS[fragment.node_state]
    return _FRAGMENT_WORDS.get(fragment.cause or "") or fragment.text.strip()


def _fragments_words(fragments: Sequence[events.Fragment]) -> list[str]:
    return _unique([fragment_words(f) for f in fragments])


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def _unique(items: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _scheduler_summary(fragments: Sequence[events.Fragment]) -> str:
    parts = []
    for f in fragments:
        words = fragment_words(f)
        parts.append(f"{_plural(f.count, 'node')}: {words}" if f.count is not None else words)
    return "; ".join(_unique(parts))


def _pinned_text(verdict: events.EventVerdict) -> str:
    if _storage_unavailable(verdict):
        return _storage_unavailable_text(verdict)
    node = verdict.node
    why = "; ".join(_fragments_words(verdict.fragments)) or "the scheduler found no room there"
    states = [f.node_state for f in verdict.fragments if f.node_state]
    if states:
        # No profile fits a cordoned or failing node: only freeing the volume helps.
        advice = "Stop your other servers that use the volume." + _node_state_advice(states, node)
    else:
        advice = (
            "Stop your other servers that use the volume, or choose a profile that fits on "
            f"node {node}."
        )
    # A placement by preemption the scheduler gave up (the nomination dropped).
    dropped = (
        " The scheduler first planned to make room there by stopping lower-priority pods, then "
        "gave that up."
        if verdict.victims
        else ""
    )
    return (
        f"This server cannot start on node {node}, where your storage volume is attached: "
        f"{why}.{dropped} A new node cannot help, because the volume can be attached to only "
        f"one node at a time. {advice}"
    )


def _preempting_text(verdict: events.EventVerdict) -> str:
    on = f" on node {verdict.node}" if verdict.node else ""
    pods = (
        _plural(verdict.victims, "lower-priority pod") if verdict.victims else "lower-priority pods"
    )
    return f"Making room for this server{on}: the scheduler is stopping {pods} there"


def _preemption_stalled_text(verdict: events.EventVerdict) -> str:
    on = f" on node {verdict.node}" if verdict.node else ""
    return (
        f"This server could not start: the scheduler began making room for it{on} by stopping "
        f"lower-priority pods, but it still could not place it after {verdict.grace:g} seconds. "
        "Try again in a few minutes; if this keeps happening, tell your administrator."
    )


def _no_scheduler_text(verdict: events.EventVerdict) -> str:
    return (
        "No scheduler has picked up your server: the cluster's scheduler "
        f"'{verdict.scheduler or events.DEFAULT_SCHEDULER}' may not be running. An administrator "
        "must fix it; trying again will not help until then."
    )


def _no_scale_up_text(verdict: events.EventVerdict) -> str:
    if verdict.causes:
        return karpenter_refusal_text(verdict.causes, dict(verdict.requests))
    return no_scale_up_text(_fragments_words(verdict.fragments))


def _storage_unavailable(verdict: events.EventVerdict) -> bool:
    """The scheduler waits for a claim no one binds (``pod has unbound immediate
    PersistentVolumeClaims``: a storage class that does not exist, or has no provisioner): no
    node, profile or retry helps."""
    return any(f.cause == events.FRAGMENT_UNBOUND_CLAIM for f in verdict.fragments)


def _storage_unavailable_text(verdict: events.EventVerdict) -> str:
    waited = f" for {verdict.grace:g} seconds" if verdict.grace else ""
    return (
        f"This server cannot start: its storage volume has not been provided{waited}, so the "
        "storage it asks for is not available (for example, its storage class does not exist "
        "or nothing provisions it). Choosing another profile will not help: an administrator "
        "must fix the storage. Please tell your administrator."
    )


def _unschedulable_text(verdict: events.EventVerdict) -> str:
    if _storage_unavailable(verdict):
        return _storage_unavailable_text(verdict)
    summary = _scheduler_summary(verdict.fragments)
    why = f" ({summary})" if summary else ""
    return (
        f"No node can run this server{why}, and none became free within {verdict.grace:g} "
        "seconds. Choose a smaller profile or try again later; if this keeps happening, tell "
        "your administrator."
    )


def _no_node_yet_text(verdict: events.EventVerdict) -> str:
    if _storage_unavailable(verdict):
        # Not a node the scheduler waits for: the claim's volume (a new one may take a minute).
        return "Waiting for the storage volume of this server to be provided"
    summary = _scheduler_summary(verdict.fragments)
    return "Waiting for a node that can run this server" + (f" ({summary})" if summary else "")


def _scaling_up_text(verdict: events.EventVerdict) -> str:
    return scale_up_text(gpu=verdict.gpu)


def _multi_attach_text(verdict: events.EventVerdict) -> str:
    users = [server_label(s) for s in verdict.servers]
    unknown = verdict.others - verdict.other_servers - verdict.not_servers - verdict.elsewhere
    users += counted_holders(
        other_servers=verdict.other_servers,
        not_servers=verdict.not_servers,
        unknown=max(unknown, 0),
        elsewhere=verdict.elsewhere,
    )
    if not users:
        return (
            "This server cannot start: its storage volume is still attached to another node "
            "(a server that used it may still be shutting down). Try again in a minute, or stop "
            "your other servers first."
        )
    # Advise stopping only what the user can stop: their own servers.
    if verdict.servers:
        own = _join([server_label(s) for s in verdict.servers])
        advice = f"Stop {own}, then start this one again."
    else:
        advice = "Try again once it is free, or ask your administrator."
    return (
        "This server cannot start: its storage volume is attached to another node, where it "
        f"is in use by {_join(users)}. The volume can be attached to only one node at a "
        f"time. {advice}"
    )


def _shown_image(verdict: events.EventVerdict) -> str:
    return f' "{verdict.image}"' if verdict.image else ""


def _image_invalid_text(verdict: events.EventVerdict) -> str:
    shown = _shown_image(verdict)
    if events.IMAGE_NEVER_PULL in verdict.causes:
        why = (
            f"its image{shown} is not on the node, and the image pull policy forbids downloading it"
        )
    else:
        why = f"its image name{shown} is not valid"
    return (
        f"This server cannot start: {why}. Choose a different profile, or ask your administrator."
    )


#: why the registry would not give the image (``events.PULL_*``) -> words after the grace
_PULL_WORDS = {
    events.PULL_NOT_FOUND: " (the image was not found)",
    events.PULL_DENIED: " (access to the image was denied)",
}


def _image_pull_text(verdict: events.EventVerdict) -> str:
    hint = "".join(_PULL_WORDS.get(c, "") for c in verdict.causes)
    return (
        f"This server cannot start: its image{_shown_image(verdict)} could not be downloaded "
        f"for {verdict.grace:g} seconds{hint}. Choose a different profile, or ask your "
        "administrator."
    )


def _retrying_pull_text(verdict: events.EventVerdict) -> str:
    return f"Retrying the download of image{_shown_image(verdict)}"


def _progress_text(verdict: events.EventVerdict) -> str:
    return _PROGRESS_WORDS.get(verdict.event, "")


_EVENT_WORDS: dict[str, Callable[[events.EventVerdict], str]] = {
    events.UNSCHEDULABLE_PINNED: _pinned_text,
    events.PREEMPTION_STALLED: _preemption_stalled_text,
    events.NO_SCHEDULER: _no_scheduler_text,
    events.NO_SCALE_UP: _no_scale_up_text,
    events.MULTI_ATTACH: _multi_attach_text,
    events.IMAGE_INVALID: _image_invalid_text,
    events.UNSCHEDULABLE: _unschedulable_text,
    events.IMAGE_PULL: _image_pull_text,
    events.SCALING_UP: _scaling_up_text,
    events.NO_NODE_YET: _no_node_yet_text,
    events.RETRYING_PULL: _retrying_pull_text,
    events.PROGRESS: _progress_text,
    events.PREEMPTING: _preempting_text,
}


def event_text(verdict: events.EventVerdict) -> str:
    """What a person reads about an event verdict: why the spawn cannot succeed (fail), or what
    it waits for (wait); "" when there is nothing to say."""
    words = _EVENT_WORDS.get(verdict.code)
    return words(verdict) if words else ""


def event_failure(
    verdict: events.EventVerdict,
    server_name: str,
    display_names: Mapping[str, str] | None = None,
) -> tuple[str, str]:
    """(text, html) for a spawn ended by a hopeless pod event (the server name is escaped)."""
    why = event_text(verdict) or "The server could not start."
    message = f"{subject(server_name, display_names)} could not start: {why}"
    return message, (
        f'<div class="colocate-message" style="text-align: left">{html.escape(message)}</div>'
    )


def event_operator_line(
    verdict: events.EventVerdict, *, username: str, server_name: str, pod_name: str
) -> str:
    """The hub-log line of a spawn ended by a pod event: its code and the raw event, and the
    scheduler that spoke (or, ``no-scheduler``, the one the pod names and nobody runs)."""
    scheduler = f" scheduler={verdict.scheduler!r}" if verdict.scheduler else ""
    return (
        f"colocate event-verdict={verdict.action} reason={verdict.reason} user={username!r} "
        f"server={server_name!r} pod={pod_name}{scheduler} event={verdict.raw!r}"
    )


#: what stands in the spawn page for the name of a pod that is not the user's own
ANOTHER_POD = "(another pod)"
#: the event fields that may name an object other than the event's own pod
_NAMING_FIELDS = ("message", "note")


def _redact_names(text: str, own: Collection[str], strangers: Collection[str]) -> str:
    listed = events.used_by_names(text)
    names = {n for n in listed if n not in own} | {n for n in strangers if n and n not in own}
    # Longest first, so "jupyter-bob--lab" goes before "jupyter-bob"; a name counts only as a
    # whole word (pod names are DNS subdomains: letters, digits, "-" and ".").
    for name in sorted(names, key=len, reverse=True):
        text = re.sub(rf"(?<![\w.-]){re.escape(name)}(?![\w-]|\.[\w-])", ANOTHER_POD, text)
    return text


def browser_event(
    event: Mapping[str, Any], own_pods: Collection[str], other_pods: Collection[str] = ()
) -> dict[str, Any]:
    """The event as the spawn page may receive it (``raw_event`` of the progress stream, which
    JupyterHub sends to the browser as it is): pod names other than ``own_pods`` (the user's own
    pods) are replaced by :data:`ANOTHER_POD` in its text, both the names an attach/detach
    message lists ("Volume is already used by pod(s) jupyter-bob--…") and any of
    ``other_pods`` (the other pods the hub knows of), and a ``related`` object that is not one of
    the user's own pods (the preemptor a scheduler names) is dropped."""
    shown = dict(event)
    for key in _NAMING_FIELDS:
        if isinstance(shown.get(key), str):
            shown[key] = _redact_names(shown[key], own_pods, other_pods)
    related = shown.get("related")
    if related is not None and (
        not isinstance(related, Mapping)
        or related.get("kind") != "Pod"
        or related.get("name") not in own_pods
    ):
        del shown["related"]
    return shown


def progress_line(event: Mapping[str, Any], words: str) -> str:
    """The spawn page's line for one pod event: ``words`` (the verdict's, :func:`event_text`)
    for the events they tell (``events.PLAIN_LANGUAGE_EVENTS``), else the event as Kubernetes
    wrote it."""
    if words and events.told_in_words(event):
        return words
    return f"[{event.get('type')}] {event.get('message')}"


# --- autoscaler verdicts ---------------------------------------------------------------------

#: Karpenter cause code (``events.KARPENTER_*``) -> why no new node can run the server. The
#: codes are listed most telling first: a NodePool whose taint or requirements this server does
#: not match was never meant for it, so its reason is told only when nothing better is known.
_KARPENTER_CAUSE_WORDS: tuple[tuple[str, str], ...] = (
    (
        events.KARPENTER_COLOCATION,
        "it must run on the node where your other servers are (your storage volume can be "
        "attached to one node at a time), and no new node can be that node",
    ),
    (events.KARPENTER_LIMITS, "the node pools that could run it have reached their size limits"),
    (
        events.KARPENTER_NO_INSTANCE_TYPE,
        "no machine type is big enough for what it asks for{requests}",
    ),
    (
        events.KARPENTER_ANTI_AFFINITY,
        "it must be kept apart from other pods, and no new node can do that",
    ),
    (events.KARPENTER_SPREAD, "a new node would break its spread constraint"),
    (events.KARPENTER_REQUIREMENTS, "no node pool offers the kind of node it asks for"),
    (
        events.KARPENTER_TAINT,
        "the node pools that could run it are reserved for other kinds of servers",
    ),
)
_KARPENTER_MISMATCH = frozenset({events.KARPENTER_REQUIREMENTS, events.KARPENTER_TAINT})


def _requests_words(requests: Mapping[str, str]) -> str:
    # Only the GPUs: Karpenter quotes memory in bytes and adds its own pod count.
    gpus = [requests[r] for r in GPU_RESOURCES if requests.get(r)]
    if not gpus:
        return ""
    return f" ({' and '.join(gpus)} GPU{'s' if gpus != ['1'] else ''})"


def karpenter_refusal_text(causes: Iterable[str], requests: Mapping[str, str] | None = None) -> str:
    """The spawn-page text when Karpenter says no NodePool can serve the pod.

    ``causes``: Karpenter cause codes, one per NodePool reason; ``requests``: the pod requests
    Karpenter quoted. See docs/failure-modes.md.
    """
    given = set(causes)
    known = [code for code, _ in _KARPENTER_CAUSE_WORDS if code in given]
    telling = [code for code in known if code not in _KARPENTER_MISMATCH] or known
    if events.KARPENTER_REQUIREMENTS in telling and events.KARPENTER_TAINT in telling:
        # "no node pool offers the kind of node" already says it
        telling.remove(events.KARPENTER_TAINT)
    words = dict(_KARPENTER_CAUSE_WORDS)
    why = "; ".join(
        words[code].format(requests=_requests_words(requests or {})) for code in telling
    )
    if events.KARPENTER_COLOCATION in telling:
        advice = "Stop your other servers and start this one again, or choose a smaller profile."
    else:
        advice = "Choose a different profile, or ask your administrator."
    return (
        f"No node can run this server, and the autoscaler cannot add one that could: {why}. "
        f"{advice}"
    )


def no_scale_up_text(why: Sequence[str]) -> str:
    """The spawn-page text when the cluster autoscaler says it will not add a node."""
    detail = f" ({'; '.join(why)})" if why else ""
    return (
        "No node can run this server, and the cluster autoscaler cannot add one that could"
        f"{detail}. Choose a different profile, or ask your administrator."
    )


def scale_up_text(*, gpu: bool) -> str:
    """Progress text while an autoscaler adds a node (or Karpenter has nominated one)."""
    if gpu:
        return "Waiting for a node with a free GPU: the cluster autoscaler is adding one"
    return "Waiting for a new node: the cluster autoscaler is adding one"


# --------------------------------------------------------------------------------------------------
# nebari-colocate migrate: what the operator reads (the codes come from migrate.py)

MIGRATE_ACTIONS = {
    "move": "move: copy to a new ReadWriteMany claim in class {target}, verify, rebind {claim}",
    "resume": "resume: the move stopped at step {step}; apply continues it",
    "retry": "retry: the last copy failed ({problem}); apply copies again",
    "servers-running": "wait: stop {running} first",
    "already-rwx": "nothing to do: already ReadWriteMany",
    "not-bound": "cannot move: the claim is not bound to a volume",
    "no-volume": "cannot move: the claim and its volume are gone",
    "done": "done: on volume {new_volume}; the old volume {volume} is retained",
}

MIGRATE_OUTCOMES = {
    "done": "moved to volume {new_volume}",
    "already-done": "already moved (volume {new_volume}); nothing done",
    "blocked": "stopped: {running} running; the old claim stays in use, apply again later",
    "failed": "stopped: the copy did not verify ({problems}); the old claim stays in place, in use",
    "skipped": "skipped: {reason}",
    "error": "error: {reason}",
    "rolled-back": "rolled back: {claim} is on volume {volume} again",
    "nothing-to-roll-back": "nothing to roll back: no move of {claim} is recorded",
    "would-move": "would move: {plan}",
    "held": "not done: another run holds this home's move ({holder}, since {since}, lease "
    "{lease} renewed {renewed}); wait for it to end (a lease seen unchanged for {lease_seconds} s "
    "is taken over by the next run)",
}

#: why a storage class cannot hold ReadWriteMany homes (``migrate.CLASS_PROBLEMS``)
STORAGE_CLASS_PROBLEMS = {
    "missing": "storage class {name!r} does not exist",
    "rwo-only": "storage class {name!r} is provisioned by {provisioner}, which offers no "
    "ReadWriteMany file system volumes",
    "no-volume": "storage class {name!r} has no provisioner and no Available ReadWriteMany volume",
}


def storage_class_problem(code: str, name: str, provisioner: str = "") -> str:
    """Why storage class ``name`` cannot hold the moved homes, in one line."""
    template = STORAGE_CLASS_PROBLEMS.get(code, "storage class {name!r}: {code}")
    return template.format(name=name, provisioner=provisioner, code=code)


#: how a stale lease was found when a run took it over (``lease.LeaseObserver``)
LEASE_TAKEN_OVER = {
    "stale": "its lease stayed unchanged for {unchanged_seconds} s while this run watched it "
    "(its duration: {lease_seconds} s)",
}


#: why a move cannot go on (``migrate.MigrateError``): code -> sentence, filled by
#: :func:`migrate_error` with the facts migrate.py names
MIGRATE_ERRORS = {
    "timed-out": "timed out after {timeout:g} s waiting for {what} (--timeout)",
    "claim-not-found": "claim {namespace}/{claim} not found",
    "no-home-claim": "no home claim for {name!r} in namespace {namespace} (give a username or a "
    "claim name; home claims are those named {prefix}* or carrying the {annotation} annotation)",
    "no-storage-class": "no target storage class: pass --storage-class (the class the hub "
    "creates ReadWriteMany homes in, helm custom.storage-class)",
    "storage-class-unread": "cannot read storage class {name} ({status}): not checked",
    "gave-up-unmarked": "{problem} The move gave up: {claim} is unmarked and stays on its old "
    "volume {volume}, so {user} can start servers again; fix that and apply again, or clear the "
    "move with: {rollback}",
    "gave-up-marked": "{problem} {claim} stays marked (its claim is being swapped to the new "
    "volume, {user}'s servers are refused): apply again to finish, or put it back with: "
    "{rollback}",
    "class-switch-too-late": "{claim} is moving to storage class {recorded} (its copy is "
    "verified, step {step}), not {asked}: finish it with {apply}, or reset the move with "
    "{rollback} and apply again",
    "claim-gone-before-copy": "claim {namespace}/{claim} is gone before its copy was made",
    "claim-moved-before-retain": "claim {namespace}/{claim} is on volume {on_volume}, not on "
    "{recorded} where this move started: nothing is changed; see migrate status, and put it "
    "back with: {rollback}",
    "volume-unreadable": "claim {namespace}/{claim}: its volume {volume} is not readable",
    "no-storage-class-for": "no target storage class for {claim}: pass --storage-class",
    "claim-moved-before-mark": "claim {namespace}/{claim} is on volume {on_volume}, not on "
    "{volume} where this move started: nothing is marked; see migrate status",
    "temporary-not-ours": "claim {namespace}/{temporary} exists and is not this move's",
    "copy-pod-gone": "the copy pod {pod} disappeared",
    "copy-pod-unscheduled": "the copy pod {namespace}/{pod} is not scheduled after {timeout:g} s "
    "(--timeout) ({why}): is the new claim {pod} bound (kubectl describe pvc {pod})?",
    "copy-running": "the copy pod {namespace}/{pod} did not finish within {timeout:g} s "
    "(--copy-timeout); it keeps running and {claim} stays marked: apply again to wait for it, "
    "or stop the move with: {rollback}",
    "temporary-not-bound": "claim {namespace}/{temporary} holds the copy but is not bound",
    "no-target-volume": "volume {volume} records no target volume for {claim}",
    "target-volume-gone": "volume {new_volume}, the copy of {claim}, is gone; roll back",
    "claim-recreated": "claim {namespace}/{claim} was recreated meanwhile (bound to "
    "{on_volume}), not by this move: both volumes ({volume}, {new_volume}) are retained; see "
    "docs/migrate.md",
    "step-after-last": "the move of {claim} is at step {at_step} after its last step",
    "claim-not-on-old": "claim {namespace}/{claim} is on volume {on_volume}, not bound to "
    "{volume}: {volume} stays Retain and the move stays recorded; roll back again",
    "lease-lost": "the lease {namespace}/{lease} of {claim} was taken over{by} while this run "
    "waited: it stops here and changes nothing more",
}

#: a fact that may be missing (None or ""), and what a sentence says in its place
_MIGRATE_MISSING = {"on_volume": "nothing", "at_step": "none", "why": "no reason given"}


def as_sentence(problem: object) -> str:
    """``problem``'s words ending in a full stop (or ``?``, ``!``)."""
    text = str(problem).rstrip()
    return text if text.endswith((".", "?", "!")) else f"{text}."


def migrate_error(code: str, **facts: Any) -> str:
    """The sentence of ``MIGRATE_ERRORS[code]`` with ``facts``: ``why`` a list of reasons,
    ``holder`` the lease's holder (or None), ``problem`` an earlier error; a code without words
    names itself."""
    values = dict(facts)
    if "why" in values:
        values["why"] = "; ".join(values["why"])
    if "holder" in values:
        values["by"] = f" by {values['holder']}" if values["holder"] else ""
    if "problem" in values:
        values["problem"] = as_sentence(values["problem"])
    for key, missing in _MIGRATE_MISSING.items():
        if key in values and not values[key]:
            values[key] = missing
    return MIGRATE_ERRORS.get(code, "{code}").format(code=code, **values)


def migrate_command(verb: str, user: str, namespace: str, storage_class: str | None = None) -> str:
    """The command an operator runs next (shown in problems and refusals)."""
    command = f"nebari-colocate migrate {verb} {user} -n {namespace}"
    return command + (f" --storage-class {storage_class}" if storage_class else "")


def _fill(template: str, row: Obj) -> str:
    values = {k: ("-" if v is None else v) for k, v in row.items()}
    for key in ("running", "problems"):
        if isinstance(values.get(key), list):
            values[key] = _join([str(v) for v in values[key]]) or "-"
    values.setdefault("target", row.get("target_storage_class") or "-")
    try:
        return template.format_map(values)
    except (KeyError, IndexError, ValueError):
        return template


#: what ``audit`` points to for ReadWriteOnce homes left in a ReadWriteMany deployment
MIGRATE_PLAN_COMMAND = "nebari-colocate migrate plan"


def migrate_plan_hint() -> str:
    return (
        f"They keep their servers on one node. To move them to ReadWriteMany storage, see "
        f"{MIGRATE_PLAN_COMMAND} (then migrate apply; docs/migrate.md)."
    )


def migrate_action(row: Obj) -> str:
    """The plan's words for one home."""
    return _fill(MIGRATE_ACTIONS.get(row.get("action", ""), "{action}"), row)


def migrate_outcome(result: Obj) -> str:
    if result.get("outcome") == "skipped" and result.get("reason") in MIGRATE_ACTIONS:
        return "skipped: " + _fill(MIGRATE_ACTIONS[result["reason"]], result)
    if result.get("outcome") == "rolled-back" and "volume" not in result:
        result = {**result, "volume": result.get("old_volume")}
    return _fill(MIGRATE_OUTCOMES.get(result.get("outcome", ""), "{outcome}"), result)


def migrate_notes(result: Obj) -> list[str]:
    """The lines under one home's outcome: a lease taken over, a storage class changed."""
    notes = []
    took = result.get("took_over")
    if took:
        why = _fill(LEASE_TAKEN_OVER.get(took.get("state", ""), "{state}"), took)
        notes.append(_fill("took over the move from {holder} (since {since}): ", took) + why)
    changed = result.get("storage_class_changed")
    if changed:
        notes.append(
            _fill(
                "the unfinished move to storage class {from} now goes to {to}: its temporary "
                "claim and copy pod in {from} were deleted",
                changed,
            )
        )
    return notes


def delete_old_volume_hint(volume: str) -> str:
    """How an operator finishes a move once the user's data is confirmed on the new volume."""
    return (
        f"the old volume {volume} is kept (Retain); once the user confirms their files, delete "
        f"it with: kubectl delete pv {volume}"
    )


def render_migrate_plan(plan: Obj) -> str:
    rows = plan["homes"]
    lines = [
        f"Home claims in namespace {plan['namespace']} (target storage class "
        f"{plan.get('storage_class') or '-'}): {len(rows)}"
    ]
    if rows:
        lines += table(
            ("USER", "CLAIM", "MODES", "SIZE", "CLASS", "VOLUME", "RUNNING", "WHAT WOULD HAPPEN"),
            (
                (
                    r["user"] or "-",
                    r["claim"],
                    ",".join(r["access_modes"]) or "-",
                    r["size"] or "-",
                    r["storage_class"] or "-",
                    r["volume"] or "-",
                    _join(r["running"]) or "-",
                    migrate_action(r),
                )
                for r in rows
            ),
            indent="",
        )
    lines += [f"note: {n}" for n in plan.get("notes") or []]
    return "\n".join(lines)


def render_migrate_results(results: list[Obj], dry_run: bool = False) -> str:
    lines = []
    for r in results:
        lines.append(f"{r.get('user') or '-'} ({r['claim']}): {migrate_outcome(r)}")
        lines += [f"  {note}" for note in migrate_notes(r)]
        if r.get("outcome") in ("done", "already-done") and r.get("old_volume"):
            lines.append(f"  {delete_old_volume_hint(r['old_volume'])}")
        if r.get("outcome") == "rolled-back" and r.get("kept_volume"):
            lines.append(
                f"  volume {r['kept_volume']} (the moved copy, with any work since the move) is "
                f"kept (Retain): delete it with: kubectl delete pv {r['kept_volume']}"
            )
    if dry_run:
        lines.append("dry run: nothing was changed")
    return "\n".join(lines) or "no home claims selected"


def render_migrate_status(status: Obj) -> str:
    rows = status["moves"]
    lines = [f"Moves in namespace {status['namespace']}: {len(rows)}"]
    if rows:
        lines += table(
            ("USER", "CLAIM", "STEP", "MODES", "OLD VOLUME", "NEW VOLUME", "COPY", "PROBLEM"),
            (
                (
                    r["user"] or "-",
                    r["claim"],
                    r["step"] or "not started",
                    ",".join(r["access_modes"]) or "(no claim)",
                    r["old_volume"] or "-",
                    r["new_volume"] or "-",
                    (r["copy"] or {}).get("result") or r["copy_pod"] or "-",
                    r["problem"] or "-",
                )
                for r in rows
            ),
            indent="",
        )
    for r in rows:
        if r.get("held_by"):
            lines.append(
                _fill("{claim}: being moved now by {holder} (since {since})", {**r, **r["held_by"]})
            )
        if r["step"] == "done" and r["old_volume"]:
            lines.append(f"{r['claim']}: {delete_old_volume_hint(r['old_volume'])}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------
# nebari-colocate explain and audit: what the operator reads (the reports come from report.py)


def server_display(name: str) -> str:
    """A server name in a table cell; the default server's is :data:`DEFAULT_SERVER_CELL`."""
    return name or DEFAULT_SERVER_CELL


def quantity(resource: str, units: int) -> str:
    """Scheduler units as a person reads them: ``1.5`` (cores), ``16 GiB``, ``110``."""
    if resource == "cpu":
        return f"{(Decimal(units) / 1000).normalize():f}"
    if resource in ("memory", "ephemeral-storage"):
        return fit.format_units(resource, units)
    return str(units)


def _cell_list(items: Iterable[str], empty: str = "-") -> str:
    items = list(items)
    return ", ".join(items) if items else empty


def table(
    headers: Sequence[str], rows: Iterable[Sequence[object]], indent: str = "  "
) -> list[str]:
    """Aligned plain-text columns, two spaces apart, each line after ``indent`` (the reports'
    tables stand indented under their heading; the migrate tables stand alone)."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]

    def line(row: Sequence[str]) -> str:
        return (indent + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True))).rstrip()

    return [line(list(headers)), *(line(r) for r in cells)]


def _percent(used: int, have: int) -> str:
    return f" ({round(100 * used / have)}%)" if have > 0 else ""


def _node_title(row: Obj, report: Obj) -> str:
    flags = []
    if row["name"] == report.get("pinned_node"):
        if report.get("pinned_by") == PINNED_BY_ATTACHMENT:
            flags.append("pinned: a claim's volume is still attached there")
        else:
            flags.append("pinned: the exclusive claims are in use there")
    if row["name"] in report.get("split_nodes", []):
        flags.append("a claim is in use here and on another node")
    if row.get("cordoned"):
        flags.append("cordoned")
    if row.get("premium"):
        flags.append("premium: " + ", ".join(f"{k}={v}" for k, v in row["premium"].items()))
    return f"Node {row['name']}" + (f" ({'; '.join(flags)})" if flags else "")


def render_explain(report: Obj) -> str:
    """The human form of :func:`explain_report`."""
    user, namespace = report["user"], report["namespace"]
    lines = [f"User {user} in namespace {namespace}", ""]

    lines.append("Servers")
    if report["servers"]:
        lines += table(
            ("SERVER", "POD", "NODE", "PHASE", "CLAIMS"),
            (
                (
                    server_display(s["server"]),
                    s["pod"],
                    s["node"] or "-",
                    s["phase"],
                    _cell_list(s["claims"]),
                )
                for s in report["servers"]
            ),
        )
    else:
        lines.append("  none running")
    lines.append("")

    lines.append("Claims")
    if report["claims"]:
        lines += table(
            ("CLAIM", "ACCESS MODES", "EXCLUSIVE", "VOLUME", "IN USE ON", "ATTACHED ON"),
            (
                (
                    c["claim"],
                    _cell_list(c["access_modes"]) + ("" if c["exists"] else " (not created yet)"),
                    "yes" if c["exclusive"] else "no",
                    c["volume"] or "-",
                    _cell_list(c["in_use_on"]),
                    "?" if c["attached_on"] is None else _cell_list(c["attached_on"]),
                )
                for c in report["claims"]
            ),
        )
    else:
        lines.append("  none found")
    lines.append("")

    for row in report["nodes"]:
        lines.append(_node_title(row, report))
        if not row["readable"]:
            lines.append("  headroom unknown: nodes are not readable with these credentials")
        elif not row["found"]:
            lines.append("  node not found")
        else:
            headroom = row["headroom"]
            lines += table(
                ("RESOURCE", "ALLOCATABLE", "REQUESTED", "FREE"),
                (
                    (
                        r,
                        quantity(r, v["allocatable"]),
                        quantity(r, v["requested"]) + _percent(v["requested"], v["allocatable"]),
                        quantity(r, v["free"]),
                    )
                    for r, v in headroom.items()
                ),
            )
            if row["pods_counted"] != "all namespaces":
                lines.append("  (requests of this namespace's pods only)")
        lines.append("")

    new = report["new_server"]
    if new["pod"] == "minimal":
        what = "a pod that requests nothing and mounts " + _cell_list(new["claims"], "no claim")
    else:
        what = f"the pod in {new['pod']}"
    if new["replaces"]:
        lines.append(
            f"Restarting {_server_phrase(new['server'])} ({what}; its pod {new['replaces']} "
            "is replaced)"
        )
    else:
        lines.append(f"Starting {_server_phrase(new['server'])} ({what})")
    verdict = new["verdict"]
    if new["node"]:
        verdict += f" on node {new['node']}"
    if new["reasons"]:
        verdict += ": " + ", ".join(new["reasons"])
    if not new["verified"]:
        verdict += " (unverified)"
    lines.append(f"  verdict: {verdict}")
    lines += [f"  {line}" for line in new["outcome"]]
    lines.append(f"  {new['operator_line']}")

    notes = [*report["notes"], *new["notes"]]
    if notes:
        lines += ["", "Notes"]
        lines += [f"  - {n}" for n in dict.fromkeys(notes)]
    return "\n".join(lines)


def _server_phrase(server: str) -> str:
    return f"server '{server}'" if server else f"the {DEFAULT_SERVER}"


def render_audit(report: Obj) -> str:
    """The human form of :func:`audit_report`."""
    mode = report["storage_access_mode"]
    head = f"Audit of namespace {report['namespace']}"
    if mode:
        head += f" (deployment storage access mode {mode})"
    lines = [head, ""]

    pinned = report["pinned_users"]
    lines.append(f"Users pinned to a node by exclusive (ReadWriteOnce) claims: {len(pinned)}")
    if pinned:
        lines += table(
            ("USER", "NODE", "SERVERS", "CLAIMS"),
            (
                (
                    u["user"],
                    _cell_list(u["nodes"]),
                    _cell_list(server_display(s["server"]) for s in u["servers"]),
                    _cell_list(u["claims"]),
                )
                for u in pinned
            ),
        )
    lines.append("")

    stranded = report["stranded_pods"]
    lines.append(f"Servers on premium nodes that request no premium resource: {len(stranded)}")
    if stranded:
        lines += table(
            ("USER", "SERVER", "POD", "NODE", "NODE OFFERS", "PREMIUM PODS THERE"),
            (
                (
                    s["user"],
                    server_display(s["server"]),
                    s["pod"],
                    s["node"],
                    _cell_list(
                        f"{k}={v}" if not s["inferred"] else f"{k} (inferred)"
                        for k, v in s["node_premium"].items()
                    ),
                    _cell_list(s["premium_pods_on_node"], "none: this pod alone keeps the node"),
                )
                for s in stranded
            ),
        )
    lines.append("")

    rwo = report["rwo_claims"]
    if rwo is None:
        lines.append(
            "ReadWriteOnce claims in a ReadWriteMany deployment: not checked (pass "
            "--storage-access-mode ReadWriteMany if the hub creates ReadWriteMany claims)"
        )
    else:
        lines.append(f"ReadWriteOnce claims in a ReadWriteMany deployment: {len(rwo)}")
        if rwo:
            lines += table(
                ("CLAIM", "USER", "ACCESS MODES", "STORAGE CLASS", "IN USE BY"),
                (
                    (
                        c["claim"],
                        _cell_list(c["users"]),
                        _cell_list(c["access_modes"]),
                        c["storage_class"] or "-",
                        _cell_list(c["in_use_by"]),
                    )
                    for c in rwo
                ),
            )
            lines.append(f"  {migrate_plan_hint()}")
    lines.append("")

    splits = report["split_attachments"]
    lines.append(f"Exclusive claims in use on more than one node: {len(splits)}")
    if splits:
        lines += table(
            ("CLAIM", "NODES", "PODS", "ATTACHED ON"),
            (
                (
                    s["claim"],
                    _cell_list(s["nodes"]),
                    _cell_list(
                        f"{pod}@{node}" for node, names in s["pods"].items() for pod in names
                    ),
                    "?" if s["attached_on"] is None else _cell_list(s["attached_on"]),
                )
                for s in splits
            ),
        )

    if report["notes"]:
        lines += ["", "Notes"]
        lines += [f"  - {n}" for n in report["notes"]]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------
# the nebari-colocate command: its errors, notes and hints (cli.py raises and prints them)

#: which file grants a read these credentials were refused
RBAC_HINT = "examples/rbac.yaml grants it"
#: what explain and audit need at the least
ROLE_HINT = (
    "explain and audit need get and list on pods and persistentvolumeclaims in the hub's "
    "namespace, which zero-to-jupyterhub's hub Role grants"
)
#: what migrate needs
MIGRATE_RBAC_HINT = (
    "docs/migrate.md lists the permissions migrate needs (examples/rbac-migrate.yaml)"
)

#: what a read the credentials were refused costs the report (``view.DirectReader.denied``)
NODES_COST_EXPLAIN = (
    "no node headroom, and the new server's fit is inferred from the specs of the servers "
    "holding its volumes, as the spawner does"
)
NODES_COST_AUDIT = (
    "a node counts as premium only when a pod of this namespace there requests a premium "
    "resource, so a server left alone on a GPU node is not found"
)
NODE_PODS_COST = "node headroom counts this namespace's pods only"
ATTACHMENTS_COST = "a volume still attached to a node after its last server stopped is not seen"
PVS_COST = "a volume's node affinity is not checked"
PRIORITY_CLASSES_COST = (
    "a pod's priority is taken from its spec alone (0 without one): preemption on the pinned "
    "node may be missed"
)
PDBS_COST = "preemption's victims are chosen as if no PodDisruptionBudget existed"

#: migrate called without the users it needs, or with both users and --all
MIGRATE_APPLY_WHOM = "migrate apply: name the users to move, or pass --all"
MIGRATE_APPLY_NOT_BOTH = "migrate apply: name users or pass --all, not both"
MIGRATE_ROLLBACK_WHOM = "migrate rollback: name the users to roll back"


def denied_read_note(verb: str, what: str, cost: str | None) -> str:
    """The note of a read the credentials were refused: what it costs (``cost``, one of the
    ``*_COST`` sentences; None: unknown) and which file grants it."""
    return f"cannot {verb} {what} (403 Forbidden): {cost or 'not read'}; {RBAC_HINT}"


def empty_namespace_note(namespace: str) -> str:
    """The note of a namespace without pods or claims (likely not the hub's)."""
    return (
        f"namespace {namespace} has no pods and no claims: is it the hub's namespace? (--namespace)"
    )


def api_refused(status: object, what: str, *, reason: str = "", hint: str = ROLE_HINT) -> str:
    """The API server answered ``status`` to ``what`` the command asked: forbidden (with
    ``hint``, the permissions needed), the credentials rejected, or anything else."""
    if status == 403:
        return f"forbidden (403) to {what} with these credentials: {hint}"
    if status == 401:
        return f"the API server rejected the credentials (401) to {what}"
    return f"the API server answered {status} {reason} to {what}"


#: why the command has no API client (``kubeapi.ConnectError.problem``): the kubeconfig
#: ``paths`` looked at and the ``cause`` in one line
CONNECT_PROBLEMS = {
    "no-kubeconfig": "no kubeconfig: {paths} does not exist (pass --kubeconfig or set KUBECONFIG)",
    "bad-kubeconfig": "kubeconfig {paths}: cannot use it: {cause}",
    "bad-service-account": "no kubeconfig at {paths}, and the pod's service account cannot be "
    "used: {cause}",
}


def connect_failed(problem: str, paths: str, cause: str = "") -> str:
    """Why the command could not connect (any other problem reads as no kubeconfig)."""
    template = CONNECT_PROBLEMS.get(problem, CONNECT_PROBLEMS["no-kubeconfig"])
    return template.format(paths=paths, cause=cause)


def api_unreachable(server: str, source: str, error: str) -> str:
    """The command could not reach the API server at ``server`` (from ``source``)."""
    return f"cannot reach the Kubernetes API at {server} ({source}): {error}"


def api_no_answer(server: str, timeout: float) -> str:
    """The API server did not answer within ``--timeout``."""
    return f"no answer from the Kubernetes API at {server} within {timeout:g} s (--timeout)"


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
        "Nothing was stopped: {stopped} no longer {keep} that node running alone (a server "
        "started or stopped in between). Reload the home page to see what runs now.",
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
        "{Stopped} stopped, but the home volume was not released within {seconds:g} s "
        "(way_out_release_timeout); {started} was not started. Try starting it again in a "
        "minute; if it keeps failing, an administrator can help.",
        "{Stopped} stopped, but the home volume was not released within {seconds:g} s "
        "(way_out_release_timeout). Start {them} again in a minute; if it keeps failing, an "
        "administrator can help.",
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
    "{did_not_stop}, so {started} was not started. An administrator can remove what is left "
    "of {still}; then start {started} again.",
    "{did_not_stop}. An administrator can remove what is left of {still}; then try the move again.",
)

#: why a server did not stop (``wayout.StepFacts.why``)
STOP_FAILURES = {
    "still-running": "it is still running",
    "too-slow": "it took too long",
    "error": "the hub log says why",
    "left-behind": "JupyterHub gave up stopping it, and it still holds your home volume",
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
    """ "'Pandas App' keeps a GPU node running: move it to a standard node" (the home pages'
    notice once the user's GPU lab has stopped while these servers ride on its node)."""
    return f"{_ride_subject(servers, display_names, kind)}: {_ride_action(servers)}"


def _ride_subject(
    servers: Sequence[str], display_names: Mapping[str, str] | None, kind: str
) -> str:
    names = _join([server_label(s, display_names) for s in servers])
    names = names[:1].upper() + names[1:]
    verb = "keeps" if len(servers) == 1 else "keep"
    return f"{names} {verb} a {kind} node running"


def _ride_action(servers: Sequence[str]) -> str:
    return f"move {'it' if len(servers) == 1 else 'them'} to a standard node"


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
    """The way out as a form: the list of what it stops and the button that POSTs it to the
    hub's handler at ``action`` (``stop`` fields; the page adds ``_xsrf``).  Hidden until a page
    of nebari-colocate's shows it; every name is escaped."""
    esc = html.escape
    stops = "".join(f"<li>{esc(server_label(n, display_names))}</li>" for n in way_out.stop)
    fields = "".join(
        f'<input type="hidden" name="stop" value="{esc(n, quote=True)}">' for n in way_out.stop
    )
    label = esc(way_out_button_label(way_out, display_names))
    busy = esc(way_out_busy_label(way_out, display_names), quote=True)
    return (
        f'<form class="{WAY_OUT_FORM_CLASS}" method="post" action="{esc(action, quote=True)}" '
        f'data-busy="{busy}" hidden style="text-align: left; margin: 0.5rem 0">'
        "<div>One click stops:</div>"
        f'<ul class="colocate-way-out-stops">{stops}</ul>'
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
    """(text, html) for a spawn ended by a hopeless pod event, with its way out when the
    verdict has one (:func:`event_failure`, then "The way out: …" and, given the handler's URL
    ``action``, its form)."""
    message, message_html = event_failure(verdict, server_name, display_names)
    if verdict.way_out is None:
        return message, message_html
    sentence = f"The way out: {way_out_sentence(verdict.way_out, display_names)}"
    body = f'<div class="colocate-way-out">{html.escape(sentence)}</div>'
    if action:
        body += way_out_form_html(verdict.way_out, action=action, display_names=display_names)
    shown = message_html.removesuffix("</div>") + body + "</div>"
    return f"{message} {sentence}", shown
