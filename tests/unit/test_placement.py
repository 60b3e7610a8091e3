"""decide(pod, state, policy): the contract of docs/decisions.md ("The contract, in order"), one
table per step."""

from __future__ import annotations

import pytest

from nebari_colocate.affinity import apply_decision
from nebari_colocate.config import DEFAULT_LABEL_KEY as LABEL_KEY
from nebari_colocate.placement import Policy, decide, safe_side
from tests.support.builders import (
    NAMESPACE,
    expr,
    gpu_node,
    name_is,
    node,
    pod,
    pv,
    pvc,
    required_affinity,
    running,
    state,
    taint,
    term,
    toleration,
    volume_attachment,
)

RWO, RWX, ROX, RWOP = "ReadWriteOnce", "ReadWriteMany", "ReadOnlyMany", "ReadWriteOncePod"
HOME = "claim-alice"
CPU = {"nebari.dev/node-type": "cpu"}
GPU = {"nebari.dev/node-type": "gpu"}


def new_pod(**kwargs) -> dict:
    """The pod being spawned: alice's app mounting her home claim, asking for one CPU."""
    kwargs.setdefault("claims", [HOME])
    kwargs.setdefault("requests", {"cpu": "1"})
    return pod("jupyter-alice--new", user="alice", server="new", **kwargs)


def lab(node_name: str = "cpu-1", name: str = "jupyter-alice", **kwargs) -> dict:
    """One of alice's running servers mounting her home claim."""
    kwargs.setdefault("claims", [HOME])
    kwargs.setdefault("phase", "Running")
    return pod(name, node_name=node_name, user="alice", server="", **kwargs)


def expect(verdict, node=None, reasons=(), warnings=(), holders=()) -> dict:
    return {
        "verdict": verdict,
        "node": node,
        "reasons": sorted(reasons),
        "warnings": sorted(warnings),
        "holders": sorted(holders),
    }


def outcome(decision) -> dict:
    return {
        "verdict": decision.verdict,
        "node": decision.node,
        "reasons": sorted(decision.reasons),
        "warnings": sorted(decision.warnings),
        "holders": decision.holders,
    }


BASE = (node("cpu-1", labels=CPU), node("cpu-2", labels=CPU), gpu_node("gpu-1", labels=GPU))


# --------------------------------------------------------------------------------------------------
# 1. claims


@pytest.mark.parametrize(
    "test_variation_id, pod_kwargs, objects, policy, expect_result",
    [
        ("no-claims", {"claims": []}, [lab()], Policy(), expect("skip")),
        ("rwx-claim", {}, [pvc(HOME, modes=[RWX]), lab()], Policy(), expect("skip")),
        (
            "rox-claim-mounted-read-only-everywhere-is-shared",
            {"read_only": True},
            [pvc(HOME, modes=[ROX]), lab(read_only=True)],
            Policy(),
            expect("skip"),
        ),
        (
            "rox-claim-mounted-read-write-is-exclusive",
            {},
            [pvc(HOME, modes=[ROX]), lab(read_only=True)],
            Policy(),
            expect("colocate", "cpu-1", holders=["jupyter-alice"]),
        ),
        (
            "rwo-and-rox-mounted-read-write-by-a-holder-is-exclusive",
            {"read_only": True},
            [pvc(HOME, modes=[RWO, ROX]), lab()],
            Policy(),
            expect("colocate", "cpu-1", holders=["jupyter-alice"]),
        ),
        (
            "rwo-and-rox-mounted-read-only-everywhere-is-shared",
            {"read_only": True},
            [pvc(HOME, modes=[RWO, ROX]), lab(read_only=True)],
            Policy(),
            expect("skip"),
        ),
        (
            "rwo-and-rwx-listed-counts-as-shared",
            {},
            [pvc(HOME, modes=[RWO, RWX]), lab()],
            Policy(),
            expect("skip"),
        ),
        (
            "rwx-home-beside-rwo-workspace",
            {"claims": [HOME, "nebi-workspaces-alice"]},
            [
                pvc(HOME, modes=[RWX]),
                pvc("nebi-workspaces-alice"),
                lab(claims=["nebi-workspaces-alice"]),
            ],
            Policy(),
            expect("colocate", "cpu-1", holders=["jupyter-alice"]),
        ),
        (
            "missing-claim-with-configured-rwo-is-exclusive",
            {},
            [lab()],
            Policy(storage_access_mode=RWO),
            expect("colocate", "cpu-1", holders=["jupyter-alice"]),
        ),
        (
            "missing-claim-with-configured-rwx-is-shared",
            {},
            [lab()],
            Policy(storage_access_mode=RWX),
            expect("skip"),
        ),
        (
            "existing-rwo-claim-stays-rwo-after-switch-to-rwx",
            {},
            [pvc(HOME, modes=[RWO]), lab()],
            Policy(storage_access_mode=RWX),
            expect("colocate", "cpu-1", holders=["jupyter-alice"]),
        ),
        (
            "claim-with-no-access-modes-is-exclusive",
            {},
            [pvc(HOME, modes=[]), lab()],
            Policy(),
            expect("colocate", "cpu-1", holders=["jupyter-alice"]),
        ),
    ],
)
def test_only_exclusive_claims_call_for_colocation(
    test_variation_id, pod_kwargs, objects, policy, expect_result
):
    decision = decide(new_pod(**pod_kwargs), state(*BASE, *objects), policy)
    assert outcome(decision) == expect_result


