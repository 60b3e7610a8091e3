"""The ``nebari-colocate`` command.

``simulate`` decides offline from a cluster dump (``docs/cli.md``: its JSON fields, reason codes
and exit codes are a contract other tools read; extend, never rename).

``explain`` and ``audit`` read the live cluster through the current kubeconfig (``--kubeconfig``,
else ``$KUBECONFIG``, else ``~/.kube/config``; inside a pod with none of those, the pod's service
account).  They gather here and leave the reports to :mod:`nebari_colocate.report`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import NoReturn

from . import __version__, dumps, kubeapi, messages, migrate, report, view
from .config import (
    ACCESS_MODES,
    DEFAULT_ACCESS_MODE,
    DEFAULT_PREMIUM_NODE_POLICY,
    DEFAULT_PREMIUM_RESOURCES,
    PREMIUM_POLICIES,
    caseless_choice,
)
from .objects import (
    SERVERNAME_ANNOTATION,
    USERNAME_ANNOTATION,
    USERNAME_LABEL,
    JsonDict,
    Obj,
    labels_of,
    pod_claims,
    pod_server,
    pod_user,
    spec,
)
from .placement import Policy, decide
from .state import ClusterState, StateError


class UsageError(Exception):
    """Bad input: exit status 2 with one line on stderr."""


class ClusterError(Exception):
    """The cluster could not be read (kubeconfig, network, permissions): exit status 2."""


def _caseless(choices: Sequence[str], what: str) -> Callable[[str], str]:
    def convert(value: str) -> str:
        choice = caseless_choice(value, choices)
        if choice is None:
            raise argparse.ArgumentTypeError(
                f"invalid {what} {value!r}: choose one of {', '.join(choices)}"
            )
        return choice

    return convert


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, status 2, like any other bad input
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="nebari-colocate",
        description="Volume-aware co-location for KubeSpawner: simulate its decisions offline, "
        "explain a user's placement and audit a namespace on the live cluster.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    sim = sub.add_parser(
        "simulate",
        help="decide offline for a pod manifest against a cluster dump",
        description="Decide what the spawner would do for POD given the objects in STATE "
        "(kubectl get nodes,pods,pvc,pv,volumeattachments -A -o yaml).",
    )
    sim.add_argument("state", metavar="STATE.yaml", help="cluster objects (YAML, kind: List ok)")
    sim.add_argument("--pod", required=True, metavar="POD.yaml", help="the pod manifest")
    sim.add_argument(
        "--storage-access-mode",
        type=_caseless(ACCESS_MODES, "storage access mode"),
        default=DEFAULT_ACCESS_MODE,
        help=f"access mode of claims missing from STATE (default: {DEFAULT_ACCESS_MODE})",
    )
    sim.add_argument(
        "--no-node-access",
        action="store_true",
        help="judge as a hub without Node read permission (Node objects are ignored)",
    )
    sim.add_argument(
        "--premium-node-policy",
        type=_caseless(PREMIUM_POLICIES, "premium node policy"),
        default=DEFAULT_PREMIUM_NODE_POLICY,
        help="allow, warn or refuse a pod without GPU requests on a GPU node "
        f"(default: {DEFAULT_PREMIUM_NODE_POLICY})",
    )
    sim.add_argument("--json", action="store_true", help="print one JSON object")

    exp = sub.add_parser(
        "explain",
        help="a user's servers, claims, pinned node and headroom, and what a new server gets",
        description="Show USER's servers and their nodes, the claims they mount and their access "
        "modes, the node the claims pin them to and its headroom, and what starting a server "
        "would get: the spawner's decision on the live cluster.",
    )
    exp.add_argument("user", metavar="USER", help="the JupyterHub username")
    exp.add_argument(
        "--server",
        metavar="NAME",
        help="the server to judge (default: the default server, or the one named in --pod)",
    )
    exp.add_argument(
        "--pod",
        metavar="POD.yaml",
        help="the pod manifest to judge (default: a pod that requests nothing and mounts the "
        "user's claims)",
    )
    _live_options(exp)
    exp.add_argument(
        "--premium-node-policy",
        type=_caseless(PREMIUM_POLICIES, "premium node policy"),
        default=DEFAULT_PREMIUM_NODE_POLICY,
        help="allow, warn or refuse a pod without GPU requests on a GPU node "
        f"(default: {DEFAULT_PREMIUM_NODE_POLICY})",
    )

    aud = sub.add_parser(
        "audit",
        help="pinned users, servers stranded on premium nodes, claims to migrate, split claims",
        description="Audit a namespace: users whose exclusive (ReadWriteOnce) claims pin their "
        "servers, servers on premium nodes that request no premium resource, ReadWriteOnce "
        "claims left in a ReadWriteMany deployment, and exclusive claims in use on two nodes.",
    )
    _live_options(aud, mode_default=None)
    _add_migrate(sub)
    return parser


def _resource_list(value: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in value.split(",") if n.strip())
    for name in names:
        if "/" not in name:
            raise argparse.ArgumentTypeError(
                f"invalid premium resource {name!r}: use extended resource names such as "
                "nvidia.com/gpu"
            )
    return names


def _live_options(
    parser: argparse.ArgumentParser, mode_default: str | None = DEFAULT_ACCESS_MODE
) -> None:
    parser.add_argument(
        "--namespace",
        "-n",
        metavar="NS",
        help="the hub's namespace (default: the kubeconfig context's namespace, else default)",
    )
    parser.add_argument(
        "--kubeconfig",
        metavar="PATH",
        help="kubeconfig file (default: $KUBECONFIG, else ~/.kube/config)",
    )
    parser.add_argument("--context", metavar="NAME", help="kubeconfig context to use")
    if mode_default is None:
        mode_help = (
            "the access mode the hub creates claims with; ReadWriteMany lists the "
            "ReadWriteOnce claims that need migration (default: not checked)"
        )
    else:
        mode_help = f"access mode of claims not created yet (default: {mode_default})"
    parser.add_argument(
        "--storage-access-mode",
        type=_caseless(ACCESS_MODES, "storage access mode"),
        default=mode_default,
        help=mode_help,
    )
    parser.add_argument(
        "--premium-resources",
        type=_resource_list,
        default=DEFAULT_PREMIUM_RESOURCES,
        metavar="R1,R2",
        help="extended resources that make a node premium "
        f"(default: {','.join(DEFAULT_PREMIUM_RESOURCES)})",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="give up when the API has not answered in this time (default: 30)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")


#: ``simulate``'s own warning codes (beside the decision's; extend, never rename): the manifest
#: names no namespace and the dump does not tell one; claims of the pod the dump does not have
#: in the namespace judged (judged by --storage-access-mode), when the manifest named none
NAMESPACE_ASSUMED_WARNING = "namespace-assumed"
CLAIM_NOT_FOUND_WARNING = "claim-not-found"


def simulate(args: argparse.Namespace) -> int:
    simulation = dumps.read_simulation(args.state, args.pod)
    pod, namespace, notes = simulation.pod, simulation.namespace, simulation.notes
    namespace_from = simulation.namespace_from
    for note in notes:
        print(f"warning: {note}", file=sys.stderr)
    state = ClusterState.from_objects(
        simulation.objects, namespace=namespace, node_access=not args.no_node_access
    )
    policy = Policy(
        storage_access_mode=args.storage_access_mode,
        premium_node_policy=args.premium_node_policy,
    )
    try:
        decision = decide(pod, state, policy)
    except (ValueError, TypeError, AttributeError, KeyError) as exc:
        raise StateError(f"{args.pod} with {args.state}: malformed object: {exc}") from None
    username, server = pod_user(pod), pod_server(pod)
    label = labels_of(pod).get(USERNAME_LABEL)
    text = messages.user_message(
        decision, pod, username=username, server_name=server, user_label=label
    )
    headline = messages.user_headline(
        decision, pod, username=username, server_name=server, user_label=label
    )
    missing = [c for c in pod_claims(pod) if state.pvc(namespace, c) is None]
    warnings = []
    if namespace_from == dumps.NAMESPACE_ASSUMED:
        warnings.append(NAMESPACE_ASSUMED_WARNING)
    if namespace_from != dumps.NAMESPACE_FROM_POD and missing:
        warnings.append(CLAIM_NOT_FOUND_WARNING)
    if args.json:
        result = decision.as_json(text)
        result["warnings"] = sorted([*result["warnings"], *warnings])
        result["namespace"] = namespace
        result["namespace_from"] = namespace_from
        # input_warnings: what in the dump was counted other than as written (extends the
        # documented object; the same lines go to stderr)
        result["input_warnings"] = notes
        # headline: the plain words a person reads first (message: the headline and the Details)
        result["headline"] = headline
        print(json.dumps(result, sort_keys=False))
        return 0
    for line in messages.outcome_lines(decision, text):
        print(line)
    for line in messages.simulated_namespace_lines(
        namespace,
        namespace_from,
        missing if CLAIM_NOT_FOUND_WARNING in warnings else [],
        args.storage_access_mode,
    ):
        print(line)
    print(messages.operator_line(decision, username=username, server_name=server))
    return 0


# --------------------------------------------------------------------------------------------------
# the live cluster: connection


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


async def connect(kubeconfig: str | None, context: str | None) -> kubeapi.Connection:
    """:func:`nebari_colocate.kubeapi.connect`, its failure in one line (exit status 2)."""
    try:
        return await kubeapi.connect(kubeconfig, context)
    except kubeapi.ConnectError as exc:
        cause = "" if exc.cause is None else _one_line(exc.cause)
        raise ClusterError(messages.connect_failed(exc.problem, exc.paths, cause)) from None


def _api_error(exc: BaseException, what: str, hint: str = messages.ROLE_HINT) -> ClusterError:
    status = getattr(exc, "status", None)
    reason = getattr(exc, "reason", None) or _one_line(exc)
    return ClusterError(messages.api_refused(status, what, reason=reason, hint=hint))


def _empty_namespace_note(state: ClusterState) -> list[str]:
    if not state.namespace_pods() and not state.claims_of():
        return [messages.empty_namespace_note(state.namespace)]
    return []


def _denied_notes(denied: Iterable[tuple[str, str]], nodes_cost: str) -> list[str]:
    """One note per read RBAC refused: what it costs and which file grants it."""
    costs = {
        view.NODES_GET: nodes_cost,
        view.NODES_LIST: nodes_cost,
        view.ATTACHMENTS_LIST: messages.ATTACHMENTS_COST,
        view.ALL_PODS_LIST: messages.NODE_PODS_COST,
        view.PVS_GET: messages.PVS_COST,
        view.PRIORITY_CLASSES_LIST: messages.PRIORITY_CLASSES_COST,
        view.PDBS_LIST: messages.PDBS_COST,
    }
    return [messages.denied_read_note(verb, what, costs.get((verb, what))) for verb, what in denied]


async def _read_namespace(reader: view.DirectReader) -> None:
    """The namespace's pods and claims: without them neither command can say anything."""
    try:
        await reader.read_namespace()
    except Exception as exc:
        status = kubeapi.status_of(exc)
        if status is None:
            raise
        what = f"list pods in namespace {reader.namespace}"
        raise _api_error(exc, what) from None


