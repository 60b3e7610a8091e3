"""Drive the control plane through the agreement scenarios: build each one, decide, create the pod,
take the scheduler's verdict, and sum the run up in the lines ``scripts/test`` reads
(``DISAGREE …``, ``verdicts: …``, ``refusal reasons: …``, ``agreement: A/N``).

Each scenario is also decided from direct API reads and from a live view started before the
scenario's objects exist; both must decide exactly as the full state (``benchmarks/README.md``).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import secrets
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks import _cluster
from nebari_colocate import cli
from nebari_colocate.affinity import apply_decision
from nebari_colocate.dumps import flatten_objects
from nebari_colocate.kubeapi import read_json
from nebari_colocate.placement import COLOCATE, REFUSE, SKIP, Decision, Policy, decide
from nebari_colocate.state import ClusterState
from nebari_colocate.view import ClusterView, DirectReader

from . import priorities
from .judge import first_verdict, going, judge, preemption_verdict, still_there
from .scenarios import (
    LABEL_KEY,
    RUNTIME_CLASSES,
    SCENARIO_LABEL,
    USER,
    PodSpec,
    Scenario,
    generate,
)

helpers = _cluster.helpers

FINALIZER = "agreement.nebari.dev/hold"
POLICY = Policy()  # ReadWriteOnce, premium guard "warn" (a policy, not a scheduler fact)


# --------------------------------------------------------------------------------------------------
# the cluster side


async def ensure_runtime_classes(api_client) -> None:
    from kubernetes_asyncio import client
    from kubernetes_asyncio.client.exceptions import ApiException

    node_api = client.NodeV1Api(api_client)
    for name, overhead in RUNTIME_CLASSES.items():
        body = {
            "apiVersion": "node.k8s.io/v1",
            "kind": "RuntimeClass",
            "metadata": {"name": name},
            "handler": name.split("-", 1)[1],
            "overhead": {"podFixed": overhead},
        }
        try:
            await node_api.create_runtime_class(body)
        except ApiException as exc:
            if exc.status != 409:
                raise


async def ensure_priority_classes(api_client) -> None:
    from kubernetes_asyncio import client
    from kubernetes_asyncio.client.exceptions import ApiException

    scheduling = client.SchedulingV1Api(api_client)
    for body in priorities.class_objects():
        try:
            await scheduling.create_priority_class(body)
        except ApiException as exc:
            if exc.status != 409:
                raise


async def build_extras(api_client, scenario: Scenario, *, nominate_within: float = 15.0) -> None:
    """The PDB of the placeholders (its status written as the disruption controller would), and
    the nominee: created, then waited for until the scheduler nominated it (or bound it)."""
    from kubernetes_asyncio import client

    extras = scenario.extras
    if extras is None:
        return
    namespace = scenario.namespace
    if extras.pdb is not None:
        policy = client.PolicyV1Api(api_client)
        await policy.create_namespaced_pod_disruption_budget(namespace, extras.pdb)
        status = {
            "status": {
                "disruptionsAllowed": extras.disruptions_allowed,
                "currentHealthy": 0,
                "desiredHealthy": 0,
                "expectedPods": 0,
            }
        }
        await policy.patch_namespaced_pod_disruption_budget_status(
            extras.pdb["metadata"]["name"], namespace, status
        )
    if extras.nominee is not None:
        core = client.CoreV1Api(api_client)
        await core.create_namespaced_pod(namespace, extras.nominee)
        # nominated (or bound), and its victim marked: what is read next is settled
        deadline = time.monotonic() + nominate_within
        while time.monotonic() < deadline:
            pod = await read_json(core.read_namespaced_pod, priorities.NOMINEE, namespace)
            victim = await read_json(core.read_namespaced_pod, priorities.NOMINEE_VICTIM, namespace)
            if pod["spec"].get("nodeName") or (
                (pod.get("status") or {}).get("nominatedNodeName")
                and victim["metadata"].get("deletionTimestamp")
            ):
                return
            await asyncio.sleep(0.1)
        # not nominated (it fits nowhere even by preemption): gone, so that no later retry of
        # it preempts while the scenario's pod is judged
        await core.delete_namespaced_pod(priorities.NOMINEE, namespace, grace_period_seconds=0)


async def build(api_client, scenario: Scenario) -> None:
    """Create the scenario's objects, as a cluster that got there by itself would hold them."""
    from kubernetes_asyncio import client

    core = client.CoreV1Api(api_client)
    for ns in (scenario.namespace, *scenario.other_namespaces):
        await core.create_namespace({"metadata": {"name": ns}})
    await asyncio.gather(
        *(
            helpers.create_node(
                api_client,
                n.name,
                labels=n.labels,
                taints=n.taints,
                unschedulable=n.unschedulable,
                cpu=n.cpu,
                memory=n.memory,
                pods=n.pods,
                extra=n.extra,
            )
            for n in scenario.nodes
        )
    )
    for claim in scenario.claims:
        await helpers.create_bound_claim(
            api_client,
            scenario.namespace,
            claim.name,
            claim.modes,
            pv_node_affinity=claim.pv_affinity,
        )
    for claim, node, attached in scenario.attachments:
        pv = helpers._short_name("pv", scenario.namespace, claim)
        await helpers.create_volume_attachment(api_client, pv, node, attached)

    async def existing(pod: PodSpec) -> None:
        meta = pod.manifest["metadata"]
        ns, name = meta["namespace"], meta["name"]
        body = json.loads(json.dumps(pod.manifest))
        started = body.pop("status", {}).get("startTime")
        if pod.terminating:
            body["metadata"]["finalizers"] = [FINALIZER]
        await core.create_namespaced_pod(ns, body)
        status = {"phase": pod.phase, **({"startTime": started} if started else {})}
        if pod.phase != "Pending" or started:
            await core.patch_namespaced_pod_status(name, ns, {"status": status})
        if pod.terminating:
            await core.delete_namespaced_pod(name, ns, grace_period_seconds=0)

    await asyncio.gather(*(existing(p) for p in scenario.pods))
    await build_extras(api_client, scenario)