# --------------------------------------------------------------------------------------------------
# 2. holders


@pytest.mark.parametrize(
    "test_variation_id, others, expect_result",
    [
        ("nobody-holds", [], expect("colocate")),
        ("running-holder", [lab()], expect("colocate", "cpu-1", holders=["jupyter-alice"])),
        (
            "pending-holder-bound",
            [lab(phase="Pending")],
            expect("colocate", "cpu-1", holders=["jupyter-alice"]),
        ),
        ("holder-without-node-name", [lab(node_name=None, phase="Pending")], expect("colocate")),
        ("succeeded-pod-holds-nothing", [lab(phase="Succeeded")], expect("colocate")),
        ("failed-pod-holds-nothing", [lab(phase="Failed")], expect("colocate")),
        (
            "terminating-pod-still-holds",
            [lab(deleting=True)],
            expect("colocate", "cpu-1", holders=["jupyter-alice"]),
        ),
        (
            "pod-with-the-new-pods-name-is-being-replaced",
            [lab(name="jupyter-alice--new")],
            expect("colocate"),
        ),
        (
            "other-namespace-pod-with-same-claim-name",
            [lab(namespace="prod")],
            expect("colocate"),
        ),
        ("pod-without-the-claim", [lab(claims=["claim-bob"])], expect("colocate")),
        (
            "several-holders-on-one-node",
            [lab(), lab(name="jupyter-alice--app")],
            expect("colocate", "cpu-1", holders=["jupyter-alice", "jupyter-alice--app"]),
        ),
        (
            "another-users-pod-mounting-the-claim-holds-it",
            [pod("jupyter-bob", node_name="cpu-2", phase="Running", claims=[HOME], user="bob")],
            expect("colocate", "cpu-2", holders=["jupyter-bob"]),
        ),
    ],
)
def test_holders_are_live_bound_pods_of_the_namespace_mounting_the_claim(
    test_variation_id, others, expect_result
):
    decision = decide(new_pod(), state(*BASE, pvc(HOME), *others), Policy())
    assert outcome(decision) == expect_result


@pytest.mark.parametrize(
    "test_variation_id, others, expect_result",
    [
        ("rwop-free", [], expect("colocate")),
        (
            "rwop-held",
            [lab()],
            expect("refuse", reasons=["claim-in-use"], holders=["jupyter-alice"]),
        ),
        (
            "rwop-held-by-terminating-pod",
            [lab(deleting=True)],
            expect("refuse", reasons=["claim-in-use"], holders=["jupyter-alice"]),
        ),
        ("rwop-held-by-finished-pod", [lab(phase="Succeeded")], expect("colocate")),
    ],
)
def test_a_read_write_once_pod_claim_in_use_is_refused(test_variation_id, others, expect_result):
    decision = decide(new_pod(), state(*BASE, pvc(HOME, modes=[RWOP]), *others), Policy())
    assert outcome(decision) == expect_result
    if decision.verdict == "refuse":
        assert decision.busy_claims == [HOME]


# --------------------------------------------------------------------------------------------------
# 3. pinned node


WORKSPACE = "nebi-workspaces-alice"