# --------------------------------------------------------------------------------------------------
# explain


def _judged_pod(
    args: argparse.Namespace,
    namespace: str,
    label: str,
    own: Sequence[Obj],
    pvcs: Mapping[str, Obj],
) -> tuple[JsonDict, str, str]:
    """(pod, server name, source) for the server ``explain`` judges."""
    if args.pod:
        pod = dumps.read_pod(args.pod)
        meta = pod.setdefault("metadata", {})
        annotations = meta.get("annotations") or {}
        server = (
            args.server if args.server is not None else annotations.get(SERVERNAME_ANNOTATION, "")
        )
        annotations[USERNAME_ANNOTATION] = args.user
        annotations[SERVERNAME_ANNOTATION] = server
        meta["annotations"] = annotations
        meta["labels"] = {**(meta.get("labels") or {}), USERNAME_LABEL: label}
        meta["namespace"] = namespace
        if not meta.get("name"):
            running = [p for p in own if pod_server(p) == server]
            meta["name"] = running[0]["metadata"]["name"] if running else report.EXPLAIN_POD_NAME
        return pod, server, args.pod
    server = args.server or ""
    claims = report.user_claims(own, pvcs, args.user, label)
    pod = report.minimal_pod(args.user, label, server, namespace, claims, own)
    return pod, server, "minimal"


