"""Decision -> user text, user HTML (escaped), operator log line.  (pure)

The user text names the server that cannot start, says why in plain words, lists *their own*
servers that hold the volume and says what to do.  It never names another user's pods or servers.
"""

from __future__ import annotations

import html
from collections.abc import Mapping

from . import fit
from .objects import GPU_RESOURCES, SERVERNAME_ANNOTATION, has_owner, is_server, owned_by
from .placement import REFUSE, Decision

_RESOURCE_WORDS = {
    "cpu": "CPU",
    "memory": "memory",
    "nvidia.com/gpu": "GPU",
    "amd.com/gpu": "GPU",
    "ephemeral-storage": "local disk",
}


def server_label(server_name: str, display_names: Mapping[str, str] | None = None) -> str:
    """How the user knows a server: its display name (jhub-apps' app name) when
    ``display_names`` has one, else its server name; the default server without a display name
    is "your default server" (jhub-apps shows it as "JupyterLab": pass ``{"": "JupyterLab"}``)."""
    shown = (display_names or {}).get(server_name) or server_name
    return "your default server" if not shown else f"'{shown}'"


def own_servers(decision: Decision, username: str, user_label: str | None = None) -> list[str]:
    """Server names of the holders that are servers of ``username`` (sorted, default first)."""
    names = {
        ((p.get("metadata") or {}).get("annotations") or {}).get(SERVERNAME_ANNOTATION, "")
        for p in decision.holder_pods
        if owned_by(p, username, user_label) and is_server(p)
    }
    return sorted(names, key=lambda n: (n != "", n))


def own_other_pods(decision: Decision, username: str, user_label: str | None = None) -> list[str]:
    """Names of the holders that are ``username``'s own pods but not servers (sorted)."""
    return sorted(
        {
            (p.get("metadata") or {}).get("name", "")
            for p in decision.holder_pods
            if owned_by(p, username, user_label) and not is_server(p)
        }
    )


def _others(decision: Decision, username: str, user_label: str | None) -> int:
    """Holders that are other users' servers (counted, never named)."""
    return sum(
        not owned_by(p, username, user_label) and has_owner(p) and is_server(p)
        for p in decision.holder_pods
    )


def _unowned(decision: Decision, username: str, user_label: str | None) -> int:
    """Holders that belong to no user: a backup Job, a workflow step (counted, never named)."""
    return sum(
        not owned_by(p, username, user_label) and not (has_owner(p) and is_server(p))
        for p in decision.holder_pods
    )