@pytest.mark.parametrize(
    "test_variation_id, others, expect_result, expect_pinned_by",
    [
        (
            "holders-on-two-nodes",
            [lab("cpu-1"), lab("cpu-2", name="jupyter-alice--app")],
            expect(
                "refuse",
                reasons=["split-attachment"],
                holders=["jupyter-alice", "jupyter-alice--app"],
            ),
            "holders",
        ),
        (
            "two-claims-held-on-two-nodes",
            [lab("cpu-1"), lab("cpu-2", name="jupyter-alice--app", claims=[WORKSPACE])],
            expect(
                "refuse",
                reasons=["split-attachment"],
                holders=["jupyter-alice", "jupyter-alice--app"],
            ),
            "holders",
        ),
        (
            "attached-volume-without-holders-pins",
            [volume_attachment(f"pv-{HOME}", "cpu-2")],
            expect("colocate", "cpu-2"),
            "attachment",
        ),
        (
            "detached-volume-does-not-pin",
            [volume_attachment(f"pv-{HOME}", "cpu-2", attached=False)],
            expect("colocate"),
            None,
        ),
        (
            "attachment-of-an-unrelated-volume",
            [volume_attachment("pv-claim-bob", "cpu-2")],
            expect("colocate"),
            None,
        ),
        (
            "attachments-on-two-nodes",
            [
                volume_attachment(f"pv-{HOME}", "cpu-1"),
                volume_attachment(f"pv-{WORKSPACE}", "cpu-2"),
            ],
            expect("refuse", reasons=["split-attachment"]),
            "attachment",
        ),
        (
            "holders-win-over-a-lingering-attachment",
            [lab("cpu-1"), volume_attachment(f"pv-{HOME}", "cpu-2")],
            expect("colocate", "cpu-1", holders=["jupyter-alice"]),
            "holders",
        ),
    ],
)
def test_the_node_is_pinned_by_holders_else_by_an_attached_volume(
    test_variation_id, others, expect_result, expect_pinned_by
):
    pod_ = new_pod(claims=[HOME, WORKSPACE])
    decision = decide(pod_, state(*BASE, pvc(HOME), pvc(WORKSPACE), *others), Policy())
    assert outcome(decision) == expect_result
    assert decision.pinned_by == expect_pinned_by


DISK = ("disk.csi.example", "projects/p/disks/alice-home")
#: the same disk exposed in namespace "backups" by a second PV (a snapshot-free copy job's)
OTHER_PV = "pv-backups-alice-home"


def same_disk_elsewhere(handle: tuple[str, str] = DISK) -> list[dict]:
    """alice's home bound to a CSI PV, and a second PV of ``handle`` bound to a claim of
    namespace "backups"."""
    return [
        pvc(HOME),
        pv(f"pv-{HOME}", csi=DISK, claim=f"{NAMESPACE}/{HOME}"),
        pvc("alice-home", namespace="backups", volume=OTHER_PV),
        pv(OTHER_PV, csi=handle, claim="backups/alice-home"),
    ]


def backup_pod(node_name: str = "cpu-2", **kwargs) -> dict:
    kwargs.setdefault("phase", "Running")
    return pod("backup", namespace="backups", node_name=node_name, claims=["alice-home"], **kwargs)


@pytest.mark.parametrize(
    "test_variation_id, objects, expect_result, expect_pinned_by",
    [
        (
            "the-disk-attached-through-a-second-pv-pins",
            [*same_disk_elsewhere(), volume_attachment(OTHER_PV, "cpu-2")],
            expect("colocate", "cpu-2"),
            "attachment",
        ),
        (
            "a-pod-of-another-namespace-holding-the-disk-pins",
            [*same_disk_elsewhere(), backup_pod("cpu-2")],
            expect("colocate", "cpu-2", holders=["backup"]),
            "holders",
        ),
        (
            "the-disk-held-elsewhere-and-a-server-here-is-split",
            [*same_disk_elsewhere(), backup_pod("cpu-2"), lab("cpu-1")],
            expect("refuse", reasons=["split-attachment"], holders=["backup", "jupyter-alice"]),
            "holders",
        ),
        (
            "a-finished-pod-of-another-namespace-holds-nothing",
            [*same_disk_elsewhere(), backup_pod("cpu-2", phase="Succeeded")],
            expect("colocate"),
            None,
        ),
        (
            "another-handle-is-another-disk",
            [
                *same_disk_elsewhere((DISK[0], "projects/p/disks/bob-home")),
                backup_pod("cpu-2"),
                volume_attachment(OTHER_PV, "cpu-2"),
            ],
            expect("colocate"),
            None,
        ),
        (
            "the-same-handle-of-another-driver-is-another-disk",
            [
                *same_disk_elsewhere(("nfs.csi.example", DISK[1])),
                backup_pod("cpu-2"),
                volume_attachment(OTHER_PV, "cpu-2"),
            ],
            expect("colocate"),
            None,
        ),
    ],
)
def test_a_disk_is_known_by_its_driver_and_handle_whichever_pv_exposes_it(
    test_variation_id, objects, expect_result, expect_pinned_by
):
    decision = decide(new_pod(), state(*BASE, *objects), Policy())
    assert outcome(decision) == expect_result
    assert decision.pinned_by == expect_pinned_by


