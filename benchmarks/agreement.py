"""Does ``decide`` predict the real kube-scheduler?  Random scenarios, one verdict each.

For each scenario (seeded, reproducible) it builds a small cluster in a real control plane
(etcd, kube-apiserver and kube-scheduler from tests/kube, loopback only, no kubelet):

- 2-5 Nodes with random labels, taints of every effect, cordons and allocatable cpu, memory,
  pods and GPUs;
- existing pods across namespaces bound by ``spec.nodeName`` (bypassing the scheduler), in every
  phase (set through the status subresource), some terminating (a finalizer keeps them);
- a user whose servers (the holders) sit on one node and mount the user's claims (RWO, RWX, ROX,
  RWOP; PVs sometimes with node affinity), sometimes a VolumeAttachment;
- a new pod with a random nodeSelector, required node affinity (every operator, several terms,
  matchFields), tolerations (incl. empty-key Exists), init containers, sidecars, overhead (from a
  RuntimeClass), limits-only resources, pod-level resources and GPUs.

It reads the objects back from the API, runs ``decide`` on them, creates the new pod with the
affinity ``apply_decision`` emits (for a refusal: the affinity it *would* carry, pinned to the node
it was refused on) and takes the scheduler's first verdict: a binding or a FailedScheduling event.

Agreement:

- refuse <-> FailedScheduling, and the scheduler's reason for the pinned node is the reason of
  the first failing filter (in kube-scheduler's plugin order) among our reason codes; for
  NodeResourcesFit, which reports every shortfall, the sets of resources are equal;
- colocate on N <-> bound to N;
- colocate unpinned, skip <-> bound to a node where ``fit.check_fit`` admits the pod (or, when it
  admits it nowhere, FailedScheduling).

A disagreement is written to ``--keep-failures DIR`` as ``state.yaml`` + ``pod.yaml`` (what
decide saw; ``nebari-colocate simulate DIR/.../state.yaml --pod DIR/.../pod.yaml --json``
reproduces the decision) with ``scheduler.txt`` (what the scheduler said).  The last line is
``agreement: A/N``; the exit status is 1 below N/N.

    python benchmarks/agreement.py --seed 1 --count 200 [--keep-failures DIR] [--concurrency 6]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import re
import secrets
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent))

import _cluster

from nebari_colocate import fit
from nebari_colocate.affinity import apply_decision
from nebari_colocate.placement import COLOCATE, REFUSE, SKIP, Decision, Policy, decide
from nebari_colocate.state import ClusterState
from nebari_colocate.view import ClusterView, DirectReader

helpers = _cluster.helpers

LABEL_KEY = "nebari.dev/colocate-user"
USER = "alice"
SCENARIO_LABEL = "agreement.nebari.dev/scenario"
FINALIZER = "agreement.nebari.dev/hold"
PROFILE_ANNOTATION = "agreement.nebari.dev/profile"
HOLD = {"kubelet-stub.nebari.dev/hold": "true"}  # a kubelet stub, if one runs, leaves them alone
RUNTIME_CLASSES = {
    "agreement-kata": {"cpu": "250m", "memory": "160Mi"},
    "agreement-gvisor": {"cpu": "100m", "memory": "64Mi"},
}
POLICY = Policy()  # ReadWriteOnce, premium guard "warn" (a policy, not a scheduler fact)

# --------------------------------------------------------------------------------------------------
# the scheduler's words, per filter plugin, in the order kube-scheduler 1.37 runs them
# (pkg/scheduler/apis/config/v1/default_plugins.go)

FILTER_ORDER = (
    "NodeUnschedulable",
    "TaintToleration",
    "NodeAffinity",
    "NodeResourcesFit",
    "VolumeRestrictions",
    "VolumeBinding",
)
FRAGMENTS = {
    "node(s) were unschedulable": "node-unschedulable",
    "node(s) had untolerated taint(s)": "taint",
    "node(s) didn't match Pod's node affinity/selector": "node-selector",
    "Too many pods": "too-many-pods",
    "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode "
    "already in-use by another pod": "claim-in-use",
    "node(s) didn't match PersistentVolume's node affinity": "volume-node-affinity",
}
# PreFilter rejections: every node gets the same status, no per-node histogram.
PREFILTER_FRAGMENTS = {"pod affinity terms conflict": "node-selector"}
EXCLUDED_BY_PIN = "node(s) didn't satisfy plugin(s) [NodeAffinity]"


def plugin_of(code: str) -> str | None:
    if code == "node-unschedulable":
        return "NodeUnschedulable"
    if code == "taint":
        return "TaintToleration"
    if code == "node-selector":
        return "NodeAffinity"
    if code == "too-many-pods" or code.startswith("insufficient:"):
        return "NodeResourcesFit"
    if code == "claim-in-use":
        return "VolumeRestrictions"
    if code == "volume-node-affinity":
        return "VolumeBinding"
    return None  # split-attachment, premium-node: not scheduler facts


def fragment_code(fragment: str) -> str | None:
    if fragment.startswith("Insufficient "):
        return "insufficient:" + fragment[len("Insufficient ") :]
    return FRAGMENTS.get(fragment)


_AVAILABLE = re.compile(r"^0/(\d+) nodes are available: (.*)$", re.S)
_COUNTED = re.compile(r"^(\d+) (.+)$")


def parse_failed_scheduling(message: str) -> tuple[str | None, dict[str, int]]:
    """(PreFilter message or None, {reason: node count}) of a FailedScheduling message."""
    match = _AVAILABLE.match(message.strip())
    if not match:
        return message, {}
    body = match[2].split(" preemption:", 1)[0].strip()
    body = body.removesuffix(".")
    items = body.split(", ")
    counted = [_COUNTED.match(item) for item in items]
    if not all(counted):
        # "<PreFilter message>. <PostFilter message>": PreFilter messages hold no ". "
        return body.split(". ", 1)[0], {}
    histogram: dict[str, int] = {}
    for m in counted:
        histogram[m[2]] = histogram.get(m[2], 0) + int(m[1])
    return None, histogram


# --------------------------------------------------------------------------------------------------
# the scenario generator (pure: a seeded Random in, plain dicts out)

ZONES = ("z-a", "z-b", "z-c")
NODE_TYPES = ("cpu", "gpu", "highmem")
POOLS = ("blue", "green")
GENS = ("1", "2", "3", "4", "5", "v2")  # "v2": Gt/Lt cannot parse it
TAINT_KEYS = ("dedicated", "nvidia.com/gpu", "example.com/maintenance", "spot")
TAINT_VALUES = ("", "gpu", "team-a")
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
GPU = "nvidia.com/gpu"
FPGA = "example.com/fpga"


def _pick(rng: random.Random, weighted: dict):
    keys = list(weighted)
    return rng.choices(keys, weights=[weighted[k] for k in keys])[0]


def _cpu(rng: random.Random, milli: int) -> str:
    """A cpu quantity in one of the spellings people write."""
    if milli % 1000 == 0 and rng.random() < 0.5:
        return str(milli // 1000)
    if milli % 100 == 0 and rng.random() < 0.3:
        return f"{milli / 1000:g}"
    return f"{milli}m"


def _memory(rng: random.Random, mib: int) -> str:
    if mib % 1024 == 0 and rng.random() < 0.5:
        return f"{mib // 1024}Gi"
    if rng.random() < 0.15:
        return str(mib * 2**20)
    if rng.random() < 0.1:
        return f"{mib * 2**20 / 1e6:.0f}M"  # decimal suffix: rounding is the point
    return f"{mib}Mi"


@dataclass
class NodeSpec:
    name: str
    labels: dict
    taints: list
    unschedulable: bool
    cpu: str
    memory: str
    pods: str
    extra: dict


@dataclass
class ClaimSpec:
    name: str
    modes: list
    pv_affinity: dict | None


@dataclass
class PodSpec:
    manifest: dict
    phase: str
    terminating: bool


@dataclass
class Scenario:
    index: int
    namespace: str
    other_namespaces: list
    nodes: list
    claims: list
    pods: list
    attachments: list  # (claim name, node name, attached)
    new_pod: dict


def _node_labels(rng: random.Random, name: str, scenario: str) -> dict:
    labels = {"kubernetes.io/hostname": name, SCENARIO_LABEL: scenario}
    for key, values in (
        ("node-type", NODE_TYPES),
        ("topology.kubernetes.io/zone", ZONES),
        ("example.com/pool", POOLS),
        ("example.com/gen", GENS),
    ):
        if rng.random() < 0.85:
            labels[key] = rng.choice(values)
    if rng.random() < 0.3:
        labels["example.com/spot"] = "true"
    return labels


def _taints(rng: random.Random) -> list:
    taints, seen = [], set()
    for _ in range(_pick(rng, {0: 45, 1: 35, 2: 15, 3: 5})):
        key, effect = rng.choice(TAINT_KEYS), rng.choice(EFFECTS)
        if (key, effect) in seen:
            continue
        seen.add((key, effect))
        taint = {"key": key, "effect": effect}
        value = rng.choice(TAINT_VALUES)
        if value:
            taint["value"] = value
        taints.append(taint)
    if rng.random() < 0.05:
        taints.append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
    return taints


def _gen_node(rng: random.Random, name: str, scenario: str) -> NodeSpec:
    labels = _node_labels(rng, name, scenario)
    extra = {}
    if labels.get("node-type") == "gpu" or rng.random() < 0.1:
        extra[GPU] = str(_pick(rng, {1: 3, 2: 2, 4: 1}))
    if rng.random() < 0.08:
        extra[FPGA] = "1"
    return NodeSpec(
        name=name,
        labels=labels,
        taints=_taints(rng),
        unschedulable=rng.random() < 0.12,
        cpu=_cpu(rng, rng.choice((1000, 2000, 3500, 4000, 8000))),
        memory=_memory(rng, rng.choice((2048, 4096, 6000, 8192, 16384))),
        pods=str(_pick(rng, {1: 1, 2: 1, 3: 2, 4: 3, 6: 3, 110: 6})),
        extra=extra,
    )


def _resources(rng: random.Random, *, small: bool = False, gpu: float = 0.0) -> dict:
    """Requests and/or limits; limits-only requests them (API defaulting)."""
    cpu_choices = (50, 100, 250, 500, 1000) if small else (100, 250, 500, 1000, 1500, 2000, 3000)
    mem_choices = (64, 128, 256, 512) if small else (128, 512, 1024, 2048, 3072, 6144)
    requests, limits = {}, {}
    shape = _pick(rng, {"none": 10, "requests": 40, "limits": 25, "both": 25})
    for resource, choices, render in (("cpu", cpu_choices, _cpu), ("memory", mem_choices, _memory)):
        if rng.random() < 0.2:
            continue
        amount = rng.choice(choices)
        if shape in ("requests", "both"):
            requests[resource] = render(rng, amount)
        if shape in ("limits", "both"):
            bigger = (
                amount if shape == "limits" else rng.choice([c for c in choices if c >= amount])
            )
            limits[resource] = render(rng, bigger)
            if resource in requests and fit.parse_quantity(limits[resource]) < fit.parse_quantity(
                requests[resource]
            ):
                limits[resource] = requests[resource]  # a rounded spelling came out smaller
    if rng.random() < gpu:
        count = str(_pick(rng, {1: 4, 2: 2, 4: 1}))
        limits[GPU] = count  # extended resources: limits (requests default to them)
        if rng.random() < 0.4:
            requests[GPU] = count
    if gpu and rng.random() < 0.04:
        limits[FPGA] = "1"
    out = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out


def _pod_level(rng: random.Random, spec: dict) -> dict:
    """Pod-level ``spec.resources`` (cpu, memory) that validation accepts: requests at least the
    containers' aggregate, limits at least the requests and every container's limit."""
    aggregate = fit.pod_requests(
        {"spec": {k: spec[k] for k in ("containers", "initContainers") if k in spec}}
    )
    out: dict = {}
    for resource, step in (("cpu", 250), ("memory", 256 * 2**20)):
        if rng.random() < 0.35:
            continue
        floor = aggregate.get(resource, 0)
        request = None
        if rng.random() < 0.6:
            request = floor + step * rng.choice((0, 0, 1, 4))
            if request > 0:
                out.setdefault("requests", {})[resource] = _units(resource, request)
        if rng.random() < 0.5 or request is None:
            limits = [
                fit.scheduler_units(resource, c["resources"]["limits"][resource])
                for c in spec["containers"]
                if resource in (c.get("resources") or {}).get("limits", {})
            ]
            limit = max([request or floor, *limits]) + step * rng.choice((0, 1, 2))
            if limit > 0:
                out.setdefault("limits", {})[resource] = _units(resource, limit)
    return out


def _units(resource: str, units: int) -> str:
    return f"{units}m" if resource == "cpu" else str(units)


def _containers(rng: random.Random, *, small: bool, gpu: float, pod_level: float = 0.08) -> dict:
    spec = {
        "containers": [
            {
                "name": f"c{k}",
                "image": "quay.io/jupyter/base-notebook:latest",
                "resources": _resources(rng, small=small, gpu=gpu if k == 0 else 0.0),
            }
            for k in range(_pick(rng, {1: 6, 2: 3, 3: 1}))
        ]
    }
    init = []
    for k in range(_pick(rng, {0: 6, 1: 3, 2: 2})):
        container = {
            "name": f"init{k}",
            "image": "busybox",
            "resources": _resources(rng, small=rng.random() < 0.5),
        }
        if rng.random() < 0.45:
            container["restartPolicy"] = "Always"  # a sidecar
        init.append(container)
    if init:
        spec["initContainers"] = init
    if rng.random() < pod_level:
        resources = _pod_level(rng, spec)
        if resources:
            spec["resources"] = resources
    if rng.random() < 0.18:
        runtime = rng.choice(sorted(RUNTIME_CLASSES))
        spec["runtimeClassName"] = runtime
        # What the RuntimeClass admission plugin sets (it accepts an equal one): the spawner's
        # manifest must carry it for decide to see it (decide does not read RuntimeClasses).
        spec["overhead"] = dict(RUNTIME_CLASSES[runtime])
    return spec


def _expression(rng: random.Random, target: dict, match: float = 0.6) -> dict:
    key = rng.choice(
        (
            "node-type",
            "topology.kubernetes.io/zone",
            "example.com/pool",
            "example.com/gen",
            "example.com/gen",  # twice: Gt and Lt apply to it
            "example.com/spot",
            "kubernetes.io/hostname",
        )
    )
    operator = _pick(rng, {"In": 30, "NotIn": 15, "Exists": 12, "DoesNotExist": 10, "Gt": 14})
    if key == "example.com/gen" and rng.random() < 0.5:
        operator = "Gt"
    operator = "Lt" if operator == "Gt" and rng.random() < 0.5 else operator
    vocabulary = {
        "node-type": NODE_TYPES,
        "topology.kubernetes.io/zone": ZONES,
        "example.com/pool": POOLS,
        "example.com/gen": GENS,
        "example.com/spot": ("true", "false"),
        "kubernetes.io/hostname": (target.get("kubernetes.io/hostname", "x"), "elsewhere"),
    }[key]
    if key == "example.com/gen" and operator in ("Gt", "Lt"):
        have = target.get(key, "")
        bound = rng.randint(0, 6)
        roll = rng.random()
        if have.isdigit() and roll < match * 0.75:  # a bound the target's value satisfies
            bound = int(have) - 1 if operator == "Gt" else int(have) + 1
        elif have.isdigit() and roll < match:  # the edge: Gt and Lt are strict
            bound = int(have)
        return {"key": key, "operator": operator, "values": [str(bound)]}
    if operator in ("Gt", "Lt"):
        operator = "In"
    if operator in ("Exists", "DoesNotExist"):
        if rng.random() < match:
            operator = "Exists" if key in target else "DoesNotExist"
        return {"key": key, "operator": operator}
    values = set(rng.sample(vocabulary, k=min(len(vocabulary), rng.randint(1, 2))))
    if key in target and rng.random() < match:
        (values.add if operator == "In" else values.discard)(target[key])
        values = values or {"none"}
    return {"key": key, "operator": operator, "values": sorted(values)}


def _node_affinity(rng: random.Random, target: dict, node_names: list, match: float) -> dict:
    terms = []
    for _ in range(_pick(rng, {1: 6, 2: 3, 3: 1})):
        term: dict = {}
        count = _pick(rng, {0: 1, 1: 5, 2: 3, 3: 1})
        expressions = [_expression(rng, target, match) for _ in range(count)]
        if expressions:
            term["matchExpressions"] = expressions
        if rng.random() < 0.25 or not expressions:
            here = rng.random() < match
            name = target["kubernetes.io/hostname"] if here else rng.choice(node_names)
            operator = "In" if (rng.random() < 0.6) == here else "NotIn"
            term["matchFields"] = [{"key": "metadata.name", "operator": operator, "values": [name]}]
        terms.append(term)
    return {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}


def _tolerations(rng: random.Random, target: NodeSpec, friendly: bool) -> list:
    target_taints = target.taints
    tolerations = []
    if friendly:  # the profile was made for nodes like the target
        for taint in target_taints:
            if taint["effect"] != "PreferNoSchedule" and rng.random() < 0.9:
                tolerations.append(
                    {"key": taint["key"], "operator": "Exists", "effect": taint["effect"]}
                )
        if target.unschedulable and rng.random() < 0.6:
            tolerations.append({"key": "node.kubernetes.io/unschedulable", "operator": "Exists"})
    for _ in range(_pick(rng, {0: 30, 1: 35, 2: 25, 3: 10})):
        kind = _pick(rng, {"target": 45, "random": 35, "empty-key": 8, "unschedulable": 12})
        if kind == "empty-key":
            toleration = {"operator": "Exists"}
            if rng.random() < 0.5:
                toleration["effect"] = rng.choice(EFFECTS)
        elif kind == "unschedulable":
            toleration = {"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}
            if rng.random() < 0.6:
                toleration["effect"] = "NoSchedule"
        else:
            if kind == "target" and target_taints:
                taint = rng.choice(target_taints)
            else:
                taint = {"key": rng.choice(TAINT_KEYS), "value": rng.choice(TAINT_VALUES)}
                taint["effect"] = rng.choice(EFFECTS)
            toleration = {"key": taint["key"]}
            if rng.random() < 0.4:
                toleration["operator"] = "Exists"
            else:
                if rng.random() < 0.5:
                    toleration["operator"] = "Equal"
                value = taint.get("value", "") if rng.random() < 0.8 else "other"
                if value:
                    toleration["value"] = value
            if rng.random() < 0.7:
                toleration["effect"] = (
                    taint["effect"] if rng.random() < 0.8 else rng.choice(EFFECTS)
                )
        if toleration.get("effect") == "NoExecute" and rng.random() < 0.3:
            toleration["tolerationSeconds"] = 300
        tolerations.append(toleration)
    return tolerations


def _pv_affinity(rng: random.Random, target: dict, node_names: list) -> dict:
    terms = []
    for _ in range(_pick(rng, {1: 4, 2: 1})):
        key = rng.choice(("topology.kubernetes.io/zone", "node-type"))
        vocabulary = ZONES if key.endswith("zone") else NODE_TYPES
        value = target.get(key) if rng.random() < 0.6 else None
        term = {
            "matchExpressions": [
                {"key": key, "operator": "In", "values": [value or rng.choice(vocabulary)]}
            ]
        }
        if rng.random() < 0.15:  # VolumeBinding never checks a PV's matchFields
            term["matchFields"] = [
                {"key": "metadata.name", "operator": "In", "values": [rng.choice(node_names)]}
            ]
        terms.append(term)
    return {"nodeSelectorTerms": terms}


def _access_modes(rng: random.Random) -> list:
    return _pick(
        rng,
        {
            ("ReadWriteOnce",): 50,
            ("ReadWriteMany",): 15,
            ("ReadWriteOncePod",): 8,
            ("ReadOnlyMany",): 4,
            ("ReadWriteOnce", "ReadOnlyMany"): 4,
            ("ReadWriteOnce", "ReadWriteMany"): 4,
        },
    )


def _phase(rng: random.Random, weights: dict) -> str:
    return _pick(rng, weights)


LIVE = {"Running": 60, "Pending": 20, "Unknown": 5, "Succeeded": 7, "Failed": 8}
OTHERS = {"Running": 50, "Pending": 20, "Unknown": 5, "Succeeded": 12, "Failed": 13}


def _pod(name: str, namespace: str, node: str, labels: dict, spec: dict, claims=()) -> dict:
    spec = dict(spec)
    spec["nodeName"] = node
    spec["terminationGracePeriodSeconds"] = 0
    spec["automountServiceAccountToken"] = False
    if claims:
        spec["volumes"] = [
            {"name": f"v{k}", "persistentVolumeClaim": {"claimName": c}}
            for k, c in enumerate(claims)
        ]
        spec["containers"][0]["volumeMounts"] = [
            {"name": f"v{k}", "mountPath": f"/mnt/{c}"} for k, c in enumerate(claims)
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": dict(HOLD),
        },
        "spec": spec,
    }


def generate(seed: int, index: int, token: str) -> Scenario:
    """Scenario ``index`` of ``seed``: the same objects for the same (seed, index)."""
    rng = random.Random(f"agreement:{seed}:{index}")
    prefix = f"ag{token}-{index}"
    namespace = prefix
    others = [f"{prefix}-x{k}" for k in range(rng.randint(1, 2))]
    nodes = [_gen_node(rng, f"{prefix}-n{j}", prefix) for j in range(rng.randint(2, 5))]
    names = [n.name for n in nodes]
    target = rng.choice(nodes)

    claims = [ClaimSpec("claim-alice", list(_access_modes(rng)), None)]
    if rng.random() < 0.4:
        claims.append(ClaimSpec("nebi-workspaces-alice", list(_access_modes(rng)), None))
    for claim in claims:
        if rng.random() < 0.3:
            claim.pv_affinity = _pv_affinity(rng, target.labels, names)
    claim_names = [c.name for c in claims]

    pods: list[PodSpec] = []
    user_labels = {
        "component": "singleuser-server",
        "hub.jupyter.org/username": USER,
        LABEL_KEY: USER,
    }
    for k in range(_pick(rng, {0: 20, 1: 45, 2: 25, 3: 10})):
        spec = _containers(rng, small=True, gpu=0.15)
        manifest = _pod(
            f"jupyter-alice--h{k}", namespace, target.name, user_labels, spec, claims=claim_names
        )
        pods.append(PodSpec(manifest, _phase(rng, LIVE), rng.random() < 0.2))
    for k in range(_pick(rng, {0: 4, 1: 1})):  # finished servers of the user elsewhere
        spec = _containers(rng, small=True, gpu=0.0)
        manifest = _pod(
            f"jupyter-alice--old{k}", namespace, rng.choice(names), user_labels, spec, claim_names
        )
        pods.append(PodSpec(manifest, rng.choice(("Succeeded", "Failed")), rng.random() < 0.2))
    for k in range(rng.randint(0, 8)):
        ns = rng.choice([namespace, *others])
        labels = {"app": rng.choice(("db", "web", "batch"))}
        if ns == namespace and rng.random() < 0.5:
            labels = {"component": "singleuser-server", LABEL_KEY: "bob"}
        spec = _containers(rng, small=True, gpu=0.15)
        pods.append(
            PodSpec(
                _pod(f"other-{k}", ns, rng.choice(names), labels, spec),
                _phase(rng, OTHERS),
                rng.random() < 0.12,
            )
        )

    attachments = []
    if rng.random() < 0.35:
        node = target.name if rng.random() < 0.7 else rng.choice(names)
        attachments.append(("claim-alice", node, rng.random() < 0.85))

    new_pod = _new_pod(rng, namespace, claims, target, names)
    if rng.random() < 0.3:
        _tighten(rng, target, pods, new_pod)
    return Scenario(index, namespace, others, nodes, claims, pods, attachments, new_pod)


def _tighten(rng: random.Random, target: NodeSpec, pods: list, new_pod: dict) -> None:
    """Size one allocatable of the target node to what its pods use plus the new pod's request,
    give or take one unit: exact arithmetic (rounding, init containers, sidecars, overhead,
    limits-only, terminating pods) decides fit or misfit at this edge."""
    live = [
        p.manifest
        for p in pods
        if p.manifest["spec"]["nodeName"] == target.name and p.phase not in ("Succeeded", "Failed")
    ]
    used: dict[str, int] = {}
    for manifest in live:
        for name, units in fit.pod_requests(manifest).items():
            used[name] = used.get(name, 0) + units
    want = fit.pod_requests(new_pod)
    choices = [r for r in ("cpu", "memory", GPU) if want.get(r, 0) > 0] + ["pods"]
    resource = rng.choice(choices)
    delta = rng.choice((-1, 0, 0, 1))
    if resource == "pods":
        target.pods = str(max(0, len(live) + 1 + delta))
        return
    total = max(0, used.get(resource, 0) + want[resource] + delta)
    if resource == "cpu":
        target.cpu = f"{total}m"
    elif resource == "memory":
        target.memory = str(total)
    else:
        target.extra[resource] = str(total)


def _new_pod(
    rng: random.Random, namespace: str, claims: list, target: NodeSpec, names: list
) -> dict:
    # A "friendly" profile was written for nodes like the one the user's servers sit on: most
    # constraints match it.  The others are drawn at random (most are refused there).
    friendly = rng.random() < 0.55
    match = 0.93 if friendly else 0.6
    if friendly:
        gpu_profile = rng.random() < (0.6 if GPU in target.extra else 0.05)
    else:
        gpu_profile = rng.random() < 0.2
    spec = _containers(rng, small=friendly, gpu=0.8 if gpu_profile else 0.05, pod_level=0.15)
    mounted = [c.name for c in claims if c.name == "claim-alice" or rng.random() < 0.7]
    selector = {SCENARIO_LABEL: target.labels[SCENARIO_LABEL]}
    for key in rng.sample(("node-type", "topology.kubernetes.io/zone", "example.com/pool"), k=2):
        if rng.random() < 0.3:
            if key in target.labels and rng.random() < match:
                selector[key] = target.labels[key]
            else:
                selector[key] = rng.choice({"node-type": NODE_TYPES}.get(key, ZONES + POOLS))
    spec["nodeSelector"] = selector
    if rng.random() < 0.5:
        spec["affinity"] = {"nodeAffinity": _node_affinity(rng, target.labels, names, match)}
        if rng.random() < 0.2:
            spec["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] = [
                {
                    "weight": 10,
                    "preference": {"matchExpressions": [_expression(rng, target.labels)]},
                }
            ]
    tolerations = _tolerations(rng, target, friendly)
    if tolerations:
        spec["tolerations"] = tolerations
    manifest = _pod("jupyter-alice--new", namespace, "", {}, spec, claims=mounted)
    del manifest["spec"]["nodeName"]
    manifest["metadata"]["labels"] = {
        "component": "singleuser-server",
        "hub.jupyter.org/username": USER,
    }
    manifest["metadata"]["annotations"] = {
        **HOLD,
        "hub.jupyter.org/username": USER,
        PROFILE_ANNOTATION: "friendly" if friendly else "random",
    }
    if rng.random() < 0.2:
        manifest["spec"]["volumes"].append({"name": "scratch", "emptyDir": {}})
    return manifest


# --------------------------------------------------------------------------------------------------
# the cluster side


async def _raw(call, *args, **kwargs) -> dict:
    response = await call(*args, _preload_content=False, **kwargs)
    try:
        body = await response.read()
        if not 200 <= response.status <= 299:
            raise RuntimeError(f"{call.__name__}: HTTP {response.status}: {body[:300]!r}")
        return json.loads(body)
    finally:
        response.release()


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
        if pod.terminating:
            body["metadata"]["finalizers"] = [FINALIZER]
        await core.create_namespaced_pod(ns, body)
        if pod.phase != "Pending":
            await core.patch_namespaced_pod_status(name, ns, {"status": {"phase": pod.phase}})
        if pod.terminating:
            await core.delete_namespaced_pod(name, ns, grace_period_seconds=0)

    await asyncio.gather(*(existing(p) for p in scenario.pods))


async def read_objects(api_client, scenario: Scenario) -> list[dict]:
    """The scenario's Nodes, Pods (all its namespaces), PVCs, PVs and VolumeAttachments, as the
    API returns them (raw camelCase JSON, ``kind`` set as ``kubectl get -o yaml`` prints it)."""
    from kubernetes_asyncio import client

    core, storage = client.CoreV1Api(api_client), client.StorageV1Api(api_client)
    selector = f"{SCENARIO_LABEL}={scenario.namespace}"
    pv_selector = f"{helpers.LABEL_NAMESPACE}={scenario.namespace}"
    listings = await asyncio.gather(
        _raw(core.list_node, label_selector=selector),
        *(
            _raw(core.list_namespaced_pod, ns)
            for ns in (scenario.namespace, *scenario.other_namespaces)
        ),
        _raw(core.list_namespaced_persistent_volume_claim, scenario.namespace),
        _raw(core.list_persistent_volume, label_selector=pv_selector),
        _raw(storage.list_volume_attachment, label_selector=pv_selector),
    )
    kinds = ["Node"] + ["Pod"] * (1 + len(scenario.other_namespaces))
    kinds += ["PersistentVolumeClaim", "PersistentVolume", "VolumeAttachment"]
    objects = []
    for kind, listing in zip(kinds, listings, strict=True):
        version = "storage.k8s.io/v1" if kind == "VolumeAttachment" else "v1"
        for item in listing.get("items") or []:
            objects.append({"apiVersion": version, "kind": kind, **item})
    return objects


async def first_verdict(api_client, namespace: str, name: str, timeout: float) -> tuple[str, str]:
    """("bound", node) or ("failed", message): whichever the scheduler said first."""
    from kubernetes_asyncio import client

    core = client.CoreV1Api(api_client)
    selector = f"involvedObject.name={name},reason=FailedScheduling"
    deadline = time.monotonic() + timeout
    while True:
        pod = await _raw(core.read_namespaced_pod, name, namespace)
        events = (await _raw(core.list_namespaced_event, namespace, field_selector=selector))[
            "items"
        ]
        if events:
            first = min(
                events,
                key=lambda e: (
                    e.get("firstTimestamp") or e.get("eventTime") or "",
                    int(e["metadata"].get("resourceVersion", "0")),
                ),
            )
            return "failed", first.get("message") or ""
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            return "bound", node
        if time.monotonic() > deadline:
            return "timeout", f"neither bound nor FailedScheduling after {timeout:.0f} s"
        await asyncio.sleep(0.1)


async def cleanup(api_client, scenario: Scenario) -> None:
    from kubernetes_asyncio import client
    from kubernetes_asyncio.client.exceptions import ApiException

    core = client.CoreV1Api(api_client)
    for ns in scenario.other_namespaces:
        pods = await _raw(core.list_namespaced_pod, ns)
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
    decision: Decision | None = field(default=None, repr=False)


def _fit_nodes(pod: dict, state: ClusterState, namespace: str) -> set[str]:
    """Nodes of the state where fit.check_fit admits the pod (the whole filter subset)."""
    bound = [pv for pv in (state.bound_pv(namespace, c) for c in _claims(pod)) if pv]
    return {
        name
        for name, node in (state.nodes or {}).items()
        if fit.check_fit(pod, node, state.pods, bound).fits
    }


def _claims(pod: dict) -> list[str]:
    return [
        v["persistentVolumeClaim"]["claimName"]
        for v in pod["spec"].get("volumes") or []
        if v.get("persistentVolumeClaim")
    ]


def expected_reasons(decision: Decision, pod: dict, state: ClusterState, node: str) -> list[str]:
    """Our reason codes for the node a refused pod is pinned to.  ``claim-in-use`` is decided
    before the fit (decide stops there), so the fit's own reasons are added for the order check."""
    reasons = list(decision.reasons)
    if "claim-in-use" in reasons and state.nodes and node in state.nodes:
        namespace = pod["metadata"]["namespace"]
        bound = [pv for pv in (state.bound_pv(namespace, c) for c in _claims(pod)) if pv]
        reasons += fit.check_fit(pod, state.nodes[node], state.pods, bound).reasons
    return reasons