async def read_objects(api_client, scenario: Scenario) -> list[dict]:
    """The scenario's Nodes, Pods (all its namespaces), PVCs, PVs and VolumeAttachments, and the
    PriorityClasses, PodDisruptionBudgets and RuntimeClasses, as the API returns them (raw
    camelCase JSON, ``kind`` set as ``kubectl get -o yaml`` prints it)."""
    from kubernetes_asyncio import client

    core, storage = client.CoreV1Api(api_client), client.StorageV1Api(api_client)
    scheduling, policy = client.SchedulingV1Api(api_client), client.PolicyV1Api(api_client)
    node_api = client.NodeV1Api(api_client)
    selector = f"{SCENARIO_LABEL}={scenario.namespace}"
    pv_selector = f"{helpers.LABEL_NAMESPACE}={scenario.namespace}"
    listings = await asyncio.gather(
        read_json(core.list_node, label_selector=selector),
        *(
            read_json(core.list_namespaced_pod, ns)
            for ns in (scenario.namespace, *scenario.other_namespaces)
        ),
        read_json(core.list_namespaced_persistent_volume_claim, scenario.namespace),
        read_json(core.list_persistent_volume, label_selector=pv_selector),
        read_json(storage.list_volume_attachment, label_selector=pv_selector),
        read_json(scheduling.list_priority_class),
        read_json(node_api.list_runtime_class),  # so that a kept failure replays with them
        read_json(policy.list_namespaced_pod_disruption_budget, scenario.namespace),
    )
    # A list's items carry neither kind nor apiVersion: flatten_objects names the kind after the
    # list's (PodList: Pod), as for a `kubectl get -o yaml` dump; the apiVersion is the list's.
    return [
        {"apiVersion": listing["apiVersion"], "kind": item["kind"], **item}
        for listing in listings
        for item in flatten_objects([listing], "the API")
    ]


