"""The pure parts of `nebari-colocate explain` and `audit` (nebari_colocate.report), and the CLI's
errors before it reaches a cluster."""

from __future__ import annotations

import pytest
import yaml

from nebari_colocate import messages, report
from nebari_colocate.placement import Policy, decide
from nebari_colocate.state import ClusterState
from tests.support.builders import (
    NAMESPACE,
    gpu_node,
    node,
    pod,
    pvc,
    running,
    state,
    volume_attachment,
)

GPU = {"nvidia.com/gpu": "1"}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
USER_TOLERATION = {
    "key": "hub.jupyter.org/dedicated",
    "operator": "Equal",
    "value": "user",
    "effect": "NoSchedule",
}


def labelled_only(obj: dict, label: str) -> dict:
    """``obj`` as an older version left it: the username label, no annotations."""
    obj = dict(obj)
    meta = dict(obj["metadata"])
    meta.pop("annotations", None)
    meta["labels"] = {"hub.jupyter.org/username": label}
    obj["metadata"] = meta
    return obj


def snapshot(*objects, nodes=True, attachments=True) -> ClusterState:
    """The state the CLI reads: the namespace's pods and claims, the Nodes and VolumeAttachments
    given (``False``: not readable)."""
    the_state = state(*objects, node_access=nodes)
    return the_state if attachments else the_state.replace(volume_attachments=None)


# --------------------------------------------------------------------------------------------------
# who owns what


@pytest.mark.parametrize(
    "test_variation_id, obj, expect_owned",
    [
        ("annotation names the user", pod(user="alice"), True),
        ("annotation names another user", pod(user="bob"), False),
        # the annotation wins over a label that happens to match
        (
            "annotation of another user, matching label",
            {**pod(user="bob"), "metadata": {**pod(user="bob")["metadata"], "labels": {}}},
            False,
        ),
        ("no annotation, label is the user's slug", labelled_only(pod(), "alice-x"), True),
        ("no annotation, another label", labelled_only(pod(), "bob"), False),
        ("neither", pod(), False),
        (
            "a claim annotated for the user",
            {
                **pvc("claim-a"),
                "metadata": {
                    "name": "claim-a",
                    "annotations": {"hub.jupyter.org/username": "alice"},
                },
            },
            True,
        ),
    ],
)
def test_owned_by_reads_the_annotation_then_the_label(test_variation_id, obj, expect_owned):
    assert report.owned_by(obj, "alice", "alice-x") is expect_owned


@pytest.mark.parametrize(
    "test_variation_id, obj, expect_server",
    [
        ("named server", pod(user="alice", server="app"), "app"),
        ("default server", pod(user="alice"), ""),
        (
            "default server without the servername annotation (as KubeSpawner writes it)",
            {"metadata": {"annotations": {"hub.jupyter.org/username": "alice"}}},
            "",
        ),
        (
            "labels only",
            {"metadata": {"labels": {"hub.jupyter.org/servername": "app"}}},
            "app",
        ),
    ],
)
def test_pod_server_is_the_annotation_else_the_label(test_variation_id, obj, expect_server):
    assert report.pod_server(obj) == expect_server


def test_user_claims_are_the_pods_claims_and_the_claims_made_for_the_user():
    alice = [running("jupyter-alice", "cpu-1", user="alice", claims=["claim-alice", "shared"])]
    pvcs = {
        "claim-alice--app": {
            **pvc("claim-alice--app"),
            "metadata": {
                "name": "claim-alice--app",
                "annotations": {"hub.jupyter.org/username": "alice"},
            },
        },
        "claim-bob": {
            **pvc("claim-bob"),
            "metadata": {"name": "claim-bob", "annotations": {"hub.jupyter.org/username": "bob"}},
        },
    }
    assert report.user_claims(alice, pvcs, "alice", "alice") == [
        "claim-alice",
        "claim-alice--app",
        "shared",
    ]