def judge_refusal(expected: list[str], message: str) -> tuple[bool, str]:
    """Does the scheduler's reason for the pinned node match our reasons, given filter order?"""
    prefilter, histogram = parse_failed_scheduling(message)
    if prefilter is not None:
        code = PREFILTER_FRAGMENTS.get(prefilter)
        if code is None:
            return False, f"PreFilter rejection not modelled: {prefilter!r}"
        if code not in expected:
            return False, f"PreFilter says {code} ({prefilter!r}), we say {expected}"
        return True, f"PreFilter {code}"
    node_reasons = {r: n for r, n in histogram.items() if r != EXCLUDED_BY_PIN}
    codes = {fragment_code(r) for r in node_reasons}
    if None in codes or not codes:
        return False, f"scheduler reasons not modelled: {sorted(node_reasons)}"
    if any(n != 1 for n in node_reasons.values()):
        return False, f"more than the pinned node reported: {histogram}"
    plugins = {plugin_of(c) for c in codes}
    if len(plugins) != 1:
        return False, f"reasons of several plugins for one node: {sorted(codes)}"
    (plugin,) = plugins
    ours = [plugin_of(c) for c in expected]
    if None in ours:
        return False, f"reason codes the scheduler does not have: {expected}"
    first = min(ours, key=FILTER_ORDER.index)
    if first != plugin:
        return False, f"scheduler: {plugin} {sorted(codes)}; ours first: {first} {sorted(expected)}"
    if plugin == "NodeResourcesFit":
        resources = {c for c in expected if plugin_of(c) == "NodeResourcesFit"}
        if resources != codes:
            return False, f"scheduler resources {sorted(codes)} != ours {sorted(resources)}"
    return True, f"{plugin} {sorted(codes)}"


