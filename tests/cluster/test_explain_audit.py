"""`nebari-colocate explain` and `audit` against the real control plane.

The CLI runs in-process (``cli.main`` in a worker thread: it runs its own event loop) with the
test's kubeconfig; the objects are made with the ``kube`` fixture.  Pods are bound by setting
``spec.nodeName`` so each test decides exactly where they sit (kwok runs them once the attach/detach
controller attached their volumes).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import shutil
from pathlib import Path

import yaml

from nebari_colocate import cli, kubeapi
from tests.support import builders, helpers
from tests.support.waiting import wait_until

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
Z2JH_HUB_RULES = [
    {
        "apiGroups": [""],
        "resources": ["pods", "persistentvolumeclaims", "secrets", "services"],
        "verbs": ["get", "watch", "list", "create", "delete"],
    },
    {"apiGroups": [""], "resources": ["events"], "verbs": ["get", "watch", "list"]},
]


async def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    """``main(argv)`` -> (exit status, stdout, stderr)."""
    try:
        status = await asyncio.to_thread(cli.main, list(argv))
    except SystemExit as exc:
        status = exc.code
    out, err = capsys.readouterr()
    return status, out, err


async def run_json(capsys, *argv: str) -> dict:
    status, out, err = await run_cli(capsys, *argv, "--json")
    assert (status, err) == (0, ""), err
    return json.loads(out)


def user_pod_manifest(
    name: str,
    user: str,
    server: str = "",
    *,
    node: str | None,
    claims=(),
    namespace: str | None = None,
    **kwargs,
) -> dict:
    """A pod as KubeSpawner labels and annotates it (no servername annotation for the default
    server), bound to ``node``."""
    annotations = {"hub.jupyter.org/username": user}
    if server:
        annotations["hub.jupyter.org/servername"] = server
    return builders.kube_pod(
        name,
        namespace=namespace or None,
        node_name=node,
        claims=claims,
        labels={
            "component": "singleuser-server",
            "hub.jupyter.org/username": user,
            "hub.jupyter.org/servername": server,
        },
        annotations=annotations,
        **kwargs,
    )


async def create_user_pod(kube, name: str, user: str, server: str = "", **kwargs) -> dict:
    """Create the pod and wait until it runs (or, ``running=False``, only until it exists)."""
    running = kwargs.pop("running", True)
    manifest = user_pod_manifest(name, user, server, **kwargs)
    pod = await kube.core.create_namespaced_pod(kube.namespace, manifest)
    return await kube.wait_for_running(name) if running else pod


async def wait_for_attachment(kube, pv_name: str, node: str) -> None:
    """Wait until the attach/detach controller attached the PV to the node."""

    async def attached() -> set[str]:
        return {
            va["spec"]["nodeName"]
            for va in await kube.volume_attachments(pv_name)
            if (va.get("status") or {}).get("attached")
        }

    await wait_until(
        attached,
        until=lambda nodes: node in nodes,
        timeout=30,
        what=f"{pv_name} attached to {node}",
        interval=0.1,
    )


async def gpu_lab_blocked(kube) -> str:
    """Failure mode 1: alice's pandas-app holds her volumes on cpu-1; returns the PV of her home."""
    await kube.create_node("cpu-1", labels={"node-type": "cpu"}, cpu="4", memory="16Gi")
    await kube.create_node(
        "gpu-1",
        labels={"node-type": "gpu"},
        taints=[GPU_TAINT],
        cpu="8",
        extra={"nvidia.com/gpu": "1"},
    )
    _, pv = await kube.create_bound_claim("claim-alice")
    await kube.create_bound_claim("nebi-workspaces-alice")
    await create_user_pod(
        kube,
        "jupyter-alice--pandas-app",
        "alice",
        "pandas-app",
        node="cpu-1",
        claims=["claim-alice", "nebi-workspaces-alice"],
        node_selector={"node-type": "cpu"},
        requests={"cpu": "1", "memory": "2Gi"},
    )
    await kube.create_bound_claim("claim-bob")
    await create_user_pod(
        kube, "jupyter-bob", "bob", node="cpu-1", claims=["claim-bob"], requests={"cpu": "1"}
    )
    await wait_for_attachment(kube, pv["metadata"]["name"], "cpu-1")  # the app's, by the controller
    return pv["metadata"]["name"]


