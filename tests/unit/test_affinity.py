"""apply_decision: the label, the pod affinity and the node pin merged into a pod manifest."""

from __future__ import annotations

import copy

import pytest

from nebari_colocate import fit
from nebari_colocate.affinity import apply_decision, user_colocation_keys
from nebari_colocate.placement import Decision
from tests.support.builders import expr, gpu_node, name_is, node, pod, required_affinity, term

KEY, VALUE = "nebari.dev/colocate-user", "alice"
OUR_TERM = {"labelSelector": {"matchLabels": {KEY: VALUE}}, "topologyKey": "kubernetes.io/hostname"}
PIN = name_is("gpu-1")
GPU_TERM = term(expr("nebari.dev/node-type", "In", "gpu"))
ZONE_TERM = term(expr("zone", "In", "a"))
PREFERRED = [{"weight": 10, "preference": term(expr("zone", "In", "a"))}]
# data-science-pack's hand-written co-location rule: the escape-slug value of "tpotts@openteams.com"
HAND_WRITTEN_TERM = {
    "labelSelector": {
        "matchExpressions": [{"key": KEY, "operator": "In", "values": ["tpotts-40openteams-2ecom"]}]
    },
    "topologyKey": "kubernetes.io/hostname",
}
HAND_WRITTEN_LABELS_TERM = {
    "labelSelector": {"matchLabels": {KEY: "tpotts-40openteams-2ecom"}},
    "topologyKey": "kubernetes.io/hostname",
}
# a hub config's own rule on KubeSpawner's username label (z2jh charts and blog posts write it)
USERNAME_TERM = {
    "labelSelector": {"matchLabels": {"hub.jupyter.org/username": "alice"}},
    "topologyKey": "kubernetes.io/hostname",
}
# the default key's rule, while this hub's label key is another one
DEFAULT_KEY_TERM = {
    "labelSelector": {"matchLabels": {"nebari.dev/colocate-user": "alice"}},
    "topologyKey": "kubernetes.io/hostname",
}
USERNAME_ZONE_TERM = {
    "labelSelector": {"matchLabels": {"hub.jupyter.org/username": "alice"}},
    "topologyKey": "topology.kubernetes.io/zone",
}
OTHER_POD_TERM = {
    "labelSelector": {"matchLabels": {"app": "db"}},
    "topologyKey": "topology.kubernetes.io/zone",
}