async def _explain(conn: kubeapi.Connection, args: argparse.Namespace) -> JsonDict:
    from kubespawner.slugs import is_valid_label, safe_slug

    namespace = args.namespace or conn.namespace or "default"
    reader = view.DirectReader(conn.api_client, namespace)
    await _read_namespace(reader)
    assert reader.pods is not None and reader.pvcs is not None
    pvcs = {k.split("/", 1)[1]: v for k, v in reader.pvcs.items()}
    label = safe_slug(args.user, is_valid=is_valid_label)
    own = report.user_pods(reader.pods, args.user, label)
    pod, server, source = _judged_pod(args, namespace, label, own, pvcs)

    policy = Policy(
        storage_access_mode=args.storage_access_mode,
        premium_resources=tuple(args.premium_resources),
        premium_node_policy=args.premium_node_policy,
    )
    own_nodes = {node for p in own if (node := spec(p).get("nodeName"))}
    try:
        state = await reader.state_for(
            pod,
            extra_claims=report.user_claims(own, pvcs, args.user, label),
            extra_nodes=sorted(own_nodes),
        )
    except Exception as exc:
        if kubeapi.status_of(exc) is None:
            raise
        raise _api_error(exc, "read the objects the decision needs") from None
    try:
        decision = decide(pod, state, policy)
    except (ValueError, TypeError, AttributeError, KeyError) as exc:
        where = f"namespace {namespace}" + (f" or {args.pod}" if args.pod else "")
        raise StateError(f"malformed object in {where}: {exc}") from None
    notes = [
        *_empty_namespace_note(state),
        *_denied_notes(reader.denied, messages.NODES_COST_EXPLAIN),
    ]
    state = state.replace(notes=notes)
    try:
        return report.explain_report(
            args.user,
            label,
            state,
            server=server,
            pod=pod,
            pod_source=source,
            decision=decision,
            policy=policy,
        )
    except (ValueError, TypeError, AttributeError, KeyError) as exc:
        raise StateError(f"malformed object in namespace {namespace}: {exc}") from None


