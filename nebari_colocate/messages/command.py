"""The nebari-colocate command: its errors, notes and hints (cli.py raises and prints them).
(pure)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ..placement import (
    REFUSE,
    SKIP,
    Decision,
)
from .advice import _join

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