def gpu_lab_pod(path: Path, namespace: str) -> str:
    """The GPU profile's pod manifest alice would get (as examples/scenarios/gpu-lab-blocked)."""
    pod = user_pod_manifest(
        "jupyter-alice",
        "alice",
        node=None,
        namespace=namespace,
        claims=["claim-alice", "nebi-workspaces-alice"],
        node_selector={"node-type": "gpu"},
        tolerations=[GPU_TOLERATION],
        requests={"cpu": "1", "memory": "2Gi"},
        limits={"memory": "4Gi", "nvidia.com/gpu": "1"},
    )
    path.write_text(yaml.safe_dump(pod))
    return str(path)


async def other_namespace_pod(kube, node: str, cpu: str) -> str:
    """A pod of another namespace on ``node`` (it counts toward the node's requests)."""
    namespace = f"{kube.namespace}-other"
    await kube.core.create_namespace({"metadata": {"name": namespace}})
    manifest = builders.kube_pod("noisy-neighbour", node_name=node, requests={"cpu": cpu})
    await kube.core.create_namespaced_pod(namespace, manifest)
    return namespace


async def remove_namespace(kube, namespace: str) -> None:
    await helpers.cleanup(kube.api_client, namespace)
    await helpers.delete_namespace(kube.api_client, namespace)


async def grant_z2jh_hub_role(kube, username: str) -> None:
    await kube.rbac.create_namespaced_role(
        kube.namespace, {"metadata": {"name": "hub"}, "rules": Z2JH_HUB_RULES}
    )
    await kube.rbac.create_namespaced_role_binding(
        kube.namespace,
        {
            "metadata": {"name": "hub"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "hub"},
            "subjects": [
                {"kind": "User", "name": username, "apiGroup": "rbac.authorization.k8s.io"}
            ],
        },
    )


async def grant_example_cluster_role(kube, username: str) -> list[tuple[str, str]]:
    """Apply examples/rbac.yaml, bound to ``username``; returns (kind, name) to delete."""
    documents = list(yaml.safe_load_all((EXAMPLES / "rbac.yaml").read_text()))
    role = next(d for d in documents if d["kind"] == "ClusterRole")
    binding = next(d for d in documents if d["kind"] == "ClusterRoleBinding")
    name = f"{role['metadata']['name']}-{kube.namespace}"
    role["metadata"]["name"] = name
    binding["metadata"]["name"] = name
    binding["roleRef"]["name"] = name
    binding["subjects"] = [
        {"kind": "User", "name": username, "apiGroup": "rbac.authorization.k8s.io"}
    ]
    await kube.rbac.create_cluster_role(role)
    await kube.rbac.create_cluster_role_binding(binding)
    return [("ClusterRoleBinding", name), ("ClusterRole", name)]


async def delete_cluster_rbac(kube, objects) -> None:
    for kind, name in objects:
        if kind == "ClusterRole":
            await kube.rbac.delete_cluster_role(name)
        else:
            await kube.rbac.delete_cluster_role_binding(name)


# --------------------------------------------------------------------------------------------------
# explain