def _join(items: list[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def _selector_text(pod: Mapping) -> str:
    selector = (pod.get("spec") or {}).get("nodeSelector") or {}
    if selector:
        return ", ".join(f"{k}={v}" for k, v in sorted(selector.items()))
    return "its required node affinity"


def reason_sentences(decision: Decision, pod: Mapping) -> list[str]:
    """One plain sentence per reason code."""
    node = decision.node
    first = [True]

    def where_() -> str:
        # Say where the volume is once; later sentences just name the node.
        if first[0]:
            first[0] = False
            return f"node {node}, where your volume is attached,"
        return f"node {node}"

    sentences = []
    shortfalls = {s.resource: s for s in (decision.fit.shortfalls if decision.fit else [])}
    for code in decision.reasons:
        if code == "node-unschedulable":
            sentences.append(f"{where_()} is cordoned (closed to new servers for maintenance)")
        elif code == "node-selector":
            sentences.append(
                f"this server must run on a different kind of node ({_selector_text(pod)}); "
                f"{where_()} is not one"
            )
        elif code == "taint":
            taints = decision.fit.taints if decision.fit else []
            text = ", ".join(
                f"{t.get('key')}{'=' + t['value'] if t.get('value') else ''}:{t.get('effect')}"
                for t in taints
            )
            sentences.append(
                f"{where_()} is reserved ({text}) and this server does not tolerate it"
            )
        elif code.startswith("insufficient:"):
            resource = code.split(":", 1)[1]
            word = _RESOURCE_WORDS.get(resource, resource)
            short = shortfalls.get(resource)
            if short and short.allocatable <= 0:
                sentences.append(f"it needs a {word} node ({resource}); {where_()} has none")
            elif short:
                have = fit.format_units(resource, max(short.free, 0))
                want = fit.format_units(resource, short.requested)
                if resource not in ("cpu", "memory", "ephemeral-storage"):
                    have, want = f"{have} {word}", f"{want} {word}"
                sentences.append(f"it needs {want} but {where_()} has only {have} free")
            else:
                sentences.append(f"{where_()} does not have enough {word} free")
        elif code == "too-many-pods":
            limit = decision.fit.max_pods if decision.fit else None
            limit_text = f" ({limit})" if limit is not None else ""
            sentences.append(f"{where_()} already runs as many pods as it may{limit_text}")
        elif code == "volume-node-affinity":
            sentences.append(f"another volume this server mounts cannot be used on node {node}")
        elif code == "claim-in-use":
            sentences.append(
                f"the volume {_join(decision.busy_claims)} may be used by only one server at a "
                "time and is in use"
            )
        elif code == "split-attachment":
            sentences.append(
                f"your volume {_join(decision.claims)} is in use on more than one node "
                f"({_join(decision.split_nodes)}), which needs an administrator to resolve"
            )
        elif code == "node-not-found":
            sentences.append(
                f"your volume is still in use on node {node}, which no longer exists (it may "
                "still be attached to that node)"
            )
        elif code == "home-being-moved":
            since = _clock(decision.moving_since)
            sentences.append(
                "your home folder is being moved to new storage by an administrator"
                + (f" (since {since})" if since else "")
            )
        elif code == "premium-node":
            sentences.append(
                f"{where_()} is a GPU node and this server needs no GPU; starting it there "
                "would keep the expensive node running"
            )
    return sentences


def _exclusivity(decision: Decision) -> str:
    if "claim-in-use" in decision.reasons:  # ReadWriteOncePod: one pod, not one node
        return "Your volume can be used by one server at a time"
    return "Your volume can be attached to one node at a time"


def subject(server_name: str, display_names: Mapping[str, str] | None = None) -> str:
    """ "Your server 'My Dashboard'" / "Your default server": the start of every message."""
    label = server_label(server_name, display_names)
    return "Your default server" if label == "your default server" else f"Your server {label}"


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


def _advice(
    decision: Decision, holders: list[str], has_profiles: bool = True, own_pods: int = 0
) -> str:
    if "home-being-moved" in decision.reasons:
        return HOME_MOVE_ADVICE
    if "split-attachment" in decision.reasons:
        return "Please contact your administrator."
    if "node-not-found" in decision.reasons:
        return (
            "Please contact your administrator: the volume must be released from the node that "
            "is gone before it can be used elsewhere."
        )
    if not holders and decision.holder_pods and decision.pinned_by == "holders":
        # Only pods that are not servers hold it: nothing on the hub stops them.
        if own_pods:
            stop = "wait for your other pods using it to finish (or delete them)"
        else:
            stop = "wait until the other pods using it have finished (ask your administrator)"
    else:
        stop = f"stop {_join(holders)} first" if holders else "stop the servers using it first"
    if decision.pinned_by == "attachment" and not holders:
        return "The volume is still being released from its last node: try again in a minute."
    if "claim-in-use" in decision.reasons:
        # ReadWriteOncePod: no node and no profile helps; only the other server stopping does.
        return f"To start it, {stop}."
    if not has_profiles:  # no profile to choose on this hub: do not suggest one
        return f"To start it, {stop}."
    if "premium-node" in decision.reasons and len(decision.reasons) == 1:
        return f"To start it, {stop}, or choose a profile with a GPU."
    return f"To start it, {stop}, or choose a profile that fits on node {decision.node}."


def user_message(
    decision: Decision,
    pod: Mapping,
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
    holders = [server_label(n, display_names) for n in own_servers(decision, username, user_label)]
    own_pods = own_other_pods(decision, username, user_label)
    why = "; ".join(reason_sentences(decision, pod))
    parts = [f"{subject(server_name, display_names)} cannot start: {why}."]
    in_use = _in_use_by(decision, holders, own_pods, username, user_label)
    if in_use:
        parts.append(f"{_exclusivity(decision)} and is in use by {_join(in_use)}.")
    parts.append(_advice(decision, holders, has_profiles, len(own_pods)))
    return " ".join(parts)


def _in_use_by(
    decision: Decision,
    holders: list[str],
    own_pods: list[str],
    username: str,
    user_label: str | None,
) -> list[str]:
    """Who holds the volume, in words: the user's own servers and pods by name, everything
    else counted (never another user's names)."""
    in_use = []
    if holders:
        in_use.append(_join(holders))
    if own_pods:
        in_use.append(f"your pod(s) {_join(own_pods)} (not servers)")
    others = _others(decision, username, user_label)
    if others:
        in_use.append(f"{others} server(s) of other users")
    unowned = _unowned(decision, username, user_label)
    if unowned:
        in_use.append(f"{unowned} other pod(s) that are not JupyterHub servers (such as a job)")
    return in_use


def user_html(
    decision: Decision,
    pod: Mapping,
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
    esc = html.escape
    title = esc(subject(server_name, display_names))
    reasons = "".join(f"<li>{esc(s)}</li>" for s in reason_sentences(decision, pod))
    holders = own_servers(decision, username, user_label)
    own_pods = own_other_pods(decision, username, user_label)
    # <div>, not <p>: JupyterHub's error page puts the message inside a <p> of its own; and
    # left-aligned, as the spawn pages centre their text.
    body = [f"<div>{title} cannot start:</div>", f'<ul class="colocate-reasons">{reasons}</ul>']
    labels = [server_label(n, display_names) for n in holders]
    in_use = _in_use_by(decision, labels, own_pods, username, user_label)
    if holders:
        in_use = labels + in_use[1:]
    if in_use:
        items = "".join(f"<li>{esc(n)}</li>" for n in in_use)
        body.append(
            f"<div>{esc(_exclusivity(decision))} and is in use by:</div>"
            f'<ul class="colocate-holders">{items}</ul>'
        )
    advice = _advice(decision, labels, has_profiles, len(own_pods))
    body.append(f"<div>{esc(advice)}</div>")
    return f'<div class="colocate-message" style="text-align: left">{"".join(body)}</div>'


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
    if decision.notes:
        fields.append(f"notes={'; '.join(decision.notes)!r}")
    return "colocate " + " ".join(fields)


def event_failure(server_name: str, text: str, display_names: Mapping[str, str] | None = None):
    """(text, html) for a spawn ended by a hopeless pod event; ``text`` is the verdict's words."""
    message = f"{subject(server_name, display_names)} could not start: {text}"
    return message, (
        f'<div class="colocate-message" style="text-align: left">{html.escape(message)}</div>'
    )


def default_failure(text: str) -> str:
    """The verdict's words, or a generic sentence when it has none."""
    return text or "The server could not start."


# --------------------------------------------------------------------------------------------------
# the Kubernetes API failing a spawn (unreachable, overloaded, too slow): words instead of the raw
# client exception (aiohttp.ClientConnectorError, "Could not create PVC ...")

#: fault code -> what happened, in words a user reads
API_FAULTS = {
    "unreachable": "the Kubernetes API server could not be reached (it may be restarting)",
    "overloaded": "the Kubernetes API server is overloaded and asked to retry later",
    "server-error": "the Kubernetes API server failed with an internal error",
    "timeout": "the Kubernetes API server did not answer in time",
    "rejected": "the Kubernetes API server refused to create it",
}


def api_fault_message(fault: str, *, server_name: str, detail: str = "") -> str:
    """Plain text for a spawn the API failed: what happened, and what to do (try again)."""
    what = API_FAULTS.get(fault, API_FAULTS["server-error"])
    if fault == "rejected":
        advice = "Please contact your administrator" + (f" ({detail})." if detail else ".")
    else:
        advice = "Nothing of it was left running; please try again in a minute."
    return f"{subject(server_name)} could not start: {what}. {advice}"


def api_fault_html(fault: str, *, server_name: str, detail: str = "") -> str:
    """The same message as HTML (the server name and the detail are escaped)."""
    text = html.escape(api_fault_message(fault, server_name=server_name, detail=detail))
    return f'<div class="colocate-message" style="text-align: left">{text}</div>'


# --- autoscaler verdicts (events.classify) ---------------------------------------------------

#: Karpenter cause code (``events.KARPENTER_*``) -> why no new node can run the server. The
#: codes are listed most telling first: a NodePool whose taint or requirements this server does
#: not match was never meant for it, so its reason is told only when nothing better is known.
_KARPENTER_CAUSE_WORDS: tuple[tuple[str, str], ...] = (
    (
        "colocation",
        "it must run on the node where your other servers are (your storage volume can be "
        "attached to one node at a time), and no new node can be that node",
    ),
    ("limits", "the node pools that could run it have reached their size limits"),
    ("no-instance-type", "no machine type is big enough for what it asks for{requests}"),
    ("anti-affinity", "it must be kept apart from other pods, and no new node can do that"),
    ("topology-spread", "a new node would break its spread constraint"),
    ("requirements", "no node pool offers the kind of node it asks for"),
    ("taint", "the node pools that could run it are reserved for other kinds of servers"),
)
_KARPENTER_MISMATCH = frozenset({"requirements", "taint"})


def _requests_words(requests: Mapping[str, str]) -> str:
    # Only the GPUs: Karpenter quotes memory in bytes and adds its own pod count.
    gpus = [requests[r] for r in GPU_RESOURCES if requests.get(r)]
    if not gpus:
        return ""
    return f" ({' and '.join(gpus)} GPU{'s' if gpus != ['1'] else ''})"


def karpenter_refusal_text(causes, requests: Mapping[str, str] | None = None) -> str:
    """The spawn-page text when Karpenter says no NodePool can serve the pod.

    ``causes``: Karpenter cause codes, one per NodePool reason; ``requests``: the pod requests
    Karpenter quoted. See docs/failure-modes.md.
    """
    known = [code for code, _ in _KARPENTER_CAUSE_WORDS if code in set(causes)]
    telling = [code for code in known if code not in _KARPENTER_MISMATCH] or known
    if "requirements" in telling and "taint" in telling:
        telling.remove("taint")  # "no node pool offers the kind of node" already says it
    words = dict(_KARPENTER_CAUSE_WORDS)
    why = "; ".join(
        words[code].format(requests=_requests_words(requests or {})) for code in telling
    )
    if "colocation" in telling:
        advice = "Stop your other servers and start this one again, or choose a smaller profile."
    else:
        advice = "Choose a different profile, or ask your administrator."
    return (
        f"No node can run this server, and the autoscaler cannot add one that could: {why}. "
        f"{advice}"
    )


def no_scale_up_text(why: list[str]) -> str:
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
    "rolled-back": "rolled back: {claim} is on volume {old_volume} again",
    "nothing-to-roll-back": "nothing to roll back: no move of {claim} is recorded",
    "would-move": "would move: {plan}",
}


def _fill(template: str, row: Mapping) -> str:
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


def migrate_action(row: Mapping) -> str:
    """The plan's words for one home."""
    return _fill(MIGRATE_ACTIONS.get(row.get("action", ""), "{action}"), row)


def migrate_outcome(result: Mapping) -> str:
    if result.get("outcome") == "skipped" and result.get("reason") in MIGRATE_ACTIONS:
        return "skipped: " + _fill(MIGRATE_ACTIONS[result["reason"]], result)
    return _fill(MIGRATE_OUTCOMES.get(result.get("outcome", ""), "{outcome}"), result)


def delete_old_volume_hint(volume: str) -> str:
    """How an operator finishes a move once the user's data is confirmed on the new volume."""
    return (
        f"the old volume {volume} is kept (Retain); once the user confirms their files, delete "
        f"it with: kubectl delete pv {volume}"
    )


def _table(headers, rows) -> list[str]:
    cells = [[str(c) for c in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    return [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in [list(headers), *cells]
    ]


def render_migrate_plan(plan: Mapping) -> str:
    rows = plan["homes"]
    lines = [
        f"Home claims in namespace {plan['namespace']} (target storage class "
        f"{plan.get('storage_class') or '-'}): {len(rows)}"
    ]
    if rows:
        lines += _table(
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
        )
    lines += [f"note: {n}" for n in plan.get("notes") or []]
    return "\n".join(lines)


def render_migrate_results(results: list[Mapping], dry_run: bool = False) -> str:
    lines = []
    for r in results:
        lines.append(f"{r.get('user') or '-'} ({r['claim']}): {migrate_outcome(r)}")
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


def render_migrate_status(status: Mapping) -> str:
    rows = status["moves"]
    lines = [f"Moves in namespace {status['namespace']}: {len(rows)}"]
    if rows:
        lines += _table(
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
        )
    for r in rows:
        if r["step"] == "done" and r["old_volume"]:
            lines.append(f"{r['claim']}: {delete_old_volume_hint(r['old_volume'])}")
    return "\n".join(lines)