async def cleanup(api_client, scenario: Scenario) -> None:
    from kubernetes_asyncio import client
    from kubernetes_asyncio.client.exceptions import ApiException

    core = client.CoreV1Api(api_client)
    for ns in scenario.other_namespaces:
        pods = await read_json(core.list_namespaced_pod, ns)
        for pod in pods["items"]:
            name = pod["metadata"]["name"]
            with contextlib.suppress(ApiException):
                if pod["metadata"].get("finalizers"):
                    await core.patch_namespaced_pod(name, ns, {"metadata": {"finalizers": None}})
                await core.delete_namespaced_pod(name, ns, grace_period_seconds=0)
    await helpers.cleanup(api_client, scenario.namespace, [n.name for n in scenario.nodes])
    for ns in (scenario.namespace, *scenario.other_namespaces):
        await helpers.delete_namespace(api_client, ns)


# --------------------------------------------------------------------------------------------------
# one scenario: decide, ask the scheduler, compare


@dataclass
class Outcome:
    index: int
    agree: bool
    verdict: str
    pinned: bool
    scheduler: str  # "bound" | "failed" | "timeout"
    detail: str
    why: str = ""
    loader_mismatch: str = ""
    objects: list = field(default_factory=list, repr=False)
    pod: dict = field(default_factory=dict, repr=False)
    #: what the scenario's priorities hold: "placeholders", "nominated" or "" (none)
    priorities: str = ""
    decision: Decision | None = field(default=None, repr=False)


def _outcome_fields(decision: Decision) -> tuple:
    victims = decision.preemption.victim_keys if decision.preemption else None
    return (
        decision.verdict,
        decision.node,
        sorted(decision.reasons),
        sorted(decision.warnings),
        decision.holders,
        victims,
    )


def _not_older(held: str | None, read: str) -> bool:
    """The view's copy is the one read or a later one (a controller, such as pvc-protection
    adding its finalizer, may change an object after it was read).  resourceVersions are opaque
    to clients; on this test control plane they are etcd revisions, so they compare as numbers."""
    if held == read:
        return True
    try:
        return held is not None and int(held) >= int(read)
    except ValueError:
        return False


async def _caught_up(view: ClusterView, objects: list[dict], timeout: float = 30.0) -> None:
    """Wait until the live view holds every object read (that version or a later one)."""
    collections = {
        "Pod": lambda: view.pods,
        "PersistentVolumeClaim": lambda: view.pvcs,
        "PersistentVolume": lambda: view.pvs,
        "VolumeAttachment": lambda: view.attachments,
        "Node": lambda: view.nodes,
        "PriorityClass": lambda: view.hub.priority_classes,
        "PodDisruptionBudget": lambda: view.hub.pdbs,
    }
    deadline = time.monotonic() + timeout
    while True:
        behind = []
        for obj in objects:
            if obj["kind"] not in collections:  # RuntimeClasses: the view does not read them
                continue
            meta = obj["metadata"]
            key = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]
            held = collections[obj["kind"]]().items.get(key)
            version = None if held is None else held["metadata"].get("resourceVersion")
            if not _not_older(version, meta["resourceVersion"]):
                behind.append(f"{obj['kind']} {key}")
        optional = (view.hub.priority_classes.live, view.hub.pdbs.live)
        if not behind and view.live and all(optional):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"the live view did not catch up in {timeout} s: {behind[:5]}")
        await asyncio.sleep(0.05)


