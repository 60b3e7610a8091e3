"""Preemption on the pinned node (docs/decisions.md, "Priority and preemption"): decide() as
kube-scheduler's DefaultPreemption would place the pod, one table row per scenario."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from nebari_colocate.placement import Policy, decide
from nebari_colocate.preemption import (
    PREEMPT_NEVER,
    admitted_priority,
    preempts,
    preempts_count,
    split_by_pdb,
)
from tests.support.builders import NAMESPACE, gpu_node, node, pod, state, taint

HOME = "claim-alice"
LOWER = "PreemptLowerPriority"
PLACEHOLDER = {"component": "user-placeholder", "app": "jupyterhub"}


def with_status(obj: dict, **status) -> dict:
    obj.setdefault("status", {}).update(status)
    return obj


def lab(priority: int = 0, cpu: str = "1", node_name: str = "cpu-1", **kwargs) -> dict:
    """Alice's running lab: it holds her ReadWriteOnce home on ``node_name``."""
    return pod(
        "jupyter-alice",
        node_name=node_name,
        user="alice",
        server="",
        claims=[HOME],
        phase="Running",
        requests={"cpu": cpu},
        spec_fields={"priority": priority},
        **kwargs,
    )


def app(**spec_fields) -> dict:
    """Alice's new app, 2 CPU, as the spawner would create it (priority as admission set it,
    unless the row says otherwise)."""
    spec_fields.setdefault("priority", 0)
    return pod(
        "jupyter-alice--app",
        user="alice",
        server="app",
        claims=[HOME],
        requests=spec_fields.pop("requests", {"cpu": "2"}),
        spec_fields={k: v for k, v in spec_fields.items() if v is not None},
    )


def other(
    name: str,
    priority: int,
    cpu: str = "2500m",
    *,
    node_name: str | None = "cpu-1",
    started: str | None = "2026-01-01T00:00:00Z",
    labels: dict | None = None,
    **kwargs,
) -> dict:
    """A pod of someone else on ``node_name`` (a z2jh user placeholder at -10, by default)."""
    result = pod(
        name,
        node_name=node_name,
        phase="Running" if node_name else "Pending",
        requests={"cpu": cpu, **kwargs.pop("requests", {})},
        labels=PLACEHOLDER if labels is None else labels,
        spec_fields={"priority": priority, **kwargs.pop("spec_fields", {})},
        **kwargs,
    )
    if started and node_name:
        with_status(result, startTime=started)
    return result


def nominated(name: str, priority: int, cpu: str = "2", node_name: str = "cpu-1") -> dict:
    """A pod the scheduler nominated to ``node_name`` (preempting there), not yet bound."""
    return with_status(other(name, priority, cpu, node_name=None), nominatedNodeName=node_name)


def pdb(name: str, allowed: int, labels: dict | None = None, disrupted: dict | None = None) -> dict:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"selector": {"matchLabels": labels or PLACEHOLDER}},
        "status": {"disruptionsAllowed": allowed, "disruptedPods": disrupted or {}},
    }


def priority_class(name: str, value: int, *, default: bool = False, never: bool = False) -> dict:
    obj = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        "globalDefault": default,
    }
    if never:
        obj["preemptionPolicy"] = PREEMPT_NEVER
    return obj


Z2JH_CLASSES = (
    priority_class("jupyterhub-default-priority", 0, default=True),
    priority_class("jupyterhub-user-placeholder-priority", -10),
)


@dataclass
class Row:
    name: str
    new: dict
    objects: tuple
    verdict: str
    reasons: tuple = ()
    victims: tuple = ()
    pdb_violations: int = 0
    #: holders the scheduler would preempt (then no colocate)
    preempted_holders: tuple = ()
    notes: list = field(default_factory=list)


