"""Pod event verdicts and progress in words: why a spawn was ended, what it waits for (the
scheduler, the autoscalers, storage, images).  (pure)
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

from .. import events
from ..objects import GPU_RESOURCES
from .advice import (
    _join,
)
from .headlines import (
    Headline,
    details_html,
    event_headline,
    event_plain_text,
    or_move,
    page_html,
    text_message,
)
from .refusals import (
    _NODE_STATE_FRAGMENT_WORDS,
    _resource_words,
    counted_holders,
    server_label,
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
        "one node at a time."
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
        f"lower-priority pods, but it still could not place it after {verdict.grace:g} seconds."
    )


def _no_scheduler_text(verdict: events.EventVerdict) -> str:
    return (
        "No scheduler has picked up your server: the cluster's scheduler "
        f"'{verdict.scheduler or events.DEFAULT_SCHEDULER}' may not be running."
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
        "or nothing provisions it)."
    )


def _unschedulable_text(verdict: events.EventVerdict) -> str:
    if _storage_unavailable(verdict):
        return _storage_unavailable_text(verdict)
    summary = _scheduler_summary(verdict.fragments)
    why = f" ({summary})" if summary else ""
    return (
        f"No node can run this server{why}, and none became free within {verdict.grace:g} seconds."
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
            "(a server that used it may still be shutting down)."
        )
    return (
        "This server cannot start: its storage volume is attached to another node, where it "
        f"is in use by {_join(users)}. The volume can be attached to only one node at a time."
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
    return f"This server cannot start: {why}."


#: why the registry would not give the image (``events.PULL_*``) -> words after the grace
_PULL_WORDS = {
    events.PULL_NOT_FOUND: " (the image was not found)",
    events.PULL_DENIED: " (access to the image was denied)",
}


def _image_pull_text(verdict: events.EventVerdict) -> str:
    hint = "".join(_PULL_WORDS.get(c, "") for c in verdict.causes)
    return (
        f"This server cannot start: its image{_shown_image(verdict)} could not be downloaded "
        f"for {verdict.grace:g} seconds{hint}."
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


def event_details_text(verdict: events.EventVerdict) -> str:
    """The technical words of an event verdict (nodes, the scheduler's and the autoscalers'
    reasons), for the Details and the administrator; "" when there is nothing to say."""
    words = _EVENT_WORDS.get(verdict.code)
    return words(verdict) if words else ""


def event_text(verdict: events.EventVerdict) -> str:
    """What a person reads about an event verdict, in plain words: why the spawn cannot succeed
    (fail), or what it waits for (wait); "" when there is nothing to say
    (:func:`.headlines.event_plain_text`)."""
    return event_plain_text(verdict)


def event_words(verdict: events.EventVerdict) -> str:
    """Every word the page shows of an event verdict, as text: the plain words, then
    "Details:" and the technical ones when they say more."""
    plain = event_plain_text(verdict)
    details = event_details_text(verdict)
    shown = [details] if details and details != plain and verdict.code != events.PROGRESS else []
    return text_message(Headline(plain), shown) if plain else ""


def event_progress_html(verdict: events.EventVerdict) -> str:
    """An event verdict as the spawn page's progress shows it: the plain words, then the
    technical ones under a closed Details when they say more; "" when there is nothing to say."""
    plain = event_plain_text(verdict)
    if not plain:
        return ""
    details = event_details_text(verdict)
    shown = [details] if details and details != plain and verdict.code != events.PROGRESS else []
    return (
        '<div class="colocate-progress">'
        f'<div class="colocate-headline">{html.escape(plain)}</div>{details_html(shown)}</div>'
    )


def event_failure(
    verdict: events.EventVerdict,
    server_name: str,
    display_names: Mapping[str, str] | None = None,
    *,
    button: str = "",
) -> tuple[str, str]:
    """(text, html) for a spawn ended by a hopeless pod event: the headline, the move of the
    whole set in words when the way out carries one, then the technical words under Details;
    ``button`` the way out's form (and the move's; the server name is escaped)."""
    headline = event_headline(verdict, server_name, display_names)
    details = event_details_text(verdict) or "The server could not start."
    shown = page_html(headline, [details], button, verdict.way_out)
    return text_message(headline, [details], or_move(verdict.way_out, display_names)), shown


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
    return f"No node can run this server, and the autoscaler cannot add one that could: {why}."


def no_scale_up_text(why: Sequence[str]) -> str:
    """The spawn-page text when the cluster autoscaler says it will not add a node."""
    detail = f" ({'; '.join(why)})" if why else ""
    return (
        "No node can run this server, and the cluster autoscaler cannot add one that could"
        f"{detail}."
    )


def scale_up_text(*, gpu: bool) -> str:
    """Progress text while an autoscaler adds a node (or Karpenter has nominated one)."""
    if gpu:
        return "Waiting for a node with a free GPU: the cluster autoscaler is adding one"
    return "Waiting for a new node: the cluster autoscaler is adding one"