async def run_scenario(api_client, scenario: Scenario, *, timeout: float, settle: float) -> Outcome:
    # The live view watches from before the scenario exists: it learns it from watch events.
    view = ClusterView(api_client, scenario.namespace)
    view.start()
    try:
        await build(api_client, scenario)
        await asyncio.sleep(settle)  # the scheduler's informers see every object before the pod
        objects = await read_objects(api_client, scenario)
        namespace = scenario.namespace
        pod = scenario.new_pod
        state = ClusterState.from_objects(objects, namespace=namespace)
        decision = decide(pod, state, POLICY)

        mismatches = []
        direct = decide(pod, await DirectReader(api_client, namespace).state_for(pod), POLICY)
        if _outcome_fields(direct) != _outcome_fields(decision):
            mismatches.append(
                f"direct reads: {_outcome_fields(direct)} vs {_outcome_fields(decision)}"
            )
        await _caught_up(view, objects)
        live = decide(pod, await view.state_for(pod), POLICY)
        if _outcome_fields(live) != _outcome_fields(decision):
            mismatches.append(f"live view: {_outcome_fields(live)} vs {_outcome_fields(decision)}")
    finally:
        await view.stop()

    pin = decision.node
    if decision.verdict == REFUSE and pin is None and decision.holder_pods:
        pin = decision.holder_pods[0]["spec"]["nodeName"]  # claim-in-use stops before pinning
    if decision.verdict == REFUSE:
        would_be = Decision(COLOCATE, node=pin)
        manifest = apply_decision(pod, would_be, LABEL_KEY, USER)
    else:
        manifest = apply_decision(pod, decision, LABEL_KEY, USER)

    from kubernetes_asyncio import client

    await client.CoreV1Api(api_client).create_namespaced_pod(namespace, manifest)
    name = pod["metadata"]["name"]
    taken = decision.preemption
    if decision.verdict == COLOCATE and taken is not None:
        said, detail = await preemption_verdict(
            api_client, namespace, name, pin or "", taken.victim_keys, timeout
        )
    else:
        said, detail = await first_verdict(api_client, namespace, name, timeout)
    agree, why = judge(decision, pod, state, pin, said, detail)
    if agree and decision.verdict == COLOCATE and taken is not None:
        agree, why = await _same_victims(api_client, objects, taken.victim_keys, name, why)
    return Outcome(
        scenario.index,
        agree,
        decision.verdict,
        decision.node is not None,
        said,
        detail,
        why=why,
        loader_mismatch="; ".join(mismatches),
        objects=objects,
        pod=pod,
        decision=decision,
        priorities=_priorities_kind(scenario),
    )


def _priorities_kind(scenario: Scenario) -> str:
    if scenario.extras is None:
        return ""
    return "nominated" if scenario.extras.nominee is not None else "placeholders"


async def _same_victims(
    api_client, objects: list[dict], victims: list[str], new_pod: str, why: str
) -> tuple[bool, str]:
    """The scheduler evicted exactly ``victims`` of the pods read before the pod was created
    (a pod already going then, terminating or marked for an earlier preemption, is not told
    apart)."""
    before = [o for o in objects if o["kind"] == "Pod" and o["metadata"]["name"] != new_pod]
    marked = {_key(o) for o in before if going(o)}
    keys = [_key(o) for o in before if _key(o) not in marked]
    left = set(await still_there(api_client, keys))
    evicted = sorted(k for k in keys if k not in left)
    expected = sorted(k for k in victims if k not in marked)
    if evicted != expected:
        return False, f"{why}; scheduler evicted {evicted}, we predicted {expected}"
    return True, f"{why}; evicted {evicted}"


def _key(obj: dict) -> str:
    return f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"


# --------------------------------------------------------------------------------------------------
# disagreements on disk


def write_failure(directory: Path, seed: int, outcome: Outcome) -> Path:
    import yaml

    where = directory / f"seed{seed}-{outcome.index:05d}"
    where.mkdir(parents=True, exist_ok=True)
    state_path, pod_path = where / "state.yaml", where / "pod.yaml"
    state_path.write_text(
        yaml.safe_dump(
            {"apiVersion": "v1", "kind": "List", "items": outcome.objects}, sort_keys=False
        )
    )
    pod_path.write_text(yaml.safe_dump(outcome.pod, sort_keys=False))
    decision = outcome.decision
    (where / "scheduler.txt").write_text(
        f"decide: {decision.verdict} node={decision.node} reasons={sorted(decision.reasons)}\n"
        f"scheduler: {outcome.scheduler}: {outcome.detail}\n"
        f"why: {outcome.why}\n"
        f"reproduce: nebari-colocate simulate {state_path} --pod {pod_path} --json\n"
    )
    # The pair must reproduce what decide said: check it through the CLI itself.
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        cli.main(["simulate", str(state_path), "--pod", str(pod_path), "--json"])
    replayed = json.loads(buffer.getvalue())
    if (replayed["verdict"], replayed["node"], replayed["reasons"]) != (
        decision.verdict,
        decision.node,
        sorted(decision.reasons),
    ):
        print(f"warning: {where} does not reproduce the decision: {replayed}", file=sys.stderr)
    return where