def _outcome_fields(decision: Decision) -> tuple:
    return decision.verdict, decision.node, sorted(decision.reasons), decision.holders


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
    }
    deadline = time.monotonic() + timeout
    while True:
        behind = []
        for obj in objects:
            meta = obj["metadata"]
            key = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]
            held = collections[obj["kind"]]().items.get(key)
            version = None if held is None else held["metadata"].get("resourceVersion")
            if not _not_older(version, meta["resourceVersion"]):
                behind.append(f"{obj['kind']} {key}")
        if not behind and view.live:
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

        loader_mismatch = []
        direct = decide(pod, await DirectReader(api_client, namespace).state_for(pod), POLICY)
        if _outcome_fields(direct) != _outcome_fields(decision):
            loader_mismatch.append(
                f"direct reads: {_outcome_fields(direct)} vs {_outcome_fields(decision)}"
            )
        await _caught_up(view, objects)
        live = decide(pod, await view.state_for(pod), POLICY)
        if _outcome_fields(live) != _outcome_fields(decision):
            loader_mismatch.append(
                f"live view: {_outcome_fields(live)} vs {_outcome_fields(decision)}"
            )
        loader_mismatch = "; ".join(loader_mismatch)
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
    said, detail = await first_verdict(api_client, namespace, pod["metadata"]["name"], timeout)

    outcome = Outcome(
        scenario.index,
        False,
        decision.verdict,
        decision.node is not None,
        said,
        detail,
        loader_mismatch=loader_mismatch,
        objects=objects,
        pod=pod,
        decision=decision,
    )
    if decision.verdict == REFUSE:
        if said != "failed":
            outcome.why = f"we refuse {sorted(decision.reasons)}; scheduler {said} {detail}"
        else:
            ok, why = judge_refusal(expected_reasons(decision, pod, state, pin), detail)
            outcome.agree, outcome.why = ok, why
    elif decision.verdict == COLOCATE and decision.node:
        outcome.agree = said == "bound" and detail == decision.node
        outcome.why = f"colocate on {decision.node}; scheduler {said} {detail}"
    else:  # colocate unpinned, skip: anywhere the filter subset admits it
        admitted = _fit_nodes(pod, state, namespace)
        if admitted:
            outcome.agree = said == "bound" and detail in admitted
            outcome.why = f"{decision.verdict}: fits {sorted(admitted)}; scheduler {said} {detail}"
        else:
            outcome.agree = said == "failed"
            outcome.why = f"{decision.verdict}: fits nowhere; scheduler {said} {detail}"
    return outcome