async def test_explain_shows_servers_claims_and_the_pinned_nodes_headroom(kube, capsys, tmp_path):
    await gpu_lab_blocked(kube)
    other = await other_namespace_pod(kube, "cpu-1", cpu="500m")
    try:
        args = ["--namespace", kube.namespace, "--kubeconfig", kube.kubeconfig]
        status, out, err = await run_cli(capsys, "explain", "alice", *args)
        report = await run_json(capsys, "explain", "alice", *args)
        gpu = await run_json(
            capsys, "explain", "alice", *args, "--pod", gpu_lab_pod(tmp_path / "gpu.yaml", "x")
        )
    finally:
        await remove_namespace(kube, other)
    print(out)
    assert (status, err) == (0, "")
    assert f"User alice in namespace {kube.namespace}" in out
    assert "pandas-app  jupyter-alice--pandas-app  cpu-1  Running" in out
    assert "claim-alice            ReadWriteOnce  yes" in out
    assert "Node cpu-1 (pinned: the exclusive claims are in use there)" in out
    # 1 (alice) + 1 (bob) + 0.5 (another namespace) of 4 CPUs; 3 pods
    assert "cpu       4            2.5 (62%)    1.5" in out
    assert "pods      110          3 (3%)       107" in out
    assert "verdict: colocate on node cpu-1" in out
    assert "bob" not in out.split("Starting")[1]  # another user's server is never named there

    assert report["pinned_node"] == "cpu-1"
    assert report["pinned_by"] == "holders"
    assert [s["server"] for s in report["servers"]] == ["pandas-app"]
    claims = {c["claim"]: c for c in report["claims"]}
    assert claims["claim-alice"]["access_modes"] == ["ReadWriteOnce"]
    assert claims["claim-alice"]["in_use_on"] == ["cpu-1"]
    assert claims["claim-alice"]["attached_on"] == ["cpu-1"]
    (node,) = report["nodes"]
    assert node["headroom"]["cpu"] == {"allocatable": 4000, "requested": 2500, "free": 1500}
    assert node["headroom"]["memory"]["requested"] == 2 * 2**30
    assert node["pods_counted"] == "all namespaces"
    assert report["new_server"]["verdict"] == "colocate"
    assert report["new_server"]["node"] == "cpu-1"
    assert report["new_server"]["pod"] == "minimal"
    assert report["notes"] == []

    assert gpu["new_server"]["verdict"] == "refuse"
    assert gpu["new_server"]["reasons"] == ["insufficient:nvidia.com/gpu", "node-selector"]
    assert gpu["new_server"]["holders"] == ["jupyter-alice--pandas-app"]
    assert "'pandas-app' uses your home folder" in gpu["new_server"]["headline"]
    assert gpu["new_server"]["message"].startswith(gpu["new_server"]["headline"] + " Details: ")


async def test_explain_of_a_user_with_nothing_running_is_not_pinned(kube, capsys):
    await kube.create_node("cpu-1")
    await kube.create_bound_claim("claim-carol")
    pvc = {"metadata": {"annotations": {"hub.jupyter.org/username": "carol"}}}
    await kube.core.patch_namespaced_persistent_volume_claim("claim-carol", kube.namespace, pvc)
    args = ["--namespace", kube.namespace, "--kubeconfig", kube.kubeconfig]
    status, out, _ = await run_cli(capsys, "explain", "carol", *args)
    report = await run_json(capsys, "explain", "carol", *args, "--server", "app")
    assert status == 0
    assert "none running" in out
    assert "The server starts on any node" in out
    assert [c["claim"] for c in report["claims"]] == ["claim-carol"]
    assert report["nodes"] == []
    assert (report["new_server"]["verdict"], report["new_server"]["node"]) == ("colocate", None)
    assert report["new_server"]["server"] == "app"


async def test_explain_with_only_the_z2jh_hub_role_shows_no_headroom_and_infers_the_fit(
    kube, capsys, tmp_path
):
    await gpu_lab_blocked(kube)
    await grant_z2jh_hub_role(kube, "hub")
    args = ["--namespace", kube.namespace, "--kubeconfig", kube.user_kubeconfig("hub")]
    status, out, err = await run_cli(capsys, "explain", "alice", *args)
    gpu = await run_json(
        capsys, "explain", "alice", *args, "--pod", gpu_lab_pod(tmp_path / "gpu.yaml", "x")
    )
    print(out)
    assert (status, err) == (0, "")
    assert "headroom unknown: nodes are not readable with these credentials" in out
    assert "cannot get nodes (403 Forbidden)" in out
    assert "examples/rbac.yaml grants it" in out
    assert "cannot list volumeattachments (403 Forbidden)" in out
    assert "verdict: colocate on node cpu-1 (unverified)" in out
    # pandas-app runs with nodeSelector node-type=cpu: cpu-1 is proven not a GPU-type node
    assert gpu["new_server"]["verdict"] == "refuse"
    assert gpu["new_server"]["reasons"] == ["node-selector"]
    assert gpu["new_server"]["verified"] is False
    assert gpu["nodes"][0]["headroom"] is None


async def test_explain_with_the_example_cluster_role_counts_every_namespace(kube, capsys):
    await gpu_lab_blocked(kube)
    other = await other_namespace_pod(kube, "cpu-1", cpu="500m")
    await grant_z2jh_hub_role(kube, "hub")
    rbac = await grant_example_cluster_role(kube, "hub")
    try:
        args = ["--namespace", kube.namespace, "--kubeconfig", kube.user_kubeconfig("hub")]
        report = await run_json(capsys, "explain", "alice", *args)
    finally:
        await delete_cluster_rbac(kube, rbac)
        await remove_namespace(kube, other)
    assert report["notes"] == []
    (node,) = report["nodes"]
    assert node["headroom"]["cpu"]["requested"] == 2500
    assert node["pods_counted"] == "all namespaces"
    assert report["new_server"]["verified"] is True