def pod_affinity(*terms: dict) -> dict:
    return {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": list(terms)}}


def required_terms(manifest: dict) -> list[dict] | None:
    node_affinity = manifest["spec"].get("affinity", {}).get("nodeAffinity") or {}
    selector = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    return None if selector is None else selector["nodeSelectorTerms"]


def pod_terms(manifest: dict) -> list[dict] | None:
    pod_affinity = manifest["spec"].get("affinity", {}).get("podAffinity") or {}
    return pod_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")


@pytest.mark.parametrize(
    "test_variation_id, decision, pod_kwargs, expect_pod_terms, expect_node_terms",
    [
        ("skip-adds-no-affinity", Decision("skip"), {}, None, None),
        ("colocate-anywhere", Decision("colocate"), {}, [OUR_TERM], None),
        (
            "colocate-on-node-without-node-affinity",
            Decision("colocate", node="gpu-1"),
            {},
            [OUR_TERM],
            [term(fields=[PIN])],
        ),
        (
            "pin-is-anded-into-the-profiles-term",
            Decision("colocate", node="gpu-1"),
            {"affinity": required_affinity(GPU_TERM)},
            [OUR_TERM],
            [term(*GPU_TERM["matchExpressions"], fields=[PIN])],
        ),
        (
            "pin-is-anded-into-every-term",
            Decision("colocate", node="gpu-1"),
            {"affinity": required_affinity(GPU_TERM, ZONE_TERM)},
            [OUR_TERM],
            [
                term(*GPU_TERM["matchExpressions"], fields=[PIN]),
                term(*ZONE_TERM["matchExpressions"], fields=[PIN]),
            ],
        ),
        (
            "pin-joins-existing-match-fields",
            Decision("colocate", node="gpu-1"),
            {"affinity": required_affinity(term(fields=[name_is("cpu-9", operator="NotIn")]))},
            [OUR_TERM],
            [term(fields=[name_is("cpu-9", operator="NotIn"), PIN])],
        ),
        (
            "colocate-anywhere-leaves-the-profiles-node-affinity",
            Decision("colocate"),
            {"affinity": required_affinity(GPU_TERM)},
            [OUR_TERM],
            [GPU_TERM],
        ),
        (
            "existing-pod-affinity-is-kept",
            Decision("colocate"),
            {
                "affinity": {
                    "podAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": [OTHER_POD_TERM]
                    }
                }
            },
            [OTHER_POD_TERM, OUR_TERM],
            None,
        ),
        (
            "our-pod-affinity-term-is-not-repeated",
            Decision("colocate"),
            {
                "affinity": {
                    "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [OUR_TERM]}
                }
            },
            [OUR_TERM],
            None,
        ),
        (
            "a-hand-written-term-on-our-key-is-replaced-not-anded",
            Decision("colocate"),
            {"affinity": pod_affinity(HAND_WRITTEN_TERM)},
            [OUR_TERM],
            None,
        ),
        (
            "a-hand-written-match-labels-term-on-our-key-is-replaced",
            Decision("colocate", node="gpu-1"),
            {"affinity": pod_affinity(HAND_WRITTEN_LABELS_TERM)},
            [OUR_TERM],
            [term(fields=[PIN])],
        ),
        (
            "only-the-term-on-our-key-is-replaced",
            Decision("colocate"),
            {"affinity": pod_affinity(OTHER_POD_TERM, HAND_WRITTEN_TERM)},
            [OTHER_POD_TERM, OUR_TERM],
            None,
        ),
        (
            "skip-drops-a-hand-written-term-on-our-key",
            Decision("skip"),
            {"affinity": pod_affinity(HAND_WRITTEN_TERM)},
            None,
            None,
        ),
        (
            "skip-drops-a-hand-written-term-on-the-username-label",
            Decision("skip"),
            {"affinity": pod_affinity(USERNAME_TERM, OTHER_POD_TERM)},
            [OTHER_POD_TERM],
            None,
        ),
        (
            "colocate-replaces-a-hand-written-term-on-the-username-label",
            Decision("colocate"),
            {"affinity": pod_affinity(USERNAME_TERM)},
            [OUR_TERM],
            None,
        ),
        (
            "skip-keeps-a-username-term-across-a-zone-which-is-not-one-node",
            Decision("skip"),
            {"affinity": pod_affinity(USERNAME_ZONE_TERM)},
            [USERNAME_ZONE_TERM],
            None,
        ),
        (
            "skip-keeps-other-pod-affinity",
            Decision("skip"),
            {"affinity": pod_affinity(HAND_WRITTEN_TERM, OTHER_POD_TERM)},
            [OTHER_POD_TERM],
            None,
        ),
    ],
)
def test_colocate_adds_pod_affinity_and_ands_the_node_pin_into_every_term(
    test_variation_id, decision, pod_kwargs, expect_pod_terms, expect_node_terms
):
    manifest = apply_decision(pod("new", **pod_kwargs), decision, KEY, VALUE)
    assert pod_terms(manifest) == expect_pod_terms
    assert required_terms(manifest) == expect_node_terms


@pytest.mark.parametrize(
    "test_variation_id, decision",
    [
        ("skip", Decision("skip")),
        ("colocate-anywhere", Decision("colocate")),
        ("colocate-on-node", Decision("colocate", node="gpu-1")),
    ],
)
def test_every_user_pod_gets_the_colocation_label(test_variation_id, decision):
    original = pod("new", user="alice", server="app")
    manifest = apply_decision(original, decision, KEY, VALUE)
    assert manifest["metadata"]["labels"] == {**original["metadata"]["labels"], KEY: VALUE}