def test_the_minimal_pod_keeps_only_tolerations_every_server_has():
    own = [
        running(
            "jupyter-alice", "gpu-1", user="alice", tolerations=[USER_TOLERATION, GPU_TOLERATION]
        ),
        running(
            "jupyter-alice--app", "gpu-1", user="alice", server="app", tolerations=[USER_TOLERATION]
        ),
    ]
    manifest = report.minimal_pod("alice", "alice", "lab2", NAMESPACE, ["claim-alice"], own)
    assert manifest["spec"]["tolerations"] == [USER_TOLERATION]
    assert manifest["metadata"]["name"] == report.EXPLAIN_POD_NAME
    assert manifest["metadata"]["annotations"] == {
        "hub.jupyter.org/username": "alice",
        "hub.jupyter.org/servername": "lab2",
    }
    assert manifest["spec"]["volumes"] == [
        {"name": "volume-0", "persistentVolumeClaim": {"claimName": "claim-alice"}}
    ]
    assert "resources" not in manifest["spec"]["containers"][0]


def test_the_minimal_pod_of_a_running_server_replaces_its_pod():
    own = [running("jupyter-alice--app", "cpu-1", user="alice", server="app")]
    manifest = report.minimal_pod("alice", "alice", "app", NAMESPACE, [], own)
    assert manifest["metadata"]["name"] == "jupyter-alice--app"


# --------------------------------------------------------------------------------------------------
# nodes


def test_headroom_counts_bound_unfinished_pods_of_the_node():
    cpu = node("cpu-1", allocatable={"hugepages-2Mi": "0", "ephemeral-storage": "100Gi"})
    pods = [
        running("a", "cpu-1", requests={"cpu": "1500m", "memory": "2Gi"}),
        pod("done", node_name="cpu-1", phase="Succeeded", requests={"cpu": "2"}),
        pod("going", node_name="cpu-1", deleting=True, requests={"cpu": "500m"}),
        running("elsewhere", "cpu-2", requests={"cpu": "1"}),
    ]
    assert report.node_headroom(cpu, pods) == {
        "cpu": {"allocatable": 4000, "requested": 2000, "free": 2000},
        "memory": {"allocatable": 16 * 2**30, "requested": 2 * 2**30, "free": 14 * 2**30},
        "ephemeral-storage": {
            "allocatable": 100 * 2**30,
            "requested": 0,
            "free": 100 * 2**30,
        },
        "pods": {"allocatable": 110, "requested": 2, "free": 108},
    }


@pytest.mark.parametrize(
    "resource, units, expect",
    [
        ("cpu", 4000, "4"),
        ("cpu", 1500, "1.5"),
        ("cpu", 250, "0.25"),
        ("memory", 2 * 2**30, "2 GiB"),
        ("memory", 1536 * 2**20, "1.5 GiB"),
        ("pods", 110, "110"),
        ("nvidia.com/gpu", 2, "2"),
    ],
)
def test_quantities_read_as_a_person_reads_them(resource, units, expect):
    assert messages.quantity(resource, units) == expect


def test_table_aligns_columns_two_spaces_apart():
    assert messages.table(("A", "LONGER"), [("xyz", "1"), ("", "22")]) == [
        "  A    LONGER",
        "  xyz  1",
        "       22",
    ]


# --------------------------------------------------------------------------------------------------
# explain