# --------------------------------------------------------------------------------------------------
# disagreements on disk


def write_failure(directory: Path, seed: int, outcome: Outcome) -> Path:
    import yaml

    from nebari_colocate import cli

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
    import io

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
    return [
        "verdicts: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())),
        "refusal reasons: " + ", ".join(f"{k} {v}" for k, v in sorted(reasons.items())),
        f"the live view or direct reads decided differently from the full state: {loader}",
        f"{result.count} scenarios in {result.seconds:.0f} s",
    ]


async def main_async(args) -> int:
    with _cluster.control_plane(kubelet_stub=False, keep_logs=args.keep_logs) as cp:
        api_client = await _cluster.admin_client(cp)
        try:
            result = await run_agreement(
                api_client,
                seed=args.seed,
                count=args.count,
                concurrency=args.concurrency,
                keep_failures=Path(args.keep_failures) if args.keep_failures else None,
                timeout=args.timeout,
            )
        finally:
            await api_client.close()
        if args.keep_logs:
            print(f"control plane logs: {cp.dir}")
    for line in summary(result):
        print(line)
    print(result.line)
    mismatched = [o for o in result.outcomes if o.loader_mismatch]
    return 0 if result.agreed == result.count and not mismatched else 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--keep-failures", metavar="DIR", help="write disagreements here")
    parser.add_argument("--concurrency", type=int, default=6, help="scenarios at once")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait per verdict")
    parser.add_argument("--keep-logs", action="store_true", help="keep the control plane logs")
    args = parser.parse_args(argv)
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