# --------------------------------------------------------------------------------------------------
# audit


async def _audit(conn: kubeapi.Connection, args: argparse.Namespace) -> JsonDict:
    namespace = args.namespace or conn.namespace or "default"
    reader = view.DirectReader(conn.api_client, namespace)
    await _read_namespace(reader)
    try:
        state = await reader.everything()
    except Exception as exc:
        if kubeapi.status_of(exc) is None:
            raise
        raise _api_error(exc, "read nodes and volume attachments") from None
    notes = [
        *_empty_namespace_note(state),
        *_denied_notes(reader.denied, messages.NODES_COST_AUDIT),
    ]
    state = state.replace(notes=notes)
    policy = Policy(
        storage_access_mode=args.storage_access_mode or DEFAULT_ACCESS_MODE,
        premium_resources=tuple(args.premium_resources),
    )
    try:
        return report.audit_report(
            state, policy, deployment_mode_given=args.storage_access_mode is not None
        )
    except (ValueError, TypeError, AttributeError, KeyError) as exc:
        raise StateError(f"malformed object in namespace {namespace}: {exc}") from None


async def _live(args: argparse.Namespace) -> int:
    import aiohttp

    if args.command == "explain" and args.pod:
        dumps.read_pod(args.pod)  # bad input fails before anything is asked of a cluster
    conn = await connect(args.kubeconfig, args.context)
    work = _explain if args.command == "explain" else _audit
    try:
        result = await asyncio.wait_for(work(conn, args), timeout=args.timeout)
    except asyncio.TimeoutError:
        raise ClusterError(messages.api_no_answer(conn.server, args.timeout)) from None
    except (aiohttp.ClientError, OSError) as exc:
        raise ClusterError(
            messages.api_unreachable(conn.server, conn.source, _one_line(exc))
        ) from None
    finally:
        await conn.api_client.close()
    if args.json:
        print(json.dumps(result))
    elif args.command == "explain":
        print(messages.render_explain(result))
    else:
        print(messages.render_audit(result))
    return 0


# --------------------------------------------------------------------------------------------------
# migrate (the move itself is nebari_colocate.migrate; docs/migrate.md)