def test_a_read_write_once_pod_disk_held_through_a_second_pv_is_in_use():
    objects = same_disk_elsewhere()
    objects[0] = pvc(HOME, modes=[RWOP])
    decision = decide(new_pod(), state(*BASE, *objects, backup_pod("cpu-2")), Policy())
    assert (decision.verdict, decision.reasons, decision.busy_claims) == (
        "refuse",
        ["claim-in-use"],
        [HOME],
    )


def test_split_attachment_names_the_nodes():
    others = [lab("cpu-2"), lab("cpu-1", name="jupyter-alice--app")]
    decision = decide(new_pod(), state(*BASE, pvc(HOME), *others), Policy())
    assert decision.split_nodes == ["cpu-1", "cpu-2"]


def test_unreadable_volume_attachments_pin_nothing():
    the_state = state(*BASE, pvc(HOME)).replace(volume_attachments=None)
    assert outcome(decide(new_pod(), the_state, Policy())) == expect("colocate")


# --------------------------------------------------------------------------------------------------
# 5. pinned: does the new pod fit the node?


@pytest.mark.parametrize(
    "test_variation_id, pod_kwargs, objects, expect_result",
    [
        ("fits", {}, [lab()], expect("colocate", "cpu-1", holders=["jupyter-alice"])),
        (
            "gpu-profile-on-cpu-node",
            {"limits": {"nvidia.com/gpu": "1"}, "node_selector": GPU},
            [lab()],
            expect(
                "refuse",
                "cpu-1",
                ["insufficient:nvidia.com/gpu", "node-selector"],
                holders=["jupyter-alice"],
            ),
        ),
        (
            "gpu-profile-by-required-affinity",
            {
                "limits": {"nvidia.com/gpu": "1"},
                "affinity": required_affinity(term(expr("nebari.dev/node-type", "In", "gpu"))),
            },
            [lab()],
            expect(
                "refuse",
                "cpu-1",
                ["insufficient:nvidia.com/gpu", "node-selector"],
                holders=["jupyter-alice"],
            ),
        ),
        (
            "node-full",
            {"requests": {"cpu": "2"}},
            [lab(requests={"cpu": "3"})],
            expect("refuse", "cpu-1", ["insufficient:cpu"], holders=["jupyter-alice"]),
        ),
        (
            "node-full-because-of-another-namespace",
            {"requests": {"cpu": "2"}},
            [
                lab(requests={"cpu": "1"}),
                running("daemon", "cpu-1", namespace="kube-system", requests={"cpu": "2"}),
            ],
            expect("refuse", "cpu-1", ["insufficient:cpu"], holders=["jupyter-alice"]),
        ),
        (
            "replaced-pod-of-the-same-name-frees-its-share",
            {"requests": {"cpu": "3"}},
            [lab(), lab(name="jupyter-alice--new", requests={"cpu": "3"})],
            expect("colocate", "cpu-1", holders=["jupyter-alice"]),
        ),
        (
            "node-cordoned",
            {},
            [lab("cpu-3")],
            expect("refuse", "cpu-3", ["node-unschedulable"], holders=["jupyter-alice"]),
        ),
        (
            "node-tainted",
            {},
            [lab("tainted-1")],
            expect("refuse", "tainted-1", ["taint"], holders=["jupyter-alice"]),
        ),
        (
            "node-taint-tolerated",
            {"tolerations": [toleration("dedicated", "Exists")]},
            [lab("tainted-1")],
            expect("colocate", "tainted-1", holders=["jupyter-alice"]),
        ),
        (
            "node-has-no-pod-slot",
            {},
            [lab("tiny-1")],
            expect("refuse", "tiny-1", ["too-many-pods"], holders=["jupyter-alice"]),
        ),
        (
            "another-mounted-volume-bound-elsewhere",
            {"claims": [HOME, "zonal-data"]},
            [
                lab(),
                pvc("zonal-data", modes=[RWX]),
                pv("pv-zonal-data", terms=[term(expr("zone", "In", "b"))]),
            ],
            expect("refuse", "cpu-1", ["volume-node-affinity"], holders=["jupyter-alice"]),
        ),
    ],
)
def test_pinned_pod_is_refused_with_every_reason_it_would_not_fit(
    test_variation_id, pod_kwargs, objects, expect_result
):
    extra_nodes = (
        node("cpu-3", unschedulable=True),
        node("tainted-1", taints=[taint("dedicated", "ml")]),
        node("tiny-1", allocatable={"pods": "1"}),
    )
    the_state = state(*BASE, *extra_nodes, pvc(HOME), *objects)
    decision = decide(new_pod(**pod_kwargs), the_state, Policy())
    assert outcome(decision) == expect_result
    assert decision.verified