async def test_explain_with_node_access_but_no_cluster_wide_pod_list_counts_this_namespace(
    kube, capsys
):
    await gpu_lab_blocked(kube)
    other = await other_namespace_pod(kube, "cpu-1", cpu="500m")
    await grant_z2jh_hub_role(kube, "hub")
    name = f"nodes-{kube.namespace}"
    await kube.rbac.create_cluster_role(
        {
            "metadata": {"name": name},
            "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]}],
        }
    )
    await kube.rbac.create_cluster_role_binding(
        {
            "metadata": {"name": name},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": name,
            },
            "subjects": [{"kind": "User", "name": "hub", "apiGroup": "rbac.authorization.k8s.io"}],
        }
    )
    try:
        args = ["--namespace", kube.namespace, "--kubeconfig", kube.user_kubeconfig("hub")]
        status, out, _ = await run_cli(capsys, "explain", "alice", *args)
        report = await run_json(capsys, "explain", "alice", *args)
    finally:
        await delete_cluster_rbac(kube, [("ClusterRoleBinding", name), ("ClusterRole", name)])
        await remove_namespace(kube, other)
    assert status == 0
    assert "(requests of this namespace's pods only)" in out
    assert "cannot list pods in all namespaces (403 Forbidden)" in out
    (node,) = report["nodes"]
    assert node["pods_counted"] == "this namespace"
    assert node["headroom"]["cpu"]["requested"] == 2000  # the other namespace's 500m is unseen
    assert report["new_server"]["verified"] is True


async def test_explain_without_pod_access_fails_with_one_line_naming_the_resource(kube, capsys):
    args = ["--namespace", kube.namespace, "--kubeconfig", kube.user_kubeconfig("nobody")]
    status, out, err = await run_cli(capsys, "explain", "alice", *args)
    assert (status, out) == (2, "")
    assert err.count("\n") == 1
    assert err.startswith(
        f"nebari-colocate: forbidden (403) to list pods in namespace {kube.namespace}"
    )
    assert "zero-to-jupyterhub's hub Role" in err


async def test_explain_and_audit_use_the_namespace_of_the_kubeconfig_context(
    kube, capsys, tmp_path
):
    await kube.create_node("cpu-1")
    await kube.create_bound_claim("claim-alice")
    await create_user_pod(kube, "jupyter-alice", "alice", node="cpu-1", claims=["claim-alice"])
    config = yaml.safe_load(Path(kube.kubeconfig).read_text())
    for context in config["contexts"]:
        context["context"]["namespace"] = kube.namespace
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    report = await run_json(capsys, "explain", "alice", "--kubeconfig", str(path))
    assert report["namespace"] == kube.namespace
    # the default server runs: restarting it replaces its pod, whose volume stays attached to
    # cpu-1 until the pod is gone (the attach/detach controller made that attachment)
    assert report["new_server"]["replaces"] == "jupyter-alice"
    assert report["pinned_node"] == "cpu-1"
    app = await run_json(capsys, "explain", "alice", "--server", "app", "--kubeconfig", str(path))
    assert app["pinned_node"] == "cpu-1"
    audit = await run_json(capsys, "audit", "--kubeconfig", str(path))
    assert audit["namespace"] == kube.namespace
    assert [u["user"] for u in audit["pinned_users"]] == ["alice"]


# --------------------------------------------------------------------------------------------------
# audit