def _add_migrate(sub: argparse._SubParsersAction[_Parser]) -> None:
    mig = sub.add_parser(
        "migrate",
        help="move home claims from ReadWriteOnce to ReadWriteMany storage, resumably",
        description="Move users' home claims to ReadWriteMany storage: a verified copy, then "
        "claim-{username} rebound to the new volume; the old volume is kept. See docs/migrate.md.",
    )
    actions = mig.add_subparsers(dest="migrate_command", required=True, parser_class=_Parser)
    plan = actions.add_parser(
        "plan",
        help="per user: the claim, its mode, size, class, running servers and what apply would do",
    )
    apply = actions.add_parser(
        "apply",
        help="move the homes of USERS (or --all whose servers "
        "are stopped); resumes an interrupted move",
    )
    status = actions.add_parser("status", help="where each user's move stands")
    back = actions.add_parser("rollback", help="put a user's home back on its old volume")
    for parser, users_help in (
        (plan, "users or claims to show (default: every home claim)"),
        (apply, "users or claim names to move"),
        (status, "users or claims to show (default: every move recorded)"),
        (back, "users or claim names to roll back"),
    ):
        parser.add_argument("users", nargs="*", metavar="USER", help=users_help)
        parser.add_argument(
            "--namespace",
            "-n",
            metavar="NS",
            help="the hub's namespace (default: the kubeconfig context's namespace, else default)",
        )
        parser.add_argument("--kubeconfig", metavar="PATH", help="kubeconfig file")
        parser.add_argument("--context", metavar="NAME", help="kubeconfig context to use")
        parser.add_argument(
            "--claim-prefix",
            default="claim-",
            metavar="PREFIX",
            help="home claims are named PREFIX{username} (default: claim-)",
        )
        parser.add_argument("--json", action="store_true", help="print one JSON object")
    for parser in (plan, apply):
        parser.add_argument(
            "--storage-class",
            metavar="NAME",
            help="the ReadWriteMany class to move to (default: the hub's custom.storage-class)",
        )
    apply.add_argument(
        "--all", action="store_true", help="every home claim whose servers are stopped"
    )
    apply.add_argument(
        "--concurrency",
        type=_positive_int,
        default=4,
        metavar="N",
        help="moves at a time (default: 4)",
    )
    apply.add_argument(
        "--dry-run", action="store_true", help="say what would be done, change nothing"
    )
    apply.add_argument(
        "--image",
        default=None,
        metavar="IMAGE",
        help="image of the copy pod; it needs python3 (default: python:3.12-slim)",
    )
    apply.add_argument(
        "--copy-timeout",
        type=_seconds("--copy-timeout"),
        default=3600.0,
        metavar="SECONDS",
        help="the most one copy may take (default: 3600)",
    )
    for parser in (apply, back):
        parser.add_argument(
            "--timeout",
            type=_seconds("--timeout"),
            default=migrate.BIND_TIMEOUT,
            metavar="SECONDS",
            help="the most one step waits for a claim to bind, a pod to be placed or deleted; "
            "a move that waits longer gives up (before the swap the home is unmarked) "
            f"(default: {migrate.BIND_TIMEOUT:g})",
        )


def _seconds(flag: str) -> Callable[[str], float]:
    def parse(value: str) -> float:
        try:
            number = float(value)
        except ValueError:
            number = -1.0
        if not (0 < number < 1e9):  # also refuses nan and inf
            raise argparse.ArgumentTypeError(
                f"invalid {flag} {value!r}: use a number of seconds > 0"
            )
        return number

    return parse


def _positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"invalid count {value!r}: use a whole number >= 1")
    return number


async def _migrate(args: argparse.Namespace) -> int:
    import aiohttp

    if args.migrate_command == "apply" and not args.users and not args.all:
        raise UsageError(messages.MIGRATE_APPLY_WHOM)
    if args.migrate_command == "apply" and args.users and args.all:
        raise UsageError(messages.MIGRATE_APPLY_NOT_BOTH)
    if args.migrate_command == "rollback" and not args.users:
        raise UsageError(messages.MIGRATE_ROLLBACK_WHOM)
    conn = await connect(args.kubeconfig, args.context)
    namespace = args.namespace or conn.namespace or "default"
    storage_class = getattr(args, "storage_class", None) or migrate.hub_storage_class()
    mover = migrate.Mover(
        conn.api_client,
        namespace,
        storage_class=storage_class,
        image=getattr(args, "image", None) or migrate.DEFAULT_IMAGE,
        claim_prefix=args.claim_prefix,
        copy_timeout=getattr(args, "copy_timeout", 3600.0),
        bind_timeout=getattr(args, "timeout", migrate.BIND_TIMEOUT),
    )
    try:
        result, status = await migrate.run(
            mover,
            args.migrate_command,
            args.users,
            storage_class,
            dry_run=getattr(args, "dry_run", False),
            concurrency=getattr(args, "concurrency", 4),
        )
    except migrate.MigrateError as exc:
        raise ClusterError(str(exc)) from None
    except (aiohttp.ClientError, OSError) as exc:
        raise ClusterError(
            messages.api_unreachable(conn.server, conn.source, _one_line(exc))
        ) from None
    except Exception as exc:
        if kubeapi.status_of(exc) is not None:
            raise _api_error(
                exc, f"migrate {args.migrate_command}", messages.MIGRATE_RBAC_HINT
            ) from None
        raise
    finally:
        await conn.api_client.close()
    if args.json:
        print(json.dumps(result))
    elif args.migrate_command == "plan":
        print(messages.render_migrate_plan(result))
    elif args.migrate_command == "status":
        print(messages.render_migrate_status(result))
    else:
        print(messages.render_migrate_results(result["results"], result.get("dry_run", False)))
    return status


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "simulate":
            return simulate(args)
        if args.command in ("explain", "audit"):
            return asyncio.run(_live(args))
        if args.command == "migrate":
            return asyncio.run(_migrate(args))
    except (StateError, UsageError, ClusterError) as exc:
        print(f"nebari-colocate: {exc}", file=sys.stderr)
        return 2
    parser.error(f"unknown command {args.command!r}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