def test_gpu_profile_is_refused_when_app_pins_cpu_node():
    app = lab(name="jupyter-alice--pandas-app")
    gpu_lab = new_pod(limits={"nvidia.com/gpu": "1"}, node_selector=GPU)
    decision = decide(gpu_lab, state(*BASE, pvc(HOME), app), Policy())
    assert outcome(decision) == expect(
        "refuse",
        "cpu-1",
        ["insufficient:nvidia.com/gpu", "node-selector"],
        holders=["jupyter-alice--pandas-app"],
    )


# --------------------------------------------------------------------------------------------------
# 6. premium guard


@pytest.mark.parametrize(
    "test_variation_id, premium_node_policy, pod_kwargs, pinned_on, expect_result",
    [
        ("allow", "allow", {}, "gpu-1", expect("colocate", "gpu-1", holders=["jupyter-alice"])),
        (
            "warn",
            "warn",
            {},
            "gpu-1",
            expect("colocate", "gpu-1", warnings=["premium-node"], holders=["jupyter-alice"]),
        ),
        (
            "refuse",
            "refuse",
            {},
            "gpu-1",
            expect("refuse", "gpu-1", ["premium-node"], holders=["jupyter-alice"]),
        ),
        (
            "new-pod-wants-a-gpu-itself",
            "refuse",
            {"limits": {"nvidia.com/gpu": "1"}},
            "gpu-1",
            expect("colocate", "gpu-1", holders=["jupyter-alice"]),
        ),
        (
            "amd-gpu-node",
            "refuse",
            {},
            "amd-1",
            expect("refuse", "amd-1", ["premium-node"], holders=["jupyter-alice"]),
        ),
        (
            "gpu-resource-of-zero",
            "refuse",
            {},
            "gpu-0",
            expect("colocate", "gpu-0", holders=["jupyter-alice"]),
        ),
        ("cpu-node", "refuse", {}, "cpu-1", expect("colocate", "cpu-1", holders=["jupyter-alice"])),
    ],
)
def test_premium_guard_keeps_pods_without_gpu_off_gpu_nodes(
    test_variation_id, premium_node_policy, pod_kwargs, pinned_on, expect_result
):
    nodes = (
        *BASE,
        node("amd-1", allocatable={"amd.com/gpu": "2"}),
        node("gpu-0", allocatable={"nvidia.com/gpu": "0"}),
    )
    the_state = state(*nodes, pvc(HOME), lab(pinned_on))
    policy = Policy(premium_node_policy=premium_node_policy)
    assert outcome(decide(new_pod(**pod_kwargs), the_state, policy)) == expect_result


def test_premium_guard_applies_to_a_node_pinned_by_attachment():
    the_state = state(*BASE, pvc(HOME), volume_attachment(f"pv-{HOME}", "gpu-1"))
    decision = decide(new_pod(), the_state, Policy(premium_node_policy="refuse"))
    assert outcome(decision) == expect("refuse", "gpu-1", ["premium-node"])


# --------------------------------------------------------------------------------------------------
# 5. without Node read access: what the holders' own specs prove


