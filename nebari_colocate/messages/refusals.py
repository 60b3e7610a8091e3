"""A refusal's technical facts in words (the Details, the hub log, ``simulate``, ``explain``): why
a server cannot start on the node, whose servers hold the volume; the move of the whole set's
sentence.  The plain headline a person reads first is :mod:`.headlines`'.  (pure)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

from .. import fit
from ..objects import GPU_RESOURCES, SERVERNAME_ANNOTATION, Obj, has_owner, is_server, owned_by
from ..placement import (
    CLAIM_IN_USE,
    HOME_BEING_MOVED,
    NODE_NOT_FOUND,
    PREMIUM_NODE,
    SPLIT_ATTACHMENT,
    Decision,
)
from ..setmove import Move
from ..wayout import WayOut
from .advice import _join


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


_COUNTS = {2: "both", 3: "all three", 4: "all four", 5: "all five", 6: "all six"}


def _all(count: int) -> str:
    return _COUNTS.get(count, f"all {count}")


def _names(names: Sequence[str], display_names: Mapping[str, str] | None) -> str:
    return _join([server_label(n, display_names) for n in names])


def move_sentence(move: Move, display_names: Mapping[str, str] | None = None) -> str:
    """ "Restart 'Pandas App' and your default server together on a machine with room for all
    three, then start 'Big App'. Running kernels restart.": the move of the whole set
    (``setmove``), with the names the user knows; no node, label or claim is named."""
    where = "a new machine" if move.node is None else "a machine"
    return (
        f"Restart {_names(move.restart, display_names)} together on {where} with room for "
        f"{_all(len(move.restart) + 1)}, then start {server_label(move.start, display_names)}. "
        "Running kernels restart."
    )


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
