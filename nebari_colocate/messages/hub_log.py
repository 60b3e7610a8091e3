"""The Kubernetes API failing a spawn, and the hub log's lines of the spawner and of configure(c).
(pure)
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from datetime import datetime, timezone

from .. import faults
from ..placement import (
    Decision,
)
from .refusals import subject

# --------------------------------------------------------------------------------------------------
# the Kubernetes API failing a spawn (unreachable, overloaded, too slow): words instead of the raw
# client exception (aiohttp.ClientConnectorError, "Could not create PVC ...")

#: fault code (``faults.FAULT_CODES``) -> what happened, in words a user reads
API_FAULTS = {
    faults.UNREACHABLE: "the cluster could not be reached (it may be restarting)",
    faults.OVERLOADED: "the cluster is too busy and asked to try later",
    faults.SERVER_ERROR: "the cluster failed with an internal error",
    faults.TIMEOUT: "the cluster did not answer in time",
    faults.REJECTED: "the cluster refused to create it",
}


def api_fault_message(fault: str, *, server_name: str, detail: str = "") -> str:
    """Plain text for a spawn the API failed: what happened, and what to do (try again)."""
    what = API_FAULTS.get(fault, API_FAULTS[faults.SERVER_ERROR])
    if fault == faults.REJECTED:
        advice = "Please ask your administrator" + (f" ({detail})." if detail else ".")
    else:
        advice = "Nothing of it was left running. Please try again in a minute."
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