ROWS = [
    Row(
        "a placeholder of lower priority is preempted and the app joins the lab",
        app(),
        (node("cpu-1"), lab(), other("placeholder-0", -10)),
        "colocate",
        victims=("placeholder-0",),
    ),
    Row(
        "another user's server of equal priority is never preempted",
        app(),
        (node("cpu-1"), lab(), other("jupyter-bob", 0)),
        "refuse",
        reasons=("insufficient:cpu",),
    ),
    Row(
        "a pod of higher priority is never preempted",
        app(),
        (node("cpu-1"), lab(), other("system-thing", 1000)),
        "refuse",
        reasons=("insufficient:cpu",),
    ),
    Row(
        "preemptionPolicy Never on the pod preempts nothing",
        app(preemptionPolicy=PREEMPT_NEVER),
        (node("cpu-1"), lab(), other("placeholder-0", -10)),
        "refuse",
        reasons=("insufficient:cpu",),
    ),
    Row(
        "preemptionPolicy Never from the pod's priority class preempts nothing",
        app(priority=None, priorityClassName="no-preempt"),
        (
            node("cpu-1"),
            lab(),
            other("placeholder-0", -10),
            priority_class("no-preempt", 0, never=True),
        ),
        "refuse",
        reasons=("insufficient:cpu",),
    ),
    Row(
        "only as many placeholders as needed are preempted, the newest first",
        app(),
        (
            node("cpu-1"),
            lab(),
            other("placeholder-old", -10, "1", started="2026-01-01T00:00:00Z"),
            other("placeholder-mid", -10, "1", started="2026-01-02T00:00:00Z"),
            other("placeholder-new", -10, "1", started="2026-01-03T00:00:00Z"),
        ),
        "colocate",
        victims=("placeholder-mid", "placeholder-new"),
    ),
    Row(
        "the lowest priority goes first whatever its age",
        app(),
        (
            node("cpu-1"),
            lab(),
            other("puller", -5, "1", started="2026-01-03T00:00:00Z"),
            other("placeholder-0", -10, "1", started="2026-01-01T00:00:00Z"),
        ),
        "colocate",
        victims=("placeholder-0",),
    ),
    Row(
        "a pod nominated to the node at equal priority keeps its room",
        app(),
        (node("cpu-1"), lab(), other("placeholder-0", -10, "1"), nominated("jupyter-bob", 0)),
        "refuse",
        reasons=("insufficient:cpu",),
    ),
    Row(
        "a pod nominated at equal priority counts even with nothing to preempt",
        app(),
        (node("cpu-1"), lab(), nominated("jupyter-bob", 0, "2")),
        "refuse",
        reasons=("insufficient:cpu",),
    ),
    Row(
        "a pod nominated at lower priority does not count",
        app(),
        (node("cpu-1"), lab(), nominated("low-job", -5, "3")),
        "colocate",
    ),
    Row(
        "a PDB that allows the disruption is spent without a violation",
        app(),
        (node("cpu-1"), lab(), other("placeholder-0", -10), pdb("user-placeholder", 1)),
        "colocate",
        victims=("placeholder-0",),
    ),
    Row(
        "a PDB that blocks the disruption is violated, not obeyed, as the scheduler does",
        app(),
        (node("cpu-1"), lab(), other("placeholder-0", -10), pdb("user-placeholder", 0)),
        "colocate",
        victims=("placeholder-0",),
        pdb_violations=1,
    ),
    Row(
        "the pod a blocking PDB covers is spared when another victim will do",
        app(),
        (
            node("cpu-1"),
            lab(),
            other("placeholder-0", -10, "1", started="2026-01-03T00:00:00Z"),
            other("batch-0", -10, "1", labels={"app": "batch"}, started="2026-01-01T00:00:00Z"),
            pdb("user-placeholder", 0),
        ),
        "colocate",
        victims=("batch-0",),
    ),
    Row(
        "a GPU held by a lower-priority pod is preempted for the GPU app",
        app(requests={"cpu": "1", "nvidia.com/gpu": "1"}),
        (
            gpu_node("cpu-1"),
            lab(),
            other("gpu-placeholder", -10, "1", requests={"nvidia.com/gpu": "1"}),
        ),
        "colocate",
        victims=("gpu-placeholder",),
    ),
    Row(
        "more GPUs than the node has cannot be made by preemption",
        app(requests={"cpu": "1", "nvidia.com/gpu": "2"}),
        (
            gpu_node("cpu-1"),
            lab(),
            other("gpu-placeholder", -10, "1", requests={"nvidia.com/gpu": "1"}),
        ),
        "refuse",
        reasons=("insufficient:nvidia.com/gpu",),
    ),
    Row(
        "a node at its pod limit makes room by preempting a placeholder",
        app(requests={"cpu": "100m"}),
        (node("cpu-1", allocatable={"pods": "2"}), lab(), other("placeholder-0", -10, "100m")),
        "colocate",
        victims=("placeholder-0",),
    ),
    Row(
        "a taint is not cured by preemption",
        app(),
        (node("cpu-1", taints=[taint("dedicated", "gpu")]), lab(), other("placeholder-0", -10)),
        "refuse",
        reasons=("insufficient:cpu", "taint"),
    ),
    Row(
        "the user's own lab as the only possible victim is no colocate: refused, way out",
        app(),
        (node("cpu-1"), lab(priority=-10, cpu="3")),
        "refuse",
        reasons=("insufficient:cpu",),
        preempted_holders=("jupyter-alice",),
    ),
    Row(
        "a class named by the pod without a dry run gives its priority",
        app(priority=None, priorityClassName="jupyterhub-default-priority"),
        (node("cpu-1"), lab(), other("placeholder-0", -10), *Z2JH_CLASSES),
        "colocate",
        victims=("placeholder-0",),
    ),
    Row(
        "the global default class gives the priority of a pod that names none",
        app(priority=None),
        (node("cpu-1"), lab(), other("batch", -5), priority_class("high", 100, default=True)),
        "colocate",
        victims=("batch",),
    ),
    Row(
        "without a class or a dry run the pod's priority is 0",
        app(priority=None),
        (node("cpu-1"), lab(), other("batch", 5)),
        "refuse",
        reasons=("insufficient:cpu",),
    ),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_preemption_on_the_pinned_node_as_the_scheduler_does(row):
    decision = decide(row.new, state(*row.objects), Policy())
    assert decision.verdict == row.verdict
    assert sorted(decision.reasons) == sorted(row.reasons)
    got = decision.preemption
    if row.verdict == "colocate":
        assert decision.node == "cpu-1"
        if row.victims:
            assert got is not None
            assert sorted(v["metadata"]["name"] for v in got.victims) == sorted(row.victims)
            assert decision.warnings == [preempts(len(row.victims))]
            assert got.pdb_violations == row.pdb_violations
        else:
            assert got is None and decision.warnings == []
    elif row.preempted_holders:
        assert got is not None
        assert sorted(h["metadata"]["name"] for h in got.holders) == list(row.preempted_holders)
        assert decision.warnings == []
        assert decision.way_out is not None and decision.way_out.stop == ("",)
    else:
        assert got is None


def test_simulate_json_names_the_victims_and_the_warning_counts_them():
    decision = decide(app(), state(node("cpu-1"), lab(), other("placeholder-0", -10)), Policy())
    result = decision.as_json("")
    assert result["warnings"] == ["preempts:1"]
    assert result["preemption"] == {
        "node": "cpu-1",
        "victims": [f"{NAMESPACE}/placeholder-0"],
        "pdb_violations": 0,
        "holders": [],
    }


def test_the_user_message_of_a_preempting_colocate_names_no_other_pod():
    from nebari_colocate import messages

    decision = decide(app(), state(node("cpu-1"), lab(), other("placeholder-0", -10)), Policy())
    text = messages.user_message(decision, app(), username="alice", server_name="app")
    assert "placeholder" not in text
    assert "placeholder-0" in messages.operator_line(decision, username="alice", server_name="app")


@pytest.mark.parametrize(
    "test_variation_id, spec_fields, classes, expect_priority, expect_policy, expect_missing",
    [
        ("admitted-priority-wins", {"priority": 7}, {}, 7, LOWER, None),
        ("class-named", {"priorityClassName": "low"}, {"low": -10}, -10, LOWER, None),
        ("class-missing", {"priorityClassName": "gone"}, {}, 0, LOWER, "gone"),
        ("system", {"priorityClassName": "system-node-critical"}, {}, 2000001000, LOWER, None),
        ("classes-unreadable", {"priorityClassName": "low"}, None, 0, LOWER, None),
        ("policy-from-spec", {"preemptionPolicy": "Never"}, {}, 0, "Never", None),
    ],
)  # fmt: skip
def test_priority_as_admission_sets_it(
    test_variation_id, spec_fields, classes, expect_priority, expect_policy, expect_missing
):
    known = None if classes is None else {n: priority_class(n, v) for n, v in classes.items()}
    got = admitted_priority({"spec": spec_fields}, known)
    assert (got.priority, got.policy, got.missing_class) == (
        expect_priority,
        expect_policy,
        expect_missing,
    )


def test_of_two_global_default_classes_admission_takes_the_lower():
    classes = {
        "a": priority_class("a", 10, default=True),
        "b": priority_class("b", 5, default=True),
    }
    assert admitted_priority({"spec": {}}, classes).priority == 5


def test_a_pdb_budget_is_spent_victim_by_victim_and_disrupted_pods_spend_nothing():
    victims = [other(f"placeholder-{i}", -10) for i in range(3)]
    violating, fine = split_by_pdb(victims, [pdb("p", 1, disrupted={"placeholder-0": "t"})])
    assert [v["metadata"]["name"] for v in fine] == ["placeholder-0", "placeholder-1"]
    assert [v["metadata"]["name"] for v, _ in violating] == ["placeholder-2"]


def test_an_empty_pdb_selector_matches_nothing():
    empty = pdb("p", 0)
    empty["spec"]["selector"] = {}
    assert split_by_pdb([other("placeholder-0", -10)], [empty])[0] == []


def test_preempts_codes_read_back():
    assert preempts_count(preempts(3)) == 3
    assert preempts_count("premium-node") is None


def test_the_slim_pod_keeps_what_preemption_reads():
    from nebari_colocate.slim import slim_pod

    full = other("placeholder-0", -10, spec_fields={"preemptionPolicy": PREEMPT_NEVER})
    full["status"].update(nominatedNodeName="cpu-2", podIP="10.0.0.1", hostIP="127.0.0.1")
    slim = slim_pod(full)
    assert slim["spec"]["priority"] == -10
    assert slim["spec"]["preemptionPolicy"] == PREEMPT_NEVER
    assert slim["status"]["startTime"] == "2026-01-01T00:00:00Z"
    assert slim["status"]["nominatedNodeName"] == "cpu-2"
    assert "hostIP" not in slim["status"]


def test_a_reused_dry_run_carries_the_admitted_preemption_policy():
    from nebari_colocate.admission import as_admitted, model_of

    admitted = app(priority=0, preemptionPolicy=PREEMPT_NEVER)
    again = as_admitted(app(priority=None), model_of(admitted))
    assert admitted_priority(again, None).policy == PREEMPT_NEVER


def test_a_nominated_pod_is_indexed_by_its_node_until_it_is_bound():
    waiting = nominated("jupyter-bob", 0)
    snapshot = state(node("cpu-1"), waiting)
    assert snapshot.pods_nominated_to("cpu-1") == (waiting,)
    bound = with_status(other("jupyter-bob", 0, "2"), nominatedNodeName="cpu-1")
    assert state(node("cpu-1"), bound).pods_nominated_to("cpu-1") == ()


def test_a_preempting_decision_counts_once_as_the_preempts_warning_in_the_metrics():
    from prometheus_client import REGISTRY

    from nebari_colocate import metrics

    name = "nebari_colocate_decision_reasons_total"
    labels = {"verdict": "colocate", "kind": "warning", "reason": "preempts", "mode": "enforce"}
    before = REGISTRY.get_sample_value(name, labels) or 0.0
    placeholders = (other("placeholder-0", -10, "1500m"), other("placeholder-1", -10, "1500m"))
    full = state(node("cpu-1"), lab(cpu="500m"), *placeholders)
    decision = decide(app(requests={"cpu": "3"}), full, Policy())
    assert decision.warnings == ["preempts:2"]
    metrics.observe_decision(decision, 0.01)
    assert REGISTRY.get_sample_value(name, labels) == before + 1
    assert REGISTRY.get_sample_value(name, {**labels, "reason": "preempts:2"}) is None


def test_a_refused_read_of_priority_classes_or_pdbs_says_what_it_costs():
    from nebari_colocate import cli, view

    notes = cli._denied_notes([view.PRIORITY_CLASSES_LIST, view.PDBS_LIST], "")
    assert len(notes) == 2
    assert all("403 Forbidden" in n and "not read;" not in n for n in notes)
    assert "priority" in notes[0] and "PodDisruptionBudget" in notes[1]