# --------------------------------------------------------------------------------------------------
# the run


@dataclass
class Result:
    agreed: int
    count: int
    outcomes: list
    seconds: float

    @property
    def line(self) -> str:
        return f"agreement: {self.agreed}/{self.count}"


async def run_agreement(
    api_client,
    *,
    seed: int,
    count: int,
    concurrency: int = 6,
    keep_failures: Path | None = None,
    timeout: float = 60.0,
    settle: float = 0.3,
    log=print,
) -> Result:
    """Run ``count`` scenarios of ``seed`` against the control plane behind ``api_client``."""
    await ensure_runtime_classes(api_client)
    await ensure_priority_classes(api_client)
    token = secrets.token_hex(2)
    gate = asyncio.Semaphore(concurrency)
    outcomes: list[Outcome] = []
    started = time.perf_counter()

    async def one(index: int) -> None:
        async with gate:
            scenario = generate(seed, index, token)
            try:
                outcome = await run_scenario(api_client, scenario, timeout=timeout, settle=settle)
            except Exception as exc:  # a harness failure is a disagreement too: say what it was
                outcome = Outcome(
                    index, False, "error", False, "error", f"{type(exc).__name__}: {exc}"
                )
                outcome.why = outcome.detail
            finally:
                with contextlib.suppress(Exception):
                    await cleanup(api_client, scenario)
            outcomes.append(outcome)
            if not outcome.agree:
                where = ""
                if keep_failures is not None and outcome.decision is not None:
                    where = f" -> {write_failure(keep_failures, seed, outcome)}"
                log(f"DISAGREE seed={seed} scenario={index}: {outcome.why}{where}")
            if outcome.loader_mismatch:
                log(f"loader mismatch seed={seed} scenario={index}: {outcome.loader_mismatch}")
            done = len(outcomes)
            if done % 50 == 0 or done == count:
                agreed = sum(o.agree for o in outcomes)
                elapsed = time.perf_counter() - started
                log(f"  {done}/{count} scenarios, {agreed} agree, {elapsed:.0f} s")

    await asyncio.gather(*(one(i) for i in range(count)))
    outcomes.sort(key=lambda o: o.index)
    return Result(sum(o.agree for o in outcomes), count, outcomes, time.perf_counter() - started)


def summary(result: Result) -> list[str]:
    kinds = Counter()
    for o in result.outcomes:
        if o.verdict == REFUSE:
            kinds["refuse"] += 1
        elif o.verdict == COLOCATE:
            kinds["colocate pinned" if o.pinned else "colocate unpinned"] += 1
        elif o.verdict == SKIP:
            kinds["skip"] += 1
        else:
            kinds[o.verdict] += 1
    reasons = Counter(
        r for o in result.outcomes if o.decision is not None for r in o.decision.reasons
    )
    loader = sum(1 for o in result.outcomes if o.loader_mismatch)
    kinds_of = Counter(o.priorities for o in result.outcomes if o.priorities)
    decided = [o.decision for o in result.outcomes if o.decision is not None]
    preempting = [d for d in decided if d.verdict == COLOCATE and d.preemption]
    refused_holders = sum(1 for d in decided if d.preemption and d.preemption.holders)
    never = sum(
        1
        for o in result.outcomes
        if str(o.pod.get("spec", {}).get("priorityClassName", "")).endswith("never")
    )
    return [
        "priorities: "
        + ", ".join(f"{k} {v}" for k, v in sorted(kinds_of.items()))
        + f"; preemptionPolicy Never {never}; colocate by preemption {len(preempting)}"
        + f" (victims {sum(len(d.preemption.victims) for d in preempting if d.preemption)})"
        + f"; refused as it would preempt a holder {refused_holders}",
        "verdicts: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())),
        "refusal reasons: " + ", ".join(f"{k} {v}" for k, v in sorted(reasons.items())),
        f"the live view or direct reads decided differently from the full state: {loader}",
        f"{result.count} scenarios in {result.seconds:.0f} s",
    ]