def test_explain_report_of_a_refused_gpu_lab_names_only_the_users_own_servers():
    cpu = node("cpu-1", labels={"node-type": "cpu"})
    app = running(
        "jupyter-alice--app",
        "cpu-1",
        user="alice",
        server="app",
        claims=["claim-alice"],
        requests={"cpu": "1"},
    )
    other = running("jupyter-bob", "cpu-1", user="bob", claims=["claim-bob"], requests={"cpu": "1"})
    objects = [cpu, app, other, pvc("claim-alice"), pvc("claim-bob")]
    objects.append(volume_attachment("pv-claim-alice", "cpu-1"))
    lab = pod(
        "jupyter-alice",
        user="alice",
        claims=["claim-alice"],
        node_selector={"node-type": "gpu"},
        limits=GPU,
    )
    policy = Policy()
    decision = decide(lab, state(*objects), policy)
    snap = snapshot(*objects)
    result = report.explain_report(
        "alice",
        "alice",
        snap,
        server="",
        pod=lab,
        pod_source="lab.yaml",
        decision=decision,
        policy=policy,
    )
    assert [s["server"] for s in result["servers"]] == ["app"]
    assert result["claims"] == [
        {
            "claim": "claim-alice",
            "exists": True,
            "access_modes": ["ReadWriteOnce"],
            "exclusive": True,
            "storage_class": None,
            "volume": "pv-claim-alice",
            "in_use_on": ["cpu-1"],
            "attached_on": ["cpu-1"],
        }
    ]
    assert result["nodes"][0]["headroom"]["cpu"] == {
        "allocatable": 4000,
        "requested": 2000,
        "free": 2000,
    }
    assert result["new_server"]["verdict"] == "refuse"
    assert result["new_server"]["replaces"] is None
    text = messages.render_explain(result)
    assert "Starting the default server (the pod in lab.yaml)" in text
    assert "  verdict: refuse on node cpu-1: insufficient:nvidia.com/gpu, node-selector" in text
    assert "'app' uses your home folder" in text
    assert "bob" not in text.split("Starting")[1]


def test_explain_report_without_node_access_says_the_headroom_is_unknown():
    app = running("jupyter-alice--app", "cpu-1", user="alice", server="app", claims=["claim-alice"])
    objects = [app, pvc("claim-alice")]
    policy = Policy()
    minimal = report.minimal_pod("alice", "alice", "", NAMESPACE, ["claim-alice"], [app])
    decision = decide(minimal, state(*objects, node_access=False), policy)
    snap = snapshot(*objects, nodes=False, attachments=False)
    result = report.explain_report(
        "alice",
        "alice",
        snap,
        server="",
        pod=minimal,
        pod_source="minimal",
        decision=decision,
        policy=policy,
    )
    assert result["nodes"] == [
        {
            "name": "cpu-1",
            "readable": False,
            "found": None,
            "cordoned": None,
            "premium": None,
            "headroom": None,
            "pods_counted": None,
        }
    ]
    text = messages.render_explain(result)
    assert "headroom unknown: nodes are not readable with these credentials" in text
    assert "verdict: colocate on node cpu-1 (unverified)" in text
    assert "claim-alice  ReadWriteOnce  yes        pv-claim-alice  cpu-1      ?" in text


# --------------------------------------------------------------------------------------------------
# audit


def audit(*objects, nodes=True, attachments=True, mode=None) -> dict:
    policy = Policy(storage_access_mode=mode or "ReadWriteOnce")
    snap = snapshot(*objects, nodes=nodes, attachments=attachments)
    return report.audit_report(snap, policy, deployment_mode_given=mode is not None)


def test_audit_groups_pinned_users_by_their_exclusive_claims():
    result = audit(
        pvc("claim-alice"),
        pvc("claim-carol", modes=["ReadWriteMany"]),
        running("jupyter-alice", "cpu-1", user="alice", claims=["claim-alice"]),
        running("jupyter-alice--app", "cpu-1", user="alice", server="app", claims=["claim-alice"]),
        running("jupyter-carol", "cpu-2", user="carol", claims=["claim-carol"]),
        pod("jupyter-alice--pending", user="alice", server="pending", claims=["claim-alice"]),
        pod("jupyter-dan", node_name="cpu-1", phase="Failed", user="dan", claims=["claim-dan"]),
    )
    assert result["pinned_users"] == [
        {
            "user": "alice",
            "nodes": ["cpu-1"],
            "servers": [
                {"server": "", "pod": "jupyter-alice", "node": "cpu-1"},
                {"server": "app", "pod": "jupyter-alice--app", "node": "cpu-1"},
            ],
            "claims": ["claim-alice"],
        }
    ]