def test_a_pod_without_labels_gets_the_colocation_label():
    bare = {"spec": {"containers": [{"name": "c"}]}}
    assert apply_decision(bare, Decision("skip"), KEY, VALUE)["metadata"]["labels"] == {KEY: VALUE}


@pytest.mark.parametrize(
    "test_variation_id, decision",
    [
        ("colocate-anywhere", Decision("colocate")),
        ("colocate-on-node", Decision("colocate", node="gpu-1")),
    ],
)
def test_applying_a_decision_twice_changes_nothing_more(test_variation_id, decision):
    original = pod("new", affinity={**required_affinity(GPU_TERM)})
    once = apply_decision(original, decision, KEY, VALUE)
    assert apply_decision(once, decision, KEY, VALUE) == once


def test_preferred_node_affinity_is_left_alone():
    affinity = required_affinity(GPU_TERM)
    affinity["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] = PREFERRED
    manifest = apply_decision(
        pod("new", affinity=affinity), Decision("colocate", node="gpu-1"), KEY, VALUE
    )
    node_affinity = manifest["spec"]["affinity"]["nodeAffinity"]
    assert node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] == PREFERRED


def test_the_input_pod_is_not_mutated():
    original = pod("new", user="alice", affinity=required_affinity(GPU_TERM, ZONE_TERM))
    snapshot = copy.deepcopy(original)
    apply_decision(original, Decision("colocate", node="gpu-1"), KEY, VALUE)
    assert original == snapshot


def test_a_refusal_cannot_be_applied():
    with pytest.raises(ValueError, match="refuse"):
        apply_decision(pod("new"), Decision("refuse", reasons=["taint"]), KEY, VALUE)


@pytest.mark.parametrize(
    "test_variation_id, candidate, expect_selected",
    [
        ("the-pinned-gpu-node", gpu_node("gpu-1", labels={"nebari.dev/node-type": "gpu"}), True),
        ("another-gpu-node", gpu_node("gpu-2", labels={"nebari.dev/node-type": "gpu"}), False),
        (
            "a-cpu-node-with-the-pinned-name",
            node("gpu-1", labels={"nebari.dev/node-type": "cpu"}),
            False,
        ),
    ],
)
def test_gpu_profiles_required_node_affinity_survives_the_pin(
    test_variation_id, candidate, expect_selected
):
    gpu_lab = pod("new", affinity=required_affinity(GPU_TERM))
    manifest = apply_decision(gpu_lab, Decision("colocate", node="gpu-1"), KEY, VALUE)
    assert fit.node_selector_ok(manifest, candidate) is expect_selected


def test_skip_under_another_label_key_drops_the_default_keys_colocation_term():
    manifest = apply_decision(
        pod("new", affinity=pod_affinity(DEFAULT_KEY_TERM)), Decision("skip"), "example.org/u", "a"
    )
    assert "affinity" not in manifest["spec"]


@pytest.mark.parametrize(
    "test_variation_id, terms, expect_keys",
    [
        ("our-own-term-is-not-reported", [OUR_TERM], []),
        ("a-username-term-is-reported-by-its-key", [USERNAME_TERM], ["hub.jupyter.org/username"]),
        ("a-term-on-our-key-is-reported", [HAND_WRITTEN_TERM, OTHER_POD_TERM], [KEY]),
        ("other-terms-are-not-reported", [OTHER_POD_TERM, USERNAME_ZONE_TERM], []),
    ],
)
def test_the_user_colocation_terms_apply_decision_takes_out_are_named_by_label_key(
    test_variation_id, terms, expect_keys
):
    assert (
        user_colocation_keys(pod("new", affinity=pod_affinity(*terms)), KEY, VALUE) == expect_keys
    )
