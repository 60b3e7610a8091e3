"""Random scenarios for the agreement benchmark.  (pure: a seeded Random in, plain dicts out)

Scenario ``index`` of ``seed`` is drawn from ``random.Random("agreement:<seed>:<index>")``, so a
(seed, index) pair always builds the same objects whatever the concurrency.  What a scenario holds
is described in ``benchmarks/README.md`` (section ``agreement``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from nebari_colocate import fit, quantity
from nebari_colocate.config import DEFAULT_LABEL_KEY
from nebari_colocate.objects import (
    COMPONENT_LABEL,
    HOSTNAME,
    SERVER_COMPONENT,
    USERNAME_ANNOTATION,
    USERNAME_LABEL,
)
from tests.support.builders import KUBE_IMAGE, container
from tests.support.builders import pod as build_pod

from . import priorities

LABEL_KEY = DEFAULT_LABEL_KEY
USER = "alice"
SCENARIO_LABEL = "agreement.nebari.dev/scenario"
PROFILE_ANNOTATION = "agreement.nebari.dev/profile"
HOLD = {"kubelet-stub.nebari.dev/hold": "true"}  # a kubelet stub, if one runs, leaves them alone
RUNTIME_CLASSES = {
    "agreement-kata": {"cpu": "250m", "memory": "160Mi"},
    "agreement-gvisor": {"cpu": "100m", "memory": "64Mi"},
}

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
    #: the node the user's servers sit on
    target: NodeSpec | None = None
    #: priorities, placeholders and a nominated pod (``priorities.Extras``), or None
    extras: priorities.Extras | None = None


def _node_labels(rng: random.Random, name: str, scenario: str) -> dict:
    labels = {HOSTNAME: name, SCENARIO_LABEL: scenario}
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
            if resource in requests and quantity.parse(limits[resource]) < quantity.parse(
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
                quantity.scheduler_units(resource, c["resources"]["limits"][resource])
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
            container(
                f"c{k}",
                image=KUBE_IMAGE,
                **_resources(rng, small=small, gpu=gpu if k == 0 else 0.0),
            )
            for k in range(_pick(rng, {1: 6, 2: 3, 3: 1}))
        ]
    }
    init = []
    for k in range(_pick(rng, {0: 6, 1: 3, 2: 2})):
        resources = _resources(rng, small=rng.random() < 0.5)
        sidecar = rng.random() < 0.45
        restart_policy = "Always" if sidecar else None
        init.append(
            container(f"init{k}", image="busybox", restart_policy=restart_policy, **resources)
        )
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
            HOSTNAME,
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
        HOSTNAME: (target.get(HOSTNAME, "x"), "elsewhere"),
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
            name = target[HOSTNAME] if here else rng.choice(node_names)
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


def _pod(
    name: str,
    namespace: str,
    node: str | None,
    labels: dict,
    spec: dict,
    claims=(),
    annotations: dict = HOLD,
) -> dict:
    """A pod of the scenario, bound by ``spec.nodeName`` (None: not bound), each claim mounted."""
    fields = {k: v for k, v in spec.items() if k != "containers"}
    return build_pod(
        name,
        namespace=namespace,
        node_name=node,
        labels=labels,
        annotations=annotations,
        claims=claims,
        mount_claims=True,
        containers=spec["containers"],
        spec_fields={
            **fields,
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": False,
        },
    )


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
        COMPONENT_LABEL: SERVER_COMPONENT,
        USERNAME_LABEL: USER,
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
            labels = {COMPONENT_LABEL: SERVER_COMPONENT, LABEL_KEY: "bob"}
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
    scenario = Scenario(index, namespace, others, nodes, claims, pods, attachments, new_pod, target)
    scenario.extras = priorities.add(scenario, seed, index, _pod, PodSpec)
    return scenario


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
    manifest = _pod(
        "jupyter-alice--new",
        namespace,
        None,
        {COMPONENT_LABEL: SERVER_COMPONENT, USERNAME_LABEL: USER},
        spec,
        claims=mounted,
        annotations={
            **HOLD,
            USERNAME_ANNOTATION: USER,
            PROFILE_ANNOTATION: "friendly" if friendly else "random",
        },
    )
    if rng.random() < 0.2:
        manifest["spec"]["volumes"].append({"name": "scratch", "emptyDir": {}})
    return manifest