@pytest.mark.parametrize(
    "test_variation_id, holder_kwargs, pod_kwargs, policy, expect_result",
    [
        (
            "holder-proves-label-new-pod-wants-another-value",
            {"node_selector": CPU},
            {"node_selector": GPU},
            Policy(),
            expect("refuse", "cpu-1", ["node-selector"], holders=["jupyter-alice"]),
        ),
        (
            "holder-proves-label-new-pod-wants-the-same",
            {"node_selector": CPU},
            {"node_selector": CPU},
            Policy(),
            expect("colocate", "cpu-1", holders=["jupyter-alice"]),
        ),
        (
            "unknown-label-cannot-refuse",
            {},
            {"node_selector": GPU, "limits": {"nvidia.com/gpu": "1"}},
            Policy(),
            expect("colocate", "cpu-1", holders=["jupyter-alice"]),
        ),
        (
            "holder-proves-label-required-affinity-excludes-it",
            {"node_selector": CPU},
            {"affinity": required_affinity(term(expr("nebari.dev/node-type", "In", "gpu")))},
            Policy(),
            expect("refuse", "cpu-1", ["node-selector"], holders=["jupyter-alice"]),
        ),
        (
            "one-affinity-term-undecided",
            {"node_selector": CPU},
            {
                "affinity": required_affinity(
                    term(expr("nebari.dev/node-type", "In", "gpu")),
                    term(expr("zone", "In", "a")),
                )
            },
            Policy(),
            expect("colocate", "cpu-1", holders=["jupyter-alice"]),
        ),
        (
            "affinity-pinned-to-another-node-by-name",
            {},
            {
                "affinity": required_affinity(
                    term(fields=[{"key": "metadata.name", "operator": "In", "values": ["cpu-2"]}])
                )
            },
            Policy(),
            expect("refuse", "cpu-1", ["node-selector"], holders=["jupyter-alice"]),
        ),
        (
            "resources-cannot-be-judged",
            {},
            {"requests": {"cpu": "500"}},
            Policy(),
            expect("colocate", "cpu-1", holders=["jupyter-alice"]),
        ),
        (
            "premium-inferred-from-holder-requesting-a-gpu",
            {"limits": {"nvidia.com/gpu": "1"}},
            {},
            Policy(),
            expect("colocate", "cpu-1", warnings=["premium-node"], holders=["jupyter-alice"]),
        ),
        (
            "premium-inferred-refused",
            {"limits": {"nvidia.com/gpu": "1"}},
            {},
            Policy(premium_node_policy="refuse"),
            expect("refuse", "cpu-1", ["premium-node"], holders=["jupyter-alice"]),
        ),
        (
            "no-premium-when-holder-needs-no-gpu",
            {},
            {},
            Policy(premium_node_policy="refuse"),
            expect("colocate", "cpu-1", holders=["jupyter-alice"]),
        ),
    ],
)
def test_without_node_access_only_what_holders_prove_can_refuse(
    test_variation_id, holder_kwargs, pod_kwargs, policy, expect_result
):
    # cpu-1 really is a CPU node; the decision may not look at it.
    the_state = state(*BASE, pvc(HOME), lab(**holder_kwargs), node_access=False)
    decision = decide(new_pod(**pod_kwargs), the_state, policy)
    assert outcome(decision) == expect_result
    assert decision.verified is False
    assert decision.notes


@pytest.mark.parametrize(
    "test_variation_id, pv_terms, expect_reasons",
    [
        (
            "pv-excludes-a-proven-label",
            [term(expr("nebari.dev/node-type", "In", "gpu"))],
            ["volume-node-affinity"],
        ),
        ("pv-on-an-unknown-label", [term(expr("zone", "In", "a"))], []),
        (
            "pv-match-fields-are-not-seen",
            [term(fields=[{"key": "metadata.name", "operator": "In", "values": ["cpu-2"]}])],
            [],
        ),
        (
            "pv-unknown-label-beside-match-fields",
            [term(expr("zone", "In", "a"), fields=[name_is("cpu-2")])],
            [],
        ),
    ],
)
def test_without_node_access_a_pv_excluding_a_proven_label_is_refused(
    test_variation_id, pv_terms, expect_reasons
):
    objects = [pvc(HOME), pvc("data", modes=[RWX]), pv("pv-data", terms=pv_terms)]
    the_state = state(*objects, lab(node_selector=CPU), node_access=False)
    decision = decide(new_pod(claims=[HOME, "data"]), the_state, Policy())
    assert sorted(decision.reasons) == expect_reasons
    assert decision.verified is False


def test_a_holder_on_a_deleted_node_is_refused_as_node_not_found_not_as_capacity():
    the_state = state(pvc(HOME), lab("gone-1"))
    decision = decide(new_pod(), the_state, Policy())
    assert outcome(decision) == expect(
        "refuse", "gone-1", reasons=["node-not-found"], holders=["jupyter-alice"]
    )
    assert decision.verified is False
    assert decision.fit is None


def test_without_node_access_a_holders_node_is_not_judged_deleted():
    the_state = state(pvc(HOME), lab("gone-1"), node_access=False)
    decision = decide(new_pod(), the_state, Policy())
    assert outcome(decision) == expect("colocate", "gone-1", holders=["jupyter-alice"])
    assert decision.verified is False