@pytest.mark.parametrize(
    "test_variation_id, objects, nodes, expect_pods, expect_inferred",
    [
        (
            "a CPU app alone on a GPU node",
            [gpu_node("gpu-1"), running("app", "gpu-1", user="bob", server="app")],
            True,
            ["app"],
            False,
        ),
        (
            "a GPU lab is not stranded",
            [gpu_node("gpu-1"), running("lab", "gpu-1", user="bob", limits=GPU)],
            True,
            [],
            False,
        ),
        (
            "pods that are not JupyterHub servers are left alone",
            [gpu_node("gpu-1"), running("dcgm-exporter", "gpu-1")],
            True,
            [],
            False,
        ),
        (
            "a CPU node has no stranded pods",
            [node("cpu-1"), running("app", "cpu-1", user="bob", server="app")],
            True,
            [],
            False,
        ),
        (
            "without node access a GPU pod there proves the node premium",
            [
                running("lab", "gpu-1", user="bob", limits=GPU),
                running("app", "gpu-1", user="bob", server="app"),
            ],
            False,
            ["app"],
            True,
        ),
        (
            "without node access a pod left alone is not found",
            [gpu_node("gpu-1"), running("app", "gpu-1", user="bob", server="app")],
            False,
            [],
            True,
        ),
    ],
)
def test_audit_finds_servers_stranded_on_premium_nodes(
    test_variation_id, objects, nodes, expect_pods, expect_inferred
):
    stranded = audit(*objects, nodes=nodes)["stranded_pods"]
    assert [s["pod"] for s in stranded] == expect_pods
    assert all(s["inferred"] is expect_inferred for s in stranded)


def test_audit_lists_rwo_user_claims_only_when_told_the_deployment_is_readwritemany():
    objects = [
        pvc("claim-alice"),
        pvc("claim-carol", modes=["ReadWriteMany"]),
        pvc("hub-db-dir"),
        running("jupyter-alice", "cpu-1", user="alice", claims=["claim-alice"]),
        running("jupyter-carol", "cpu-1", user="carol", claims=["claim-carol"]),
    ]
    assert audit(*objects)["rwo_claims"] is None
    assert audit(*objects, mode="ReadWriteOnce")["rwo_claims"] is None
    result = audit(*objects, mode="ReadWriteMany")
    assert result["rwo_claims_next"] == "nebari-colocate migrate plan"
    assert "nebari-colocate migrate plan" in messages.render_audit(result)
    (claim,) = result["rwo_claims"]
    assert claim == {
        "claim": "claim-alice",
        "users": ["alice"],
        "access_modes": ["ReadWriteOnce"],
        "storage_class": None,
        "in_use_by": ["jupyter-alice"],
        "nodes": ["cpu-1"],
    }


