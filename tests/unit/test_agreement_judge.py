"""The agreement benchmark's judge on kube-scheduler 1.37's FailedScheduling messages, without a
cluster: it reads them through events.fit_error_fragments and compares them with our reason codes
in the scheduler's filter order (benchmarks/README.md, section "agreement")."""

from __future__ import annotations

import pytest

from benchmarks.agreement.judge import judge_refusal, parse_failed_scheduling, plugin_of

PINNED = "2 node(s) didn't satisfy plugin(s) [NodeAffinity]"
NOT_HELPFUL = " preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."


def failed(*fragments: str) -> str:
    return f"0/3 nodes are available: {', '.join(fragments)}.{NOT_HELPFUL}"


@pytest.mark.parametrize(
    "test_variation_id, ours, message, expect_agree",
    [
        ("same-resources", ["insufficient:cpu"], failed("1 Insufficient cpu", PINNED), True),
        (
            "every-shortfall-reported",
            ["insufficient:cpu", "insufficient:nvidia.com/gpu"],
            failed("1 Insufficient cpu", "1 Insufficient nvidia.com/gpu", PINNED),
            True,
        ),
        (
            "a-shortfall-we-missed",
            ["insufficient:cpu"],
            failed("1 Insufficient cpu", "1 Insufficient memory", PINNED),
            False,
        ),
        (
            "the-first-failing-filter-is-the-one-reported",
            ["taint", "insufficient:memory"],
            failed("1 node(s) had untolerated taint(s)", PINNED),
            True,
        ),
        (
            "a-later-filter-reported-than-ours",
            ["node-unschedulable"],
            failed("1 node(s) had untolerated taint(s)", PINNED),
            False,
        ),
        (
            "claim-in-use-with-the-fit-reasons-behind-it",
            ["claim-in-use"],
            failed(
                "1 node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access "
                "mode already in-use by another pod",
                PINNED,
            ),
            True,
        ),
        (
            "prefilter-rejection",
            ["node-selector"],
            f"0/3 nodes are available: pod affinity terms conflict.{NOT_HELPFUL}",
            True,
        ),
        (
            "a-reason-the-scheduler-does-not-have",
            ["premium-node"],
            failed("1 node(s) had untolerated taint(s)", PINNED),
            False,
        ),
        ("not-a-fit-error", ["taint"], "binding rejected: the node is gone", False),
    ],
)
def test_the_judge_agrees_when_the_scheduler_reports_our_first_failing_filter(
    test_variation_id, ours, message, expect_agree
):
    agree, why = judge_refusal(ours, message)
    assert agree is expect_agree, why


def test_the_histogram_counts_nodes_per_fragment_and_a_prefilter_message_has_none():
    assert parse_failed_scheduling(failed("1 Too many pods", PINNED)) == (
        None,
        {"Too many pods": 1, "node(s) didn't satisfy plugin(s) [NodeAffinity]": 2},
    )
    prefilter = f"0/3 nodes are available: pod affinity terms conflict.{NOT_HELPFUL}"
    assert parse_failed_scheduling(prefilter) == ("pod affinity terms conflict", {})


@pytest.mark.parametrize(
    "code, plugin",
    [
        ("node-unschedulable", "NodeUnschedulable"),
        ("taint", "TaintToleration"),
        ("node-selector", "NodeAffinity"),
        ("too-many-pods", "NodeResourcesFit"),
        ("insufficient:example.com/fpga", "NodeResourcesFit"),
        ("claim-in-use", "VolumeRestrictions"),
        ("volume-node-affinity", "VolumeBinding"),
        ("split-attachment", None),
        ("premium-node", None),
    ],
)
def test_each_reason_code_belongs_to_the_filter_plugin_that_reports_it(code, plugin):
    assert plugin_of(code) == plugin


# --------------------------------------------------------------------------------------------------
# preemption (kube-scheduler 1.37's message when it preempts)

PREEMPTS = (
    "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) didn't satisfy plugin(s) "
    "[NodeAffinity]. preemption: found a potential placement for pod on node cpu-1, "
    "preempting 1 victims"
)


def test_the_node_the_scheduler_preempts_on_is_read_from_its_message():
    from benchmarks.agreement.judge import preempting_on

    assert preempting_on(PREEMPTS) == "cpu-1"
    assert preempting_on(failed("1 Insufficient cpu", PINNED)) is None


def _decided(new_pod, *objects):
    from nebari_colocate.placement import Policy, decide
    from tests.unit.test_preemption import state

    snapshot = state(*objects)
    return decide(new_pod, snapshot, Policy()), snapshot


@pytest.mark.parametrize(
    "test_variation_id, placeholder_priority, lab_priority, said, detail, expect_agree",
    [
        ("preempting-colocate-bound-there", -10, 0, "bound", "cpu-1", True),
        ("preempting-colocate-nominated-there", -10, 0, "nominated", "cpu-1", True),
        ("preempting-colocate-but-failed", -10, 0, "failed", PREEMPTS.split(". pre")[0], False),
        ("refused-but-the-scheduler-preempts", 0, 0, "failed", PREEMPTS, False),
        ("refused-as-the-scheduler-would-preempt-the-holder", 0, -10, "failed", PREEMPTS, True),
    ],
)
def test_preemption_verdicts_are_judged_against_the_decision(
    test_variation_id, placeholder_priority, lab_priority, said, detail, expect_agree
):
    from benchmarks.agreement.judge import judge
    from tests.unit.test_preemption import app, lab, node, other

    holder_in_the_way = lab_priority < 0  # the lab fills the node; the other pod is small
    lab_cpu, other_cpu = ("3", "1") if holder_in_the_way else ("1", "2500m")
    decision, snapshot = _decided(
        app(),
        node("cpu-1"),
        lab(priority=lab_priority, cpu=lab_cpu),
        other("p", placeholder_priority, other_cpu),
    )
    assert (decision.preemption is not None and bool(decision.preemption.holders)) is (
        holder_in_the_way
    )
    agree, why = judge(decision, app(), snapshot, "cpu-1", said, detail)
    assert agree is expect_agree, why


def test_the_ci_scenarios_carry_priorities_of_every_kind():
    """The generator runs without a cluster (pure): seed 1's 200 scenarios (the CI set) carry
    placeholders, PDBs, nominated pods and preemptionPolicy Never."""
    from benchmarks.agreement.scenarios import generate

    scenarios = [generate(1, i, "t") for i in range(200)]
    extras = [s.extras for s in scenarios if s.extras is not None]
    assert 60 <= len(extras) <= 110
    assert any(e.nominee is not None for e in extras)
    assert any(e.pdb is not None for e in extras)
    names = {p.manifest["metadata"]["name"] for s in scenarios for p in s.pods}
    assert "placeholder-0" in names
    classes = {s.new_pod["spec"].get("priorityClassName") for s in scenarios}
    assert {"agreement-never", "agreement-high"} <= classes