# --------------------------------------------------------------------------------------------------
# 7. safe side


@pytest.mark.parametrize(
    "test_variation_id, pod_kwargs, known_pods, expect_result",
    [
        ("holder-known", {}, [lab()], expect("colocate", "cpu-1", holders=["jupyter-alice"])),
        ("nothing-known", {}, [], expect("colocate")),
        ("holder-in-another-namespace", {}, [lab(namespace="prod")], expect("colocate")),
        ("finished-pod-known", {}, [lab(phase="Failed")], expect("colocate")),
        (
            "holders-on-two-nodes-still-colocate",
            {},
            [lab("cpu-1"), lab("cpu-2", name="jupyter-alice--app")],
            expect("colocate", holders=["jupyter-alice", "jupyter-alice--app"]),
        ),
        ("no-claim-mounted", {"claims": []}, [lab()], expect("skip")),
    ],
)
def test_safe_side_never_skips_a_mounted_claim_and_pins_to_a_known_holder(
    test_variation_id, pod_kwargs, known_pods, expect_result
):
    decision = safe_side(new_pod(**pod_kwargs), known_pods, "API timed out")
    assert outcome(decision) == expect_result
    assert decision.verified is False
    assert decision.notes[0] == "API timed out"


SHARE = "jupyterhub-dev-share"  # Nebari's one claim for every user's home


def bobs(node_name: str = "cpu-1", name: str = "jupyter-bob", **kwargs) -> dict:
    """A server of another user (bob) mounting Nebari's shared claim."""
    kwargs.setdefault("claims", [SHARE])
    kwargs.setdefault("user", "bob")
    return pod(name, node_name=node_name, phase="Running", server="", **kwargs)


@pytest.mark.parametrize(
    "test_variation_id, pod_kwargs, known_pods, known_modes, expect_result, expect_note",
    [
        (
            "rwx-known-is-skipped-although-other-users-hold-it",
            {"claims": [SHARE]},
            [bobs(), bobs("cpu-2", "jupyter-carol", user="carol")],
            {SHARE: [RWX]},
            expect("skip"),
            "claims known to be shared (jupyterhub-dev-share): nothing to co-locate",
        ),
        (
            "rox-known-mounted-read-only-everywhere-is-skipped",
            {"claims": [SHARE], "read_only": True},
            [bobs(read_only=True)],
            {SHARE: [ROX]},
            expect("skip"),
            "claims known to be shared (jupyterhub-dev-share): nothing to co-locate",
        ),
        (
            "rox-known-mounted-read-write-by-a-holder-pins",
            {"claims": [SHARE], "read_only": True},
            [bobs()],
            {SHARE: [ROX]},
            expect("colocate", "cpu-1", holders=["jupyter-bob"]),
            None,
        ),
        (
            "rwo-known-held-by-another-users-server-pins",
            {"claims": [SHARE]},
            [bobs()],
            {SHARE: [RWO]},
            expect("colocate", "cpu-1", holders=["jupyter-bob"]),
            None,
        ),
        (
            "shared-home-known-exclusive-workspace-still-pins",
            {"claims": [SHARE, HOME]},
            [bobs(), lab("cpu-2")],
            {SHARE: [RWX], HOME: [RWO]},
            expect("colocate", "cpu-2", holders=["jupyter-alice"]),
            None,
        ),
        (
            "unknown-held-by-other-users-servers-is-taken-as-shared",
            {"claims": [SHARE]},
            [bobs(), bobs("cpu-2", "jupyter-carol", user="carol")],
            {},
            expect("skip"),
            "access modes of claim jupyterhub-dev-share unknown; 2 server(s) of other users "
            "hold it, so it is taken to be shared: nothing required",
        ),
        (
            "unknown-held-by-other-users-and-own-server-pins-nothing",
            {"claims": [SHARE]},
            [bobs(), lab("cpu-2", claims=[SHARE])],
            {},
            expect("skip"),
            "access modes of claim jupyterhub-dev-share unknown; 1 server(s) of other users "
            "hold it, so it is taken to be shared: nothing required",
        ),
        (
            "unknown-held-by-a-job-pod-is-taken-as-exclusive-without-configuration",
            {},
            [pod("backup-alice", claims=[HOME], node_name="cpu-2", phase="Running")],
            {},
            expect("colocate", "cpu-2", holders=["backup-alice"]),
            "access modes of claim claim-alice unknown: taken to be exclusive",
        ),
    ],
)
def test_safe_side_never_pins_on_a_claim_known_or_taken_to_be_shared(
    test_variation_id, pod_kwargs, known_pods, known_modes, expect_result, expect_note
):
    decision = safe_side(
        new_pod(**pod_kwargs), known_pods, "API timed out", known_modes=known_modes
    )
    assert outcome(decision) == expect_result
    assert decision.verified is False
    assert decision.notes[0] == "API timed out"
    if expect_note is not None:
        assert expect_note in decision.notes