async def audit_fixture(kube) -> None:
    """alice pinned on cpu-1; bob's app alone on gpu-1; carol on RWX; dave split over two nodes;
    erin on cpu-2 with her volume still attached to cpu-1; frank's unused claim; the hub's db."""
    kube.check_split_claims = False  # dave and erin are split on purpose
    await kube.create_node("cpu-1", labels={"node-type": "cpu"})
    await kube.create_node("cpu-2", labels={"node-type": "cpu"})
    await kube.create_node(
        "gpu-1", labels={"node-type": "gpu"}, taints=[GPU_TAINT], extra={"nvidia.com/gpu": "2"}
    )
    for claim in ("claim-alice", "claim-bob", "claim-dave", "hub-db-dir"):
        await kube.create_bound_claim(claim)
    await kube.create_bound_claim("claim-carol", access_modes=("ReadWriteMany",))
    _, erin_pv = await kube.create_bound_claim("claim-erin")
    await kube.create_bound_claim("claim-frank")
    frank = {"metadata": {"annotations": {"hub.jupyter.org/username": "frank"}}}
    await kube.core.patch_namespaced_persistent_volume_claim("claim-frank", kube.namespace, frank)

    home = {"claims": ["claim-alice"], "node": "cpu-1"}
    await create_user_pod(kube, "jupyter-alice", "alice", **home)
    await create_user_pod(kube, "jupyter-alice--app", "alice", "app", **home)
    await create_user_pod(
        kube,
        "jupyter-bob--dash",
        "bob",
        "dash",
        node="gpu-1",
        claims=["claim-bob"],
        tolerations=[GPU_TOLERATION],
    )
    await create_user_pod(kube, "jupyter-carol", "carol", node="cpu-1", claims=["claim-carol"])
    await create_user_pod(
        kube, "jupyter-carol--x", "carol", "x", node="cpu-2", claims=["claim-carol"]
    )
    await create_user_pod(kube, "jupyter-dave", "dave", node="cpu-1", claims=["claim-dave"])
    # The controller attaches dave's home to cpu-1 only: this pod waits for it (Multi-Attach).
    await create_user_pod(
        kube, "jupyter-dave--b", "dave", "b", node="cpu-2", claims=["claim-dave"], running=False
    )
    # erin's server ran on cpu-1 and stopped, but cpu-1's kubelet still has her volume in use
    # (an unmount that hangs): the controller keeps it attached there, her new server waits.
    await create_user_pod(
        kube, "jupyter-erin--old", "erin", "old", node="cpu-1", claims=["claim-erin"]
    )
    await wait_for_attachment(kube, erin_pv["metadata"]["name"], "cpu-1")
    node = await kube.core.read_node("cpu-1")
    erin_volume = [
        v.name for v in node.status.volumes_attached if v.name.endswith(erin_pv["metadata"]["name"])
    ]
    await kube.core.patch_node_status("cpu-1", {"status": {"volumesInUse": erin_volume}})
    await kube.core.delete_namespaced_pod("jupyter-erin--old", kube.namespace)
    await wait_until(
        lambda: kube.core.list_namespaced_pod(kube.namespace),
        until=lambda pods: "jupyter-erin--old" not in {p.metadata.name for p in pods.items},
        timeout=60,
        what="jupyter-erin--old deleted",
        seen=lambda pods: [p.metadata.name for p in pods.items],
        interval=0.1,
    )
    await create_user_pod(
        kube, "jupyter-erin", "erin", node="cpu-2", claims=["claim-erin"], running=False
    )


async def test_audit_lists_pinned_users_stranded_servers_and_split_claims(kube, capsys):
    await audit_fixture(kube)
    args = ["--namespace", kube.namespace, "--kubeconfig", kube.kubeconfig]
    status, out, err = await run_cli(capsys, "audit", *args)
    report = await run_json(capsys, "audit", *args)
    print(out)
    assert (status, err) == (0, "")
    assert "Users pinned to a node by exclusive (ReadWriteOnce) claims: 4" in out
    assert "alice  cpu-1         (default), app  claim-alice" in out
    assert "Servers on premium nodes that request no premium resource: 1" in out
    assert "bob   dash    jupyter-bob--dash  gpu-1  nvidia.com/gpu=2" in out
    assert "none: this pod alone keeps the node" in out
    assert "ReadWriteOnce claims in a ReadWriteMany deployment: not checked" in out
    assert "Exclusive claims in use on more than one node: 2" in out
    assert "claim-dave  cpu-1, cpu-2  jupyter-dave@cpu-1, jupyter-dave--b@cpu-2" in out

    assert [u["user"] for u in report["pinned_users"]] == ["alice", "bob", "dave", "erin"]
    assert report["pinned_users"][2]["nodes"] == ["cpu-1", "cpu-2"]
    (stranded,) = report["stranded_pods"]
    assert stranded == {
        "user": "bob",
        "server": "dash",
        "pod": "jupyter-bob--dash",
        "node": "gpu-1",
        "node_premium": {"nvidia.com/gpu": 2},
        "premium_pods_on_node": [],
        "inferred": False,
    }
    assert report["rwo_claims"] is None
    splits = {s["claim"]: s for s in report["split_attachments"]}
    assert sorted(splits) == ["claim-dave", "claim-erin"]
    assert splits["claim-erin"]["pods"] == {"cpu-2": ["jupyter-erin"]}
    assert splits["claim-erin"]["attached_on"] == ["cpu-1"]
    assert report["notes"] == []