@pytest.mark.parametrize(
    "test_variation_id, objects, attachments, expect",
    [
        (
            "pods on two nodes",
            [
                running("a", "cpu-1", user="dave", claims=["claim-dave"]),
                running("b", "cpu-2", user="dave", server="b", claims=["claim-dave"]),
            ],
            True,
            [("claim-dave", ["cpu-1", "cpu-2"], {"cpu-1": ["a"], "cpu-2": ["b"]}, [])],
        ),
        (
            "a pod on one node, the volume attached to another",
            [
                running("a", "cpu-2", user="dave", claims=["claim-dave"]),
                volume_attachment("pv-claim-dave", "cpu-1"),
            ],
            True,
            [("claim-dave", ["cpu-1", "cpu-2"], {"cpu-2": ["a"]}, ["cpu-1"])],
        ),
        (
            "a detached attachment does not count",
            [
                running("a", "cpu-2", user="dave", claims=["claim-dave"]),
                volume_attachment("pv-claim-dave", "cpu-1", attached=False),
            ],
            True,
            [],
        ),
        (
            "attachments not readable",
            [
                running("a", "cpu-1", user="dave", claims=["claim-dave"]),
                running("b", "cpu-2", user="dave", server="b", claims=["claim-dave"]),
            ],
            False,
            [("claim-dave", ["cpu-1", "cpu-2"], {"cpu-1": ["a"], "cpu-2": ["b"]}, None)],
        ),
        (
            "a ReadWriteMany claim on two nodes is fine",
            [
                pvc("claim-dave", modes=["ReadWriteMany"]),
                running("a", "cpu-1", user="dave", claims=["claim-dave"]),
                running("b", "cpu-2", user="dave", server="b", claims=["claim-dave"]),
            ],
            True,
            [],
        ),
    ],
)
def test_audit_finds_exclusive_claims_split_over_nodes(
    test_variation_id, objects, attachments, expect
):
    objects = (
        [pvc("claim-dave"), *objects] if objects[0]["kind"] != "PersistentVolumeClaim" else objects
    )
    splits = audit(*objects, attachments=attachments)["split_attachments"]
    assert [(s["claim"], s["nodes"], s["pods"], s["attached_on"]) for s in splits] == expect


def test_audit_text_has_a_section_per_finding():
    text = messages.render_audit(
        audit(
            gpu_node("gpu-1"),
            pvc("claim-bob"),
            running("jupyter-bob--dash", "gpu-1", user="bob", server="dash", claims=["claim-bob"]),
        )
    )
    assert text.splitlines() == [
        "Audit of namespace dev",
        "",
        "Users pinned to a node by exclusive (ReadWriteOnce) claims: 1",
        "  USER  NODE   SERVERS  CLAIMS",
        "  bob   gpu-1  dash     claim-bob",
        "",
        "Servers on premium nodes that request no premium resource: 1",
        "  USER  SERVER  POD                NODE   NODE OFFERS       PREMIUM PODS THERE",
        "  bob   dash    jupyter-bob--dash  gpu-1  nvidia.com/gpu=1  none: this pod alone keeps "
        "the node",
        "",
        "ReadWriteOnce claims in a ReadWriteMany deployment: not checked (pass "
        "--storage-access-mode ReadWriteMany if the hub creates ReadWriteMany claims)",
        "",
        "Exclusive claims in use on more than one node: 0",
    ]


# --------------------------------------------------------------------------------------------------
# examples/z2jh-values.yaml


def test_the_z2jh_values_example_configures_the_hub(monkeypatch):
    """Its hub.extraConfig, run as the chart runs it (after jupyterhub_config.py set
    storage_access_modes from singleuser.storage.dynamic.storageAccessModes)."""
    import sys
    import types
    from pathlib import Path

    from traitlets.config import Config

    values = yaml.safe_load(
        (Path(__file__).resolve().parents[2] / "examples" / "z2jh-values.yaml").read_text()
    )

    def get_config(key, default=None):
        value = values
        for level in key.split("."):
            if not isinstance(value, dict) or level not in value:
                return default
            value = value[level]
        return value

    monkeypatch.setitem(sys.modules, "z2jh", types.SimpleNamespace(get_config=get_config))
    c = Config()
    c.KubeSpawner.storage_access_modes = get_config("singleuser.storage.dynamic.storageAccessModes")
    for _, snippet in sorted(get_config("hub.extraConfig").items()):
        exec(snippet, {"c": c})
    from nebari_colocate import ColocatingKubeSpawner

    assert c.JupyterHub.spawner_class is ColocatingKubeSpawner
    assert c.ColocatingKubeSpawner.storage_access_mode == "ReadWriteOnce"
    assert c.ColocatingKubeSpawner.premium_node_policy == "warn"
    # the chart's limit stays (refusals do not count); one home per user
    assert get_config("hub.consecutiveFailureLimit") is None
    assert get_config("singleuser.storage.dynamic.pvcNameTemplate") == "claim-{username}"