@pytest.mark.parametrize(
    "test_variation_id, claims, known_pods, known_modes, by_config, expect_result, "
    "expect_preferred",
    [
        (
            "unknown-share-held-only-by-the-users-own-app-is-only-preferred",
            [SHARE],
            [lab("cpu-2", name="jupyter-alice--app", claims=[SHARE])],
            {},
            [],
            expect("colocate"),
            True,
        ),
        (
            "unknown-claim-no-one-holds-is-only-preferred",
            [SHARE],
            [],
            {},
            [],
            expect("colocate"),
            True,
        ),
        (
            "unknown-home-the-hub-creates-rwo-pins-to-its-holder",
            [HOME],
            [lab("cpu-2", name="jupyter-alice--app")],
            {},
            [HOME],
            expect("colocate", "cpu-2", holders=["jupyter-alice--app"]),
            False,
        ),
        (
            "unknown-workspace-beside-a-known-exclusive-home-follows-the-home",
            [HOME, "workspace-alice"],
            [lab("cpu-2", name="jupyter-alice--app", claims=[HOME, "workspace-alice"])],
            {HOME: [RWO]},
            [],
            expect("colocate", "cpu-2", holders=["jupyter-alice--app"]),
            False,
        ),
        (
            "known-rwx-share-and-unknown-workspace-is-only-preferred",
            [SHARE, "workspace-alice"],
            [lab("cpu-2", name="jupyter-alice--app", claims=[SHARE, "workspace-alice"])],
            {SHARE: [RWX]},
            [],
            expect("colocate"),
            True,
        ),
    ],
)
def test_safe_side_requires_co_location_only_where_the_storage_is_known_to_need_it(
    test_variation_id, claims, known_pods, known_modes, by_config, expect_result, expect_preferred
):
    decision = safe_side(
        new_pod(claims=claims),
        known_pods,
        "API timed out",
        known_modes=known_modes,
        exclusive_by_config=by_config,
    )
    assert outcome(decision) == expect_result
    assert decision.preferred is expect_preferred
    assert decision.verified is False
    manifest = apply_decision(new_pod(claims=claims), decision, LABEL_KEY, "alice")
    pod_affinity = manifest["spec"].get("affinity", {}).get("podAffinity", {})
    required = pod_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or []
    preferred = pod_affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []
    assert (len(required), len(preferred)) == ((0, 1) if expect_preferred else (1, 0))
    if expect_preferred:
        assert "nodeAffinity" not in manifest["spec"]["affinity"]
        assert "preferred, not required" in "; ".join(decision.notes)


@pytest.mark.parametrize(
    "test_variation_id, known_pods, expect_result",
    [
        (
            "holder-in-the-hub-namespace",
            [lab()],
            expect("colocate", "cpu-1", holders=["jupyter-alice"]),
        ),
        ("holder-in-another-namespace", [lab(namespace="prod")], expect("colocate")),
        (
            "a-job-pod-holding-the-claim",
            [pod("backup-alice", claims=[HOME], node_name="cpu-2", phase="Running")],
            expect("colocate", "cpu-2", holders=["backup-alice"]),
        ),
    ],
)
def test_safe_side_pins_a_manifest_without_namespace_to_a_holder_of_the_hub_namespace(
    test_variation_id, known_pods, expect_result
):
    # KubeSpawner's manifest has no metadata.namespace: the hub's namespace is passed apart.
    manifest = new_pod(namespace=None)
    decision = safe_side(manifest, known_pods, "API timed out", namespace=NAMESPACE)
    assert outcome(decision) == expect_result


def test_an_attached_volume_of_a_shared_claim_pins_nothing():
    objects = [pvc(HOME), pvc("data", modes=[RWX]), volume_attachment("pv-data", "cpu-2")]
    decision = decide(new_pod(claims=[HOME, "data"]), state(*BASE, *objects), Policy())
    assert outcome(decision) == expect("colocate")