async def test_audit_in_a_readwritemany_deployment_lists_user_claims_to_migrate(kube, capsys):
    await audit_fixture(kube)
    args = ["--namespace", kube.namespace, "--kubeconfig", kube.kubeconfig]
    status, out, _ = await run_cli(capsys, "audit", *args, "--storage-access-mode", "readwritemany")
    report = await run_json(capsys, "audit", *args, "--storage-access-mode", "ReadWriteMany")
    print(out)
    assert status == 0
    assert "ReadWriteOnce claims in a ReadWriteMany deployment: 5" in out
    claims = {c["claim"]: c for c in report["rwo_claims"]}
    # the hub's own database claim is no user's; carol's claim is already ReadWriteMany
    assert sorted(claims) == ["claim-alice", "claim-bob", "claim-dave", "claim-erin", "claim-frank"]
    assert claims["claim-frank"]["users"] == ["frank"]
    assert claims["claim-frank"]["in_use_by"] == []
    assert claims["claim-alice"]["in_use_by"] == ["jupyter-alice", "jupyter-alice--app"]
    assert report["storage_access_mode"] == "ReadWriteMany"


async def test_audit_with_only_the_z2jh_hub_role_says_what_it_cannot_see(kube, capsys):
    await audit_fixture(kube)
    await create_user_pod(
        kube,
        "jupyter-gina",
        "gina",
        node="gpu-1",
        claims=[],
        tolerations=[GPU_TOLERATION],
        limits={"nvidia.com/gpu": "1"},
    )
    await grant_z2jh_hub_role(kube, "hub")
    args = ["--namespace", kube.namespace, "--kubeconfig", kube.user_kubeconfig("hub")]
    status, out, err = await run_cli(capsys, "audit", *args)
    report = await run_json(capsys, "audit", *args)
    print(out)
    assert (status, err) == (0, "")
    assert "cannot list nodes (403 Forbidden)" in out
    assert "cannot list volumeattachments (403 Forbidden)" in out
    assert report["node_access"] is False
    assert report["attachment_access"] is False
    # gina's GPU server proves gpu-1 is premium; bob's app beside it is found, marked inferred
    (stranded,) = report["stranded_pods"]
    assert stranded["pod"] == "jupyter-bob--dash"
    assert stranded["inferred"] is True
    assert stranded["premium_pods_on_node"] == ["jupyter-gina"]
    # erin's split is known only from the attachment, which is not readable
    assert [s["claim"] for s in report["split_attachments"]] == ["claim-dave"]


async def test_audit_inside_a_pod_uses_its_service_account_and_namespace(
    kube, capsys, monkeypatch, tmp_path
):
    await kube.create_node("cpu-1")
    await kube.create_bound_claim("claim-alice")
    await create_user_pod(kube, "jupyter-alice", "alice", node="cpu-1", claims=["claim-alice"])
    await kube.core.create_namespaced_service_account(kube.namespace, {"metadata": {"name": "hub"}})
    await grant_z2jh_hub_role(kube, f"system:serviceaccount:{kube.namespace}:hub")
    token = await kube.core.create_namespaced_service_account_token(
        "hub", kube.namespace, {"spec": {"expirationSeconds": 600}}
    )
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text(token.status.token)
    shutil.copy(kube.control_plane.ca_file, account / "ca.crt")
    (account / "namespace").write_text(kube.namespace)
    host, port = kube.control_plane.server.removeprefix("https://").split(":")
    monkeypatch.setattr(kubeapi, "SERVICE_ACCOUNT_DIR", account)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / f"home-{secrets.token_hex(2)}"))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", host)
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", port)
    report = await run_json(capsys, "audit")
    assert report["namespace"] == kube.namespace
    assert [u["user"] for u in report["pinned_users"]] == ["alice"]
    assert report["node_access"] is False
