"""The pure parts of the live view: what it keeps of a pod (nebari_colocate.slim), and the
indexes the watches keep per event (nebari_colocate.informer).

(The watches themselves run against the real kube-apiserver in tests/cluster/test_view.py.)
"""

from __future__ import annotations

import pytest

from nebari_colocate import fit
from nebari_colocate.informer import Collection, Index, claim_keys, node_keys
from nebari_colocate.placement import Policy, decide
from nebari_colocate.slim import slim_pod
from tests.support.builders import NAMESPACE, container, node, pod, pvc, sidecar, state

HOME = "claim-alice"


def full_pod(**kwargs) -> dict:
    """A pod as the API serves it, with the parts no decision reads (env, probes, status)."""
    p = pod(
        "jupyter-alice",
        user="alice",
        claims=[HOME],
        node_name="cpu-1",
        phase="Running",
        requests={"cpu": "1", "memory": "1Gi"},
        init_containers=[
            sidecar(requests={"cpu": "250m"}),
            container("init", requests={"cpu": "2"}),
        ],
        overhead={"cpu": "100m"},
        tolerations=[{"key": "gpu", "operator": "Exists"}],
        node_selector={"node-type": "cpu"},
        **kwargs,
    )
    p["metadata"]["managedFields"] = [{"manager": "kubespawner"}] * 3
    p["metadata"]["resourceVersion"] = "42"
    p["spec"]["containers"][0]["env"] = [{"name": "JUPYTERHUB_API_TOKEN", "value": "x" * 64}]
    p["spec"]["containers"][0]["livenessProbe"] = {"httpGet": {"path": "/"}}
    p["spec"]["volumes"].append({"name": "tmp", "emptyDir": {}})
    p["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    return p


def test_the_slim_pod_keeps_what_decisions_read_and_drops_the_rest():
    full = full_pod()
    slim = slim_pod(full)
    assert fit.pod_requests(slim) == fit.pod_requests(full)
    assert slim["metadata"]["annotations"] == full["metadata"]["annotations"]
    assert slim["metadata"]["labels"] == full["metadata"]["labels"]
    assert slim["metadata"]["resourceVersion"] == "42"
    assert slim["spec"]["nodeName"] == "cpu-1"
    assert slim["spec"]["tolerations"] == full["spec"]["tolerations"]
    assert slim["spec"]["nodeSelector"] == {"node-type": "cpu"}
    assert slim["status"] == {"phase": "Running"}
    assert [v["name"] for v in slim["spec"]["volumes"]] == ["v0"]  # claims only
    assert "managedFields" not in slim["metadata"]
    assert "env" not in slim["spec"]["containers"][0]
    assert len(str(slim)) < len(str(full))


@pytest.mark.parametrize("phase", ["Running", "Succeeded", "Pending"])
def test_decisions_on_slim_pods_equal_decisions_on_full_pods(phase):
    holder = full_pod(deleting=phase == "Pending")
    holder["status"]["phase"] = phase
    new = pod(
        "jupyter-alice--app", user="alice", server="app", claims=[HOME], requests={"cpu": "1"}
    )
    objects = [node("cpu-1", labels={"node-type": "cpu"}, allocatable={"cpu": "2"}), pvc(HOME)]
    full = decide(new, state(*objects, holder), Policy())
    slim = decide(new, state(*objects, slim_pod(holder)), Policy())
    assert (slim.verdict, slim.node, slim.reasons, slim.holders) == (
        full.verdict,
        full.node,
        full.reasons,
        full.holders,
    )


def test_indexes_follow_added_modified_and_deleted_pods():
    by_claim, by_node = Index(claim_keys), Index(node_keys)
    collection = Collection(
        "pods",
        method=None,
        transform=slim_pod,
        on_change=lambda old, new: (by_claim.change(old, new), by_node.change(old, new)),
    )
    pending = pod("backup", claims=[HOME])
    collection._event({"type": "ADDED", "object": pending})
    assert [p["metadata"]["name"] for p in by_claim.get(f"{NAMESPACE}/{HOME}")] == ["backup"]
    assert by_node.get("cpu-1") == []

    bound = pod("backup", claims=[HOME], node_name="cpu-1", phase="Running")
    bound["metadata"]["resourceVersion"] = "7"
    collection._event({"type": "MODIFIED", "object": bound})
    assert [p["metadata"]["name"] for p in by_node.get("cpu-1")] == ["backup"]
    assert len(by_claim.get(f"{NAMESPACE}/{HOME}")) == 1
    assert collection.resource_version == "7"

    collection._event({"type": "DELETED", "object": bound})
    assert by_claim.get(f"{NAMESPACE}/{HOME}") == [] and by_node.get("cpu-1") == []
    assert by_claim.entries == {} and by_node.entries == {}


def test_a_bookmark_moves_the_resource_version_only():
    collection = Collection("pods", method=None)
    collection._event({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "99"}}})
    assert collection.items == {} and collection.resource_version == "99"


def test_an_error_event_raises_so_the_collection_lists_again():
    collection = Collection("pods", method=None)
    with pytest.raises(Exception, match="410"):
        collection._event(
            {"type": "ERROR", "object": {"code": 410, "reason": "Expired", "message": "too old"}}
        )


def test_a_relist_drops_what_disappeared_while_the_watch_was_down():
    by_claim = Index(claim_keys)
    collection = Collection("pods", method=None, on_change=by_claim.change)
    collection._replace_all([pod("a", claims=[HOME]), pod("b", claims=[HOME])])
    collection._replace_all([pod("b", claims=[HOME])])
    assert [p["metadata"]["name"] for p in by_claim.get(f"{NAMESPACE}/{HOME}")] == ["b"]
