"""nebari-colocate explain and audit: what the operator reads (the reports come from report.py).
(pure)
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal

from .. import fit
from ..objects import Obj
from ..placement import (
    PINNED_BY_ATTACHMENT,
)
from .command import table
from .migrate import migrate_plan_hint
from .refusals import DEFAULT_SERVER, DEFAULT_SERVER_CELL

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
