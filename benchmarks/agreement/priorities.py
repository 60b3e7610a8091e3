"""Priorities, placeholders and nominated pods in the agreement scenarios.  (pure)

In a share of the scenarios (drawn from ``random.Random("agreement:<seed>:<index>:priority")``,
so the rest of the scenario is drawn exactly as without it) the pods get priorities through the
PriorityClasses of :data:`CLASSES` (created once per run), as zero-to-jupyterhub's
``scheduling.podPriority`` gives them:

- user placeholders on the user's node (pause pods at -10, ``component: user-placeholder``),
  sometimes with their PodDisruptionBudget (its status written by hand: no disruption controller
  runs), whose ``disruptionsAllowed`` is drawn;
- classes on the other pods (lower, equal and higher than the new pod's), now and then on the
  user's own servers (a lower-priority holder is a victim the decision refuses to count);
- the new pod's class: none (0), higher, or ``preemptionPolicy: Never``;
- a nominated pod: a pod of higher or lower priority that preempts a placeholder held by a
  finalizer, so it stays nominated to the user's node while the victim terminates.

Every bound pod of such a scenario gets a distinct ``status.startTime``: the scheduler ranks
victims of equal priority by it, and without it ranks them by nothing stable.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from nebari_colocate import fit, quantity
from nebari_colocate.preemption import PREEMPT_NEVER
from tests.support.builders import container

#: name -> (value, preemptionPolicy or None); no class is a global default (it would give every
#: pod of every scenario a priority)
CLASSES = {
    "agreement-placeholder": (-10, None),
    "agreement-low": (-5, None),
    "agreement-high": (100, None),
    "agreement-never": (0, PREEMPT_NEVER),
    "agreement-high-never": (100, PREEMPT_NEVER),
}
PLACEHOLDER_LABELS = {"component": "user-placeholder"}
#: on every other placeholder: what the PDB selects (so that it decides which of them go)
COVERED = {"agreement.nebari.dev/pdb": "covered"}
NOMINEE = "nominee"
NOMINEE_VICTIM = "nominee-victim"
#: on the nominee's victim: it stays terminating, so the nominee stays nominated
HOLD_FINALIZER = "agreement.nebari.dev/hold"


@dataclass
class Extras:
    """The objects a scenario with priorities adds beyond its pods."""

    pdb: dict | None = None
    #: the PDB's status.disruptionsAllowed (written by hand)
    disruptions_allowed: int = 0
    #: a pending pod that preempts ``NOMINEE_VICTIM`` on the target and stays nominated there
    nominee: dict | None = None


def class_objects() -> list[dict]:
    out = []
    for name, (value, policy) in CLASSES.items():
        obj = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
            "globalDefault": False,
        }
        if policy:
            obj["preemptionPolicy"] = policy
        out.append(obj)
    return out


def _pick(rng: random.Random, weighted: dict):
    keys = list(weighted)
    return rng.choices(keys, weights=[weighted[k] for k in keys])[0]


def _set_class(manifest: dict, name: str | None) -> None:
    if name:
        manifest["spec"]["priorityClassName"] = name


def _free_cpu(node, pods: list) -> int:
    """Millicores of ``node`` no unfinished pod bound there requests."""
    used = sum(
        fit.pod_requests(p.manifest).get("cpu", 0)
        for p in pods
        if p.manifest["spec"].get("nodeName") == node.name
        and p.phase not in ("Succeeded", "Failed")
    )
    return quantity.scheduler_units("cpu", node.cpu) - used


def _friendly(new_pod: dict) -> None:
    """A profile made for the user's node: no selector but the scenario's, no node affinity,
    every taint tolerated (so that its resources decide, and preemption can help)."""
    spec = new_pod["spec"]
    spec.pop("affinity", None)
    spec["nodeSelector"] = {
        k: v for k, v in (spec.get("nodeSelector") or {}).items() if k.startswith("agreement.")
    }
    spec["tolerations"] = [{"operator": "Exists"}]


def add(scenario, seed: int, index: int, make_pod, pod_spec_cls) -> Extras | None:
    """Priorities for ``scenario`` (in place), or None for a scenario without them.
    ``make_pod`` and ``pod_spec_cls`` are the generator's pod builder and PodSpec."""
    rng = random.Random(f"agreement:{seed}:{index}:priority")
    if rng.random() >= 0.45:
        return None
    target = scenario.target
    extras = Extras()
    nominee = rng.random() < 0.25
    for pod in scenario.pods:
        name = pod.manifest["metadata"]["name"]
        if name.startswith("jupyter-alice--h"):
            _set_class(pod.manifest, "agreement-low" if rng.random() < 0.1 else None)
        elif nominee:
            _set_class(pod.manifest, _pick(rng, {None: 3, "agreement-high": 1}))
        else:
            classes = {None: 3, "agreement-placeholder": 2, "agreement-low": 2, "agreement-high": 1}
            _set_class(pod.manifest, _pick(rng, classes))
    if not nominee:
        if rng.random() < 0.5:
            _friendly(scenario.new_pod)
        count = _pick(rng, {0: 1, 1: 3, 2: 2, 3: 1})
        sizes = [rng.choice((250, 500, 1000, 1500)) for _ in range(count)]
        want = fit.pod_requests(scenario.new_pod).get("cpu", 0)
        room = _free_cpu(target, scenario.pods) - want
        if count and room > 0 and rng.random() < 0.7:
            # z2jh sizes placeholders to hold the room a user would take: fill it, so that the
            # new pod fits only once some of them are evicted
            total = room + rng.choice((50, 250, 1000))
            sizes = [total // count + (1 if i < total % count else 0) for i in range(count)]
        for k, cpu in enumerate(sizes):
            manifest = make_pod(
                f"placeholder-{k}",
                scenario.namespace,
                target.name,
                {**PLACEHOLDER_LABELS, **(COVERED if k % 2 == 0 else {})},
                {"containers": [container("pause", image="pause", requests={"cpu": f"{cpu}m"})]},
            )
            _set_class(manifest, "agreement-placeholder")
            scenario.pods.append(pod_spec_cls(manifest, "Running", False))
        if rng.random() < 0.5:
            extras.pdb = {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": "user-placeholder", "namespace": scenario.namespace},
                "spec": {
                    "minAvailable": 0,
                    "selector": {"matchLabels": {**PLACEHOLDER_LABELS, **COVERED}},
                },
            }
            extras.disruptions_allowed = _pick(rng, {0: 2, 1: 2, 2: 1})
    else:
        victim_cpu = rng.choice((500, 1000))
        victim = make_pod(
            NOMINEE_VICTIM,
            scenario.namespace,
            target.name,
            dict(PLACEHOLDER_LABELS),
            {"containers": [container("pause", image="pause", requests={"cpu": f"{victim_cpu}m"})]},
        )
        _set_class(victim, "agreement-placeholder")
        victim["metadata"]["finalizers"] = [HOLD_FINALIZER]
        free = _free_cpu(target, scenario.pods)
        scenario.pods.append(pod_spec_cls(victim, "Running", False))
        want = free + victim_cpu  # fits once the victim is gone, not before
        if want > 0:
            spec = {
                "containers": [container("pause", image="pause", requests={"cpu": f"{want}m"})],
                "nodeSelector": {"kubernetes.io/hostname": target.name},
                "tolerations": [{"operator": "Exists"}],
            }
            extras.nominee = make_pod(NOMINEE, scenario.namespace, None, {"app": NOMINEE}, spec)
            _set_class(extras.nominee, _pick(rng, {"agreement-high": 2, "agreement-low": 1}))
    _set_class(
        scenario.new_pod,
        _pick(
            rng,
            {None: 5, "agreement-high": 2, "agreement-never": 2, "agreement-high-never": 1},
        ),
    )
    bound = [p for p in scenario.pods if p.manifest["spec"].get("nodeName")]
    rng.shuffle(bound)
    for i, pod in enumerate(bound):
        started = f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}Z"
        pod.manifest.setdefault("status", {})["startTime"] = started
    return extras
