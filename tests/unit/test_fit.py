"""The kube-scheduler filter subset (docs/decisions.md, "The fit check"), one table per behaviour.

Expected values come from the upstream code: k8s.io/apimachinery resource.Quantity and
labels.Requirement, k8s.io/component-helpers resource.PodRequests and nodeaffinity, the
NodeUnschedulable / NodeAffinity / TaintToleration / NodeResourcesFit / VolumeBinding plugins.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from nebari_colocate import fit, quantity
from tests.support.builders import (
    container,
    expr,
    gpu_node,
    name_is,
    node,
    pod,
    pv,
    required_affinity,
    running,
    sidecar,
    taint,
    term,
    toleration,
)

GiB = 2**30
MiB = 2**20


# --------------------------------------------------------------------------------------------------
# quantities


@pytest.mark.parametrize(
    "test_variation_id, value, expect",
    [
        ("milli", "500m", Decimal("0.5")),
        ("micro", "250u", Decimal("0.00025")),
        ("nano", "7n", Decimal("0.000000007")),
        ("plain-int-string", "110", Decimal(110)),
        ("plain-int", 4, Decimal(4)),
        ("yaml-float", 0.5, Decimal("0.5")),
        ("kibi", "2Ki", Decimal(2048)),
        ("mebi", "1Mi", Decimal(MiB)),
        ("gibi-fraction", "1.5Gi", Decimal(3 * GiB // 2)),
        ("tebi", "1Ti", Decimal(2**40)),
        ("kilo", "3k", Decimal(3000)),
        ("mega", "2M", Decimal(2_000_000)),
        ("giga", "1G", Decimal(10**9)),
        ("exa-suffix-not-exponent", "2E", Decimal(2 * 10**18)),
        ("exponent", "1e3", Decimal(1000)),
        ("exponent-upper", "1E3", Decimal(1000)),
        ("negative-exponent", "12e-3", Decimal("0.012")),
        ("leading-dot", ".5", Decimal("0.5")),
        ("trailing-dot-with-suffix", "1.G", Decimal(10**9)),
        ("plus-sign", "+1", Decimal(1)),
        ("minus-sign", "-1", Decimal(-1)),
        # apimachinery reads a missing number as 0 (its TestParseQuantityString has "." and "-.")
        ("suffix-only-is-zero", "Gi", Decimal(0)),
    ],
)
def test_quantity_is_parsed_exactly(test_variation_id, value, expect):
    assert quantity.parse(value) == expect


@pytest.mark.parametrize(
    "test_variation_id, value",
    [
        ("empty", ""),
        ("word", "abc"),
        ("lower-case-binary", "1ki"),
        ("bytes-unit", "1GB"),
        ("two-dots", "1.2.3"),
        ("python-underscore", "1_000"),
        ("exponent-and-suffix", "1e3m"),
        ("dangling-exponent", "1e"),
        ("inner-space", "1 Gi"),
        ("infinity", "Infinity"),
        ("nan-float", float("nan")),
        ("bool", True),
        ("none", None),
    ],
)
def test_invalid_quantity_raises_value_error_naming_it(test_variation_id, value):
    with pytest.raises(ValueError, match="invalid quantity"):
        quantity.parse(value)


@pytest.mark.parametrize(
    "test_variation_id, resource, value, expect",
    [
        ("cpu-in-millicores", "cpu", "1.5", 1500),
        ("cpu-sub-milli-rounds-up", "cpu", "100u", 1),
        ("memory-in-bytes", "memory", "1Gi", GiB),
        ("memory-fraction-rounds-up", "memory", "1500m", 2),
        ("extended-whole-units", "nvidia.com/gpu", "2", 2),
        ("pods", "pods", "110", 110),
    ],
)
def test_scheduler_compares_millicpu_and_whole_units_rounded_up(
    test_variation_id, resource, value, expect
):
    assert quantity.scheduler_units(resource, value) == expect


# --------------------------------------------------------------------------------------------------
# what a pod requests


@pytest.mark.parametrize(
    "test_variation_id, pod_kwargs, expect",
    [
        ("no-resources", {}, {}),
        (
            "one-container",
            {"requests": {"cpu": "1", "memory": "1Gi"}},
            {"cpu": 1000, "memory": GiB},
        ),
        (
            "containers-are-summed",
            {
                "containers": [
                    container("a", requests={"cpu": "500m", "memory": "1Gi"}),
                    container("b", requests={"cpu": "1", "memory": "512Mi"}),
                ]
            },
            {"cpu": 1500, "memory": GiB + 512 * MiB},
        ),
        (
            "limits-only-container-requests-its-limits",
            {"limits": {"cpu": "2", "nvidia.com/gpu": "1"}},
            {"cpu": 2000, "nvidia.com/gpu": 1},
        ),
        (
            "limit-defaults-only-the-missing-request",
            {"requests": {"cpu": "1"}, "limits": {"cpu": "2", "memory": "4Gi"}},
            {"cpu": 1000, "memory": 4 * GiB},
        ),
        (
            "init-container-larger-than-sum-wins",
            {
                "containers": [
                    container("a", requests={"cpu": "1", "memory": "1Gi"}),
                    container("b", requests={"cpu": "1"}),
                ],
                "init_containers": [container("init", requests={"cpu": "3", "memory": "512Mi"})],
            },
            {"cpu": 3000, "memory": GiB},
        ),
        (
            "init-container-smaller-than-sum-is-hidden",
            {
                "requests": {"cpu": "2"},
                "init_containers": [container("init", requests={"cpu": "1"})],
            },
            {"cpu": 2000},
        ),
        (
            "largest-of-several-init-containers",
            {
                "requests": {"cpu": "1"},
                "init_containers": [
                    container("i1", requests={"cpu": "2"}),
                    container("i2", requests={"cpu": "3"}),
                ],
            },
            {"cpu": 3000},
        ),
        (
            "limits-only-init-container-requests-its-limits",
            {"requests": {"cpu": "1"}, "init_containers": [container("i", limits={"cpu": "4"})]},
            {"cpu": 4000},
        ),
        (
            "sidecar-adds-to-the-sum",
            {"requests": {"cpu": "1"}, "init_containers": [sidecar(requests={"cpu": "500m"})]},
            {"cpu": 1500},
        ),
        (
            "sidecar-adds-to-later-init-containers",
            {
                "requests": {"cpu": "1"},
                "init_containers": [
                    sidecar(requests={"cpu": "1"}),
                    container("init", requests={"cpu": "2"}),
                ],
            },
            {"cpu": 3000},
        ),
        (
            "sidecar-does-not-add-to-earlier-init-containers",
            {
                "requests": {"cpu": "1"},
                "init_containers": [
                    container("init", requests={"cpu": "2500m"}),
                    sidecar(requests={"cpu": "1"}),
                ],
            },
            {"cpu": 2500},
        ),
        (
            "overhead-is-added",
            {
                "requests": {"cpu": "1", "memory": "1Gi"},
                "overhead": {"cpu": "250m", "memory": "120Mi"},
            },
            {"cpu": 1250, "memory": GiB + 120 * MiB},
        ),
        (
            "overhead-is-added-after-the-init-maximum",
            {
                "requests": {"cpu": "1"},
                "init_containers": [container("init", requests={"cpu": "3"})],
                "overhead": {"cpu": "500m"},
            },
            {"cpu": 3500},
        ),
        (
            "pod-level-request-replaces-container-sum",
            {"requests": {"cpu": "1", "memory": "1Gi"}, "resources": {"requests": {"cpu": "4"}}},
            {"cpu": 4000, "memory": GiB},
        ),
        (
            "pod-level-request-plus-overhead",
            {
                "requests": {"cpu": "1"},
                "resources": {"requests": {"cpu": "4"}},
                "overhead": {"cpu": "100m"},
            },
            {"cpu": 4100},
        ),
        (
            "pod-level-limit-without-container-request-requests-the-limit",
            {"requests": {"memory": "1Gi"}, "resources": {"limits": {"cpu": "2"}}},
            {"cpu": 2000, "memory": GiB},
        ),
        (
            # API defaulting: a pod-level request defaults to the containers' aggregate when
            # they request the resource, and to the pod-level limit only when they do not.
            "pod-level-limit-with-container-requests-keeps-their-sum",
            {"requests": {"cpu": "1"}, "resources": {"limits": {"cpu": "4"}}},
            {"cpu": 1000},
        ),
        (
            "sub-milli-cpu-is-summed-before-rounding",
            {
                "containers": [
                    container("a", requests={"cpu": "500u"}),
                    container("b", requests={"cpu": "500u"}),
                ]
            },
            {"cpu": 1},
        ),
    ],
)
def test_pod_requests_follow_the_scheduler_formula(test_variation_id, pod_kwargs, expect):
    assert fit.pod_requests(pod("p", **pod_kwargs)) == expect


def test_pod_requests_raise_value_error_on_an_invalid_quantity():
    with pytest.raises(ValueError, match="lots"):
        fit.pod_requests(pod("p", requests={"cpu": "lots"}))


# --------------------------------------------------------------------------------------------------
# what already uses the node


def _cpu_hog(**kwargs) -> dict:
    kwargs.setdefault("name", "hog")
    kwargs.setdefault("node_name", "cpu-1")
    kwargs.setdefault("phase", "Running")
    return pod(kwargs.pop("name"), requests={"cpu": "3"}, **kwargs)


@pytest.mark.parametrize(
    "test_variation_id, other_pod, expect_reasons",
    [
        ("running-pod-counts", _cpu_hog(), ["insufficient:cpu"]),
        ("pending-bound-pod-counts", _cpu_hog(phase="Pending"), ["insufficient:cpu"]),
        ("pod-without-status-counts", _cpu_hog(phase=None), ["insufficient:cpu"]),
        ("succeeded-pod-does-not-count", _cpu_hog(phase="Succeeded"), []),
        ("failed-pod-does-not-count", _cpu_hog(phase="Failed"), []),
        ("terminating-pod-counts", _cpu_hog(deleting=True), ["insufficient:cpu"]),
        ("other-namespace-counts", _cpu_hog(namespace="kube-system"), ["insufficient:cpu"]),
        ("pod-on-another-node-does-not-count", _cpu_hog(node_name="cpu-2"), []),
        ("unbound-pod-does-not-count", _cpu_hog(node_name=None, phase="Pending"), []),
    ],
)
def test_node_usage_counts_every_live_pod_bound_to_the_node(
    test_variation_id, other_pod, expect_reasons
):
    new = pod("new", requests={"cpu": "2"})
    result = fit.check_fit(new, node("cpu-1"), [other_pod])
    assert result.reasons == expect_reasons


def test_the_pod_being_replaced_is_not_counted():
    old = running("jupyter-alice", "cpu-1", requests={"cpu": "3"})
    new = pod("jupyter-alice", requests={"cpu": "2"})
    result = fit.check_fit(new, node("cpu-1"), [old], exclude=["dev/jupyter-alice"])
    assert result.fits


# --------------------------------------------------------------------------------------------------
# taints and cordon


GPU_TAINT = taint("nvidia.com/gpu", "present", "NoSchedule")


@pytest.mark.parametrize(
    "test_variation_id, taints, tolerations, expect_reasons",
    [
        ("no-taints", [], [], []),
        ("noschedule-blocks", [GPU_TAINT], [], ["taint"]),
        ("noexecute-blocks", [taint("dedicated", "ml", "NoExecute")], [], ["taint"]),
        ("prefernoschedule-is-ignored", [taint("spot", "true", "PreferNoSchedule")], [], []),
        (
            "equal-with-key-value-effect",
            [GPU_TAINT],
            [toleration("nvidia.com/gpu", "Equal", "present", "NoSchedule")],
            [],
        ),
        (
            "omitted-operator-means-equal",
            [GPU_TAINT],
            [toleration("nvidia.com/gpu", value="present", effect="NoSchedule")],
            [],
        ),
        (
            "equal-with-value-mismatch",
            [GPU_TAINT],
            [toleration("nvidia.com/gpu", "Equal", "absent", "NoSchedule")],
            ["taint"],
        ),
        (
            "equal-without-value-vs-valued-taint",
            [GPU_TAINT],
            [toleration("nvidia.com/gpu", "Equal", effect="NoSchedule")],
            ["taint"],
        ),
        (
            "exists-ignores-the-value",
            [GPU_TAINT],
            [toleration("nvidia.com/gpu", "Exists", effect="NoSchedule")],
            [],
        ),
        ("exists-with-other-key", [GPU_TAINT], [toleration("dedicated", "Exists")], ["taint"]),
        (
            "effect-mismatch",
            [GPU_TAINT],
            [toleration("nvidia.com/gpu", "Exists", effect="NoExecute")],
            ["taint"],
        ),
        (
            "effectless-toleration-matches-every-effect",
            [GPU_TAINT, taint("nvidia.com/gpu", "present", "NoExecute")],
            [toleration("nvidia.com/gpu", "Equal", "present")],
            [],
        ),
        (
            "empty-key-exists-tolerates-everything",
            [GPU_TAINT, taint("dedicated", "ml", "NoExecute")],
            [toleration(operator="Exists")],
            [],
        ),
        (
            "empty-key-exists-with-effect-only-that-effect",
            [GPU_TAINT, taint("dedicated", "ml", "NoExecute")],
            [toleration(operator="Exists", effect="NoSchedule")],
            ["taint"],
        ),
        (
            "one-of-two-taints-untolerated",
            [GPU_TAINT, taint("dedicated", "ml", "NoSchedule")],
            [toleration("nvidia.com/gpu", "Exists")],
            ["taint"],
        ),
    ],
)
def test_only_untolerated_noschedule_and_noexecute_taints_block(
    test_variation_id, taints, tolerations, expect_reasons
):
    new = pod("new", tolerations=tolerations)
    result = fit.check_fit(new, node("n", taints=taints), [])
    assert result.reasons == expect_reasons


def test_untolerated_taints_are_reported_for_the_message():
    ml = taint("dedicated", "ml", "NoExecute")
    new = pod("new", tolerations=[toleration("nvidia.com/gpu", "Exists")])
    result = fit.check_fit(new, node("n", taints=[GPU_TAINT, ml]), [])
    assert result.taints == [ml]


@pytest.mark.parametrize(
    "test_variation_id, unschedulable, tolerations, expect_reasons",
    [
        ("schedulable", False, [], []),
        ("cordoned", True, [], ["node-unschedulable"]),
        (
            "cordoned-tolerated-by-key",
            True,
            [toleration("node.kubernetes.io/unschedulable", "Exists", effect="NoSchedule")],
            [],
        ),
        ("cordoned-tolerated-by-wildcard", True, [toleration(operator="Exists")], []),
        (
            "cordoned-toleration-with-wrong-effect",
            True,
            [toleration("node.kubernetes.io/unschedulable", "Exists", effect="NoExecute")],
            ["node-unschedulable"],
        ),
        (
            "cordoned-toleration-with-a-value",
            True,
            [toleration("node.kubernetes.io/unschedulable", "Equal", "yes", "NoSchedule")],
            ["node-unschedulable"],
        ),
    ],
)
def test_cordoned_node_takes_only_pods_that_tolerate_unschedulable(
    test_variation_id, unschedulable, tolerations, expect_reasons
):
    new = pod("new", tolerations=tolerations)
    result = fit.check_fit(new, node("n", unschedulable=unschedulable), [])
    assert result.reasons == expect_reasons


# --------------------------------------------------------------------------------------------------
# nodeSelector and required node affinity

LABELS = {"nebari.dev/node-type": "cpu", "cores": "8", "zone": "a", "odd": "1_0"}


def _affinity(*terms):
    return {"affinity": required_affinity(*terms)}


@pytest.mark.parametrize(
    "test_variation_id, pod_kwargs, expect_match",
    [
        ("nothing-required", {}, True),
        ("node-selector-matches", {"node_selector": {"nebari.dev/node-type": "cpu"}}, True),
        ("node-selector-other-value", {"node_selector": {"nebari.dev/node-type": "gpu"}}, False),
        ("node-selector-absent-label", {"node_selector": {"accelerator": "a100"}}, False),
        (
            "node-selector-all-labels-needed",
            {"node_selector": {"nebari.dev/node-type": "cpu", "zone": "b"}},
            False,
        ),
        ("in-matches", _affinity(term(expr("zone", "In", "b", "a"))), True),
        ("in-other-value", _affinity(term(expr("zone", "In", "b"))), False),
        ("in-absent-label", _affinity(term(expr("rack", "In", "a"))), False),
        ("notin-listed-value", _affinity(term(expr("zone", "NotIn", "a"))), False),
        ("notin-other-value", _affinity(term(expr("zone", "NotIn", "b"))), True),
        ("notin-absent-label-matches", _affinity(term(expr("rack", "NotIn", "r1"))), True),
        ("exists-present", _affinity(term(expr("zone", "Exists"))), True),
        ("exists-absent", _affinity(term(expr("rack", "Exists"))), False),
        ("doesnotexist-absent", _affinity(term(expr("rack", "DoesNotExist"))), True),
        ("doesnotexist-present", _affinity(term(expr("zone", "DoesNotExist"))), False),
        ("gt-greater", _affinity(term(expr("cores", "Gt", "4"))), True),
        ("gt-equal-is-not-greater", _affinity(term(expr("cores", "Gt", "8"))), False),
        ("gt-absent-label", _affinity(term(expr("memory-gb", "Gt", "4"))), False),
        ("gt-non-integer-label", _affinity(term(expr("zone", "Gt", "0"))), False),
        ("lt-less", _affinity(term(expr("cores", "Lt", "16"))), True),
        ("lt-negative-value", _affinity(term(expr("cores", "Lt", "-3"))), False),
        ("lt-non-integer-label", _affinity(term(expr("zone", "Lt", "100"))), False),
        # Go's strconv.ParseInt(s, 10, 64) takes no underscores; Python's int() would.
        ("lt-underscored-label-is-not-integer", _affinity(term(expr("odd", "Lt", "100"))), False),
        (
            "expressions-are-anded",
            _affinity(term(expr("zone", "In", "a"), expr("cores", "Gt", "16"))),
            False,
        ),
        (
            "terms-are-ored",
            _affinity(term(expr("zone", "In", "b")), term(expr("cores", "Gt", "4"))),
            True,
        ),
        ("empty-term-matches-nothing", _affinity(term()), False),
        ("empty-term-ored-with-match", _affinity(term(), term(expr("zone", "Exists"))), True),
        ("no-terms-match-nothing", _affinity(), False),
        ("match-fields-name-in", _affinity(term(fields=[name_is("cpu-1")])), True),
        ("match-fields-name-in-other", _affinity(term(fields=[name_is("cpu-2")])), False),
        (
            "match-fields-name-notin",
            _affinity(term(fields=[name_is("cpu-1", operator="NotIn")])),
            False,
        ),
        (
            "match-fields-name-notin-other",
            _affinity(term(fields=[name_is("cpu-2", operator="NotIn")])),
            True,
        ),
        (
            "match-fields-anded-with-expressions",
            _affinity(term(expr("zone", "In", "b"), fields=[name_is("cpu-1")])),
            False,
        ),
        (
            "node-selector-anded-with-affinity",
            {"node_selector": {"zone": "a"}, **_affinity(term(expr("cores", "Lt", "2")))},
            False,
        ),
    ],
)
def test_node_selector_and_required_node_affinity_select_the_node(
    test_variation_id, pod_kwargs, expect_match
):
    new = pod("new", **pod_kwargs)
    result = fit.check_fit(new, node("cpu-1", labels=LABELS), [])
    assert result.reasons == ([] if expect_match else ["node-selector"])


def test_preferred_node_affinity_never_blocks():
    preferred = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 100, "preference": term(expr("zone", "In", "elsewhere"))}
            ]
        }
    }
    assert fit.check_fit(pod("new", affinity=preferred), node("cpu-1"), []).fits


# --------------------------------------------------------------------------------------------------
# resources


@pytest.mark.parametrize(
    "test_variation_id, pods_on_node, max_pods, expect_reasons",
    [
        ("room-for-one-more", 1, "2", []),
        ("full", 2, "2", ["too-many-pods"]),
        ("no-pods-allocatable", 0, None, ["too-many-pods"]),
    ],
)
def test_pod_count_is_checked_against_allocatable_pods(
    test_variation_id, pods_on_node, max_pods, expect_reasons
):
    others = [running(f"p{i}", "cpu-1") for i in range(pods_on_node)]
    result = fit.check_fit(pod("new"), node("cpu-1", allocatable={"pods": max_pods}), others)
    assert result.reasons == expect_reasons


def test_finished_pods_do_not_fill_the_pod_count():
    others = [running("live", "cpu-1"), pod("done", node_name="cpu-1", phase="Succeeded")]
    result = fit.check_fit(pod("new"), node("cpu-1", allocatable={"pods": "2"}), others)
    assert result.fits


def test_too_many_pods_reports_the_limit():
    others = [running("live", "cpu-1")]
    result = fit.check_fit(pod("new"), node("cpu-1", allocatable={"pods": "1"}), others)
    assert (result.reasons, result.max_pods) == (["too-many-pods"], 1)


@pytest.mark.parametrize(
    "test_variation_id, the_node, used, new_kwargs, expect_reasons",
    [
        ("fits", node("cpu-1"), {"cpu": "2"}, {"requests": {"cpu": "2"}}, []),
        (
            "cpu-short",
            node("cpu-1"),
            {"cpu": "3"},
            {"requests": {"cpu": "2"}},
            ["insufficient:cpu"],
        ),
        (
            "cpu-short-by-one-millicore",
            node("cpu-1"),
            {"cpu": "2001m"},
            {"requests": {"cpu": "2"}},
            ["insufficient:cpu"],
        ),
        (
            "memory-short",
            node("cpu-1"),
            {"memory": "15Gi"},
            {"requests": {"memory": "2Gi"}},
            ["insufficient:memory"],
        ),
        (
            "cpu-and-memory-short",
            node("cpu-1"),
            {"cpu": "4", "memory": "16Gi"},
            {"requests": {"cpu": "1", "memory": "1Gi"}},
            ["insufficient:cpu", "insufficient:memory"],
        ),
        (
            "gpu-on-node-without-gpu",
            node("cpu-1"),
            {},
            {"limits": {"nvidia.com/gpu": "1"}},
            ["insufficient:nvidia.com/gpu"],
        ),
        (
            "gpu-already-taken",
            gpu_node(),
            {"nvidia.com/gpu": "1"},
            {"limits": {"nvidia.com/gpu": "1"}},
            ["insufficient:nvidia.com/gpu"],
        ),
        ("gpu-free", gpu_node(), {}, {"limits": {"nvidia.com/gpu": "1"}}, []),
        (
            "zero-request-of-absent-resource-is-skipped",
            node("cpu-1"),
            {},
            {"requests": {"nvidia.com/gpu": "0"}},
            [],
        ),
        (
            "overhead-tips-it-over",
            node("cpu-1"),
            {"cpu": "2"},
            {"requests": {"cpu": "2"}, "overhead": {"cpu": "1m"}},
            ["insufficient:cpu"],
        ),
    ],
)
def test_requests_must_fit_what_the_node_has_free(
    test_variation_id, the_node, used, new_kwargs, expect_reasons
):
    name = the_node["metadata"]["name"]
    others = [running("used", name, requests=used)] if used else []
    result = fit.check_fit(pod("new", **new_kwargs), the_node, others)
    assert sorted(result.reasons) == expect_reasons


def test_shortfall_reports_request_free_and_allocatable():
    others = [running("lab", "cpu-1", requests={"cpu": "3"})]
    result = fit.check_fit(pod("new", requests={"cpu": "2"}), node("cpu-1"), others)
    assert result.shortfalls == [fit.Shortfall("cpu", 2000, 1000, 4000)]


def test_gpu_lab_on_cpu_node_gets_every_reason():
    gpu_lab = pod(
        "new",
        limits={"nvidia.com/gpu": "1"},
        node_selector={"nebari.dev/node-type": "gpu"},
    )
    cpu_node = node("cpu-1", labels={"nebari.dev/node-type": "cpu"}, unschedulable=True)
    result = fit.check_fit(gpu_lab, cpu_node, [])
    assert sorted(result.reasons) == [
        "insufficient:nvidia.com/gpu",
        "node-selector",
        "node-unschedulable",
    ]


# --------------------------------------------------------------------------------------------------
# a bound PV's node affinity (VolumeBinding)


@pytest.mark.parametrize(
    "test_variation_id, pvs, expect_reasons",
    [
        ("no-pv", [], []),
        ("pv-without-node-affinity", [pv("pv-a")], []),
        ("pv-zone-matches", [pv("pv-a", terms=[term(expr("zone", "In", "a"))])], []),
        (
            "pv-zone-excludes-node",
            [pv("pv-a", terms=[term(expr("zone", "In", "b"))])],
            ["volume-node-affinity"],
        ),
        (
            "pv-terms-are-ored",
            [pv("pv-a", terms=[term(expr("zone", "In", "b")), term(expr("zone", "In", "a"))])],
            [],
        ),
        (
            "one-of-two-pvs-conflicts-reported-once",
            [
                pv("pv-a", terms=[term(expr("zone", "In", "b"))]),
                pv("pv-b", terms=[term(expr("zone", "In", "c"))]),
            ],
            ["volume-node-affinity"],
        ),
        # VolumeBinding matches against a Node built from the labels only (CheckNodeAffinity);
        # nodeaffinity skips matchFields for a node without a name, so they constrain nothing.
        ("pv-match-fields-are-not-seen", [pv("pv-a", terms=[term(fields=[name_is("x")])])], []),
        (
            "pv-match-fields-beside-a-failing-expression",
            [pv("pv-a", terms=[term(expr("zone", "In", "b"), fields=[name_is("cpu-1")])])],
            ["volume-node-affinity"],
        ),
    ],
)
def test_a_bound_pv_node_affinity_must_match_the_node_labels(
    test_variation_id, pvs, expect_reasons
):
    result = fit.check_fit(pod("new"), node("cpu-1", labels={"zone": "a"}), [], pvs)
    assert result.reasons == expect_reasons
