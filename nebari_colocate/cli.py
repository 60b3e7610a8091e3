"""The ``nebari-colocate`` command.

``simulate`` decides offline from a cluster dump (DESIGN section 8: its JSON fields, reason codes
and exit codes are a contract other tools read; extend, never rename).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from . import __version__, fit, messages
from .placement import Policy, decide
from .state import ClusterState, StateError, read_yaml

ACCESS_MODES = ("ReadWriteOnce", "ReadWriteMany")
PREMIUM_POLICIES = ("allow", "warn", "refuse")


class UsageError(Exception):
    """Bad input: exit status 2 with one line on stderr."""


def _caseless(choices: Sequence[str], what: str):
    def convert(value: str) -> str:
        for choice in choices:
            if value.lower() == choice.lower():
                return choice
        raise argparse.ArgumentTypeError(
            f"invalid {what} {value!r}: choose one of {', '.join(choices)}"
        )

    return convert


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, status 2, like every other bad input
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="nebari-colocate",
        description="Volume-aware co-location for KubeSpawner: simulate its decisions.",
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
        default="ReadWriteOnce",
        help="access mode of claims missing from STATE (default: ReadWriteOnce)",
    )
    sim.add_argument(
        "--no-node-access",
        action="store_true",
        help="judge as a hub without Node read permission (Node objects are ignored)",
    )
    sim.add_argument(
        "--premium-node-policy",
        type=_caseless(PREMIUM_POLICIES, "premium node policy"),
        default="warn",
        help="allow, warn or refuse a pod without GPU requests on a GPU node (default: warn)",
    )
    sim.add_argument("--json", action="store_true", help="print one JSON object")
    return parser


def load_pod(path: str) -> dict:
    objects = read_yaml(path)
    pods = [o for o in objects if o.get("kind", "Pod") == "Pod"]
    if len(pods) != 1:
        raise StateError(f"{path}: expected exactly one Pod, found {len(pods)}")
    pod = pods[0]
    if not isinstance(pod.get("spec"), dict):
        raise StateError(f"{path}: the Pod has no spec")
    try:
        # Invalid input whatever the verdict, not only when a fit check happens to read it.
        fit.pod_requests(pod)
    except (ValueError, TypeError, AttributeError) as exc:
        raise StateError(f"{path}: malformed Pod: {exc}") from None
    return pod


def pod_owner(pod: dict) -> tuple[str, str]:
    """(username, server name) from the annotations KubeSpawner writes."""
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    labels = meta.get("labels") or {}
    username = annotations.get(messages.USERNAME_ANNOTATION) or labels.get(
        messages.USERNAME_LABEL, ""
    )
    return username, annotations.get(messages.SERVERNAME_ANNOTATION, "")


def simulate(args: argparse.Namespace) -> int:
    pod = load_pod(args.pod)
    objects = read_yaml(args.state)
    namespace = (pod.get("metadata") or {}).get("namespace") or "default"
    pod.setdefault("metadata", {})["namespace"] = namespace
    state = ClusterState.from_objects(
        objects, namespace=namespace, node_access=not args.no_node_access
    )
    policy = Policy(
        storage_access_mode=args.storage_access_mode,
        premium_node_policy=args.premium_node_policy,
    )
    try:
        decision = decide(pod, state, policy)
    except (ValueError, TypeError, AttributeError, KeyError) as exc:
        raise StateError(f"{args.pod} with {args.state}: malformed object: {exc}") from None
    username, server = pod_owner(pod)
    label = ((pod.get("metadata") or {}).get("labels") or {}).get(messages.USERNAME_LABEL)
    text = messages.user_message(
        decision, pod, username=username, server_name=server, user_label=label
    )
    if args.json:
        print(json.dumps(decision.as_json(text), sort_keys=False))
        return 0
    if decision.verdict == "refuse":
        print(text)
    elif decision.verdict == "skip":
        print(
            "Its volumes can be used from any node: no co-location needed, the server starts "
            "wherever the scheduler likes."
        )
    elif decision.node:
        print(f"The server starts on node {decision.node}, beside the servers using its volume.")
    else:
        print("The server starts on any node; later servers of this user will join it there.")
    for warning in decision.warnings:
        print(f"warning: {warning}")
    print(messages.operator_line(decision, username=username, server_name=server))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "simulate":
            return simulate(args)
    except (StateError, UsageError) as exc:
        print(f"nebari-colocate: {exc}", file=sys.stderr)
        return 2
    parser.error(f"unknown command {args.command!r}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
