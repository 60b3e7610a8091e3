"""`nebari-colocate migrate` against the real control plane.

Real here: kube-apiserver, kube-scheduler (places the copy pod), and kube-controller-manager's
PV controller (binds the claims to the volumes, releases a volume when its claim goes, and binds a
recreated claim to a pre-bound volume), pvc-protection / pv-protection (a claim in use is not
deleted) and the attach/detach controller (VolumeAttachments of the copy pod's volumes, which
kwok acknowledges as the CSI external-attacher would).

Simulated (no container runs here), in :class:`NodeSimulator`, as a node would do it:

- kwok reports the copy pod Running once its volumes are attached (the session's control plane);
- the "volumes" are directories under ``tmp_path``, one per PersistentVolume;
- once the pod runs, the simulator runs the pod's own command (``python3 -c <copy_home.py>``)
  with the mount paths replaced by the directories of the volumes the pod's claims are bound to,
  then reports the container terminated with the script's exit code and termination message
  (phase Succeeded or Failed), as the kubelet would.  kwok has no Stage that runs a command.

So the copy that the orchestration checks is a real copy of a real directory tree; the copy
script itself is tested in depth in tests/unit/test_copy_home.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from nebari_colocate import cli, messages, migrate
from nebari_colocate.objects import MIGRATION_ANNOTATION, MIGRATION_STALLED_ANNOTATION
from nebari_colocate.placement import Policy, decide
from nebari_colocate.spawner import ColocationRefused
from nebari_colocate.state import ClusterState
from tests.support import builders, helpers
from tests.support.waiting import wait_until
from tests.unit.test_copy_home import independent_diff

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
RWO_CLASS = "migrate-test-disk"
RWX_CLASS = "migrate-test-shared"
BLOCK_ONLY_CLASS = "migrate-test-ebs"
#: a class whose provisioner does not run here (nothing ever binds its claims)
UNPROVISIONED_CLASS = "migrate-test-unprovisioned"
NODE = "node-1"


# --------------------------------------------------------------------------------------------------
# the node simulator


class NodeSimulator:
    """Completes copy pods as a node would (see the module docstring)."""

    def __init__(self, kube, volumes: Path):
        self.kube = kube
        self.volumes = volumes
        self.done: set[str] = set()
        self.copies: list[dict] = []
        self.release = asyncio.Event()
        self.release.set()
        self.writer: Path | None = None  # a source file another process keeps writing to
        self._task: asyncio.Task | None = None

    def volume_dir(self, pv_name: str) -> Path:
        path = self.volumes / pv_name
        path.mkdir(parents=True, exist_ok=True)
        return path

    async def __aenter__(self):
        self._task = asyncio.ensure_future(self._run())
        return self

    async def __aexit__(self, *exc):
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._task

    async def _run(self):
        while True:
            try:
                pods = await self.kube.core.list_namespaced_pod(
                    self.kube.namespace,
                    label_selector=f"{migrate.COMPONENT_LABEL}={migrate.COMPONENT}",
                )
                for pod in pods.items:
                    if pod.metadata.uid in self.done or pod.metadata.deletion_timestamp:
                        continue
                    if (pod.status.phase or "") != "Running":
                        continue  # kwok starts it first, once its volumes are attached
                    if not self.release.is_set():
                        continue
                    self.done.add(pod.metadata.uid)
                    await self._complete(self.kube.api_client.sanitize_for_serialization(pod))
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # keep simulating; the test sees the effect
                print(f"node simulator: {type(exc).__name__}: {exc}")
            await asyncio.sleep(0.1)

    async def _complete(self, pod: dict):
        spec = pod["spec"]
        mounts = {}
        for volume in spec["volumes"]:
            claim = volume["persistentVolumeClaim"]["claimName"]
            pvc = await self.kube.core.read_namespaced_persistent_volume_claim(
                claim, self.kube.namespace
            )
            mounts[volume["name"]] = self.volume_dir(pvc.spec.volume_name)
        container = spec["containers"][0]
        paths = {m["mountPath"]: str(mounts[m["name"]]) for m in container["volumeMounts"]}
        termination = self.volumes / f"termination-{pod['metadata']['uid']}"
        argv = [
            str(termination) if a == container["terminationMessagePath"] else paths.get(a, a)
            for a in container["command"]
        ]
        argv[0] = sys.executable  # the image's python3
        stop = threading.Event()
        writer = None
        if self.writer is not None:
            target = self.writer

            def keep_writing():
                while not stop.is_set():
                    with open(target, "a") as f:
                        f.write("x")
                    time.sleep(0.001)

            writer = threading.Thread(target=keep_writing)
            writer.start()
        try:
            result = await asyncio.to_thread(subprocess.run, argv, capture_output=True, text=True)
        finally:
            stop.set()
            if writer is not None:
                writer.join()
        message = termination.read_text() if termination.exists() else result.stderr[-4000:]
        self.copies.append({"pod": pod["metadata"]["name"], "exit": result.returncode})
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        await self.kube.core.patch_namespaced_pod_status(
            pod["metadata"]["name"],
            self.kube.namespace,
            {
                "status": {
                    "phase": "Succeeded" if result.returncode == 0 else "Failed",
                    "conditions": [
                        {"type": "Ready", "status": "False", "reason": "PodCompleted"},
                        {"type": "ContainersReady", "status": "False", "reason": "PodCompleted"},
                    ],
                    "containerStatuses": [
                        {
                            "name": container["name"],
                            "image": container["image"],
                            "imageID": "",
                            "ready": False,
                            "restartCount": 0,
                            "started": False,
                            "state": {
                                "terminated": {
                                    "exitCode": result.returncode,
                                    "reason": "Completed" if result.returncode == 0 else "Error",
                                    "message": message,
                                    "startedAt": now,
                                    "finishedAt": now,
                                }
                            },
                        }
                    ],
                }
            },
        )


# --------------------------------------------------------------------------------------------------
# a deployment with homes


async def _ensure_storage_classes(kube):
    for name, provisioner in (
        (RWO_CLASS, "kubernetes.io/no-provisioner"),
        (RWX_CLASS, "kubernetes.io/no-provisioner"),
        (BLOCK_ONLY_CLASS, "ebs.csi.aws.com"),
        (UNPROVISIONED_CLASS, "nfs.example.com"),
    ):
        with contextlib.suppress(ApiException):
            await kube.storage.create_storage_class(
                {
                    "apiVersion": "storage.k8s.io/v1",
                    "kind": "StorageClass",
                    "metadata": {"name": name},
                    "provisioner": provisioner,
                    "volumeBindingMode": "Immediate",
                }
            )


async def create_volume(
    kube, name: str, modes, storage_class: str, policy="Delete", size="1Gi", for_claim=None
):
    """A static CSI volume; ``for_claim`` reserves it for that claim name (pre-bound), as a
    provisioner's volume belongs to the claim it was made for."""
    body = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": {helpers.LABEL_NAMESPACE: kube.namespace}},
        "spec": {
            "capacity": {"storage": size},
            "accessModes": list(modes),
            "persistentVolumeReclaimPolicy": policy,
            "storageClassName": storage_class,
            "volumeMode": "Filesystem",
            "csi": {"driver": helpers.FAKE_CSI_DRIVER, "volumeHandle": name},
        },
    }
    if for_claim:
        body["spec"]["claimRef"] = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "namespace": kube.namespace,
            "name": for_claim,
        }
    await kube.core.create_persistent_volume(body)


async def wait_bound(kube, claim: str, timeout: float = 30) -> dict:
    pvc = await wait_until(
        lambda: kube.core.read_namespaced_persistent_volume_claim(claim, kube.namespace),
        until=lambda pvc: pvc.status.phase == "Bound",
        timeout=timeout,
        what=f"claim {claim} Bound",
        seen=lambda pvc: pvc.status.phase,
        interval=0.1,
    )
    return kube.api_client.sanitize_for_serialization(pvc)


class Deployment:
    """Homes as a hub leaves them: claim-{user} (RWO, bound by the PV controller) on a volume
    whose directory holds the user's files; one spare RWX volume per home for the move."""

    def __init__(self, kube, sim: NodeSimulator):
        self.kube, self.sim = kube, sim
        self.old: dict[str, str] = {}
        self.new: dict[str, str] = {}

    async def home(self, user: str, modes=("ReadWriteOnce",), files: int = 300) -> str:
        kube = self.kube
        claim = f"claim-{user}"
        old, new = f"{kube.namespace}-{user}-disk", f"{kube.namespace}-{user}-shared"
        storage_class = RWX_CLASS if "ReadWriteMany" in modes else RWO_CLASS
        await create_volume(kube, old, modes, storage_class)
        await kube.core.create_namespaced_persistent_volume_claim(
            kube.namespace,
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {
                    "name": claim,
                    "labels": {"hub.jupyter.org/username": user, "component": "singleuser-storage"},
                    "annotations": {"hub.jupyter.org/username": user},
                },
                "spec": {
                    "accessModes": list(modes),
                    "storageClassName": storage_class,
                    "volumeName": old,
                    "resources": {"requests": {"storage": "1Gi"}},
                },
            },
        )
        await wait_bound(kube, claim)
        if "ReadWriteMany" not in modes:
            await create_volume(
                kube, new, ("ReadWriteMany",), RWX_CLASS, for_claim=migrate.temporary_name(claim)
            )
            self.new[user] = new
        self.old[user] = old
        root = self.sim.volume_dir(old)
        base = os.fsencode(root)
        os.makedirs(base + b"/.pixi/envs/default", exist_ok=True)
        for i in range(files):
            with open(base + b"/.pixi/envs/default/m%04d.py" % i, "wb") as f:
                f.write(b"%d\n" % i)
        (root / "notebook.ipynb").write_text('{"cells": []}')
        os.link(root / "notebook.ipynb", root / "notebook-link.ipynb")
        os.symlink(".pixi/envs/default", root / "env")
        with open(base + b"/odd \xff name", "wb") as f:
            f.write(b"odd")
        os.chown(root / "notebook.ipynb", 1000, 100)
        os.chmod(root / "notebook.ipynb", 0o600)
        return claim

    async def server_pod(self, user: str, name: str | None = None) -> str:
        name = name or f"jupyter-{user}"
        manifest = builders.kube_pod(
            name,
            claims=[f"claim-{user}"],
            labels={"component": "singleuser-server", "hub.jupyter.org/username": user},
            annotations={"hub.jupyter.org/username": user},
        )
        await self.kube.core.create_namespaced_pod(self.kube.namespace, manifest)
        return name

    async def assert_moved(self, user: str):
        """One claim named claim-{user}: RWX, bound to the new volume; the old one retained."""
        kube = self.kube
        claim = f"claim-{user}"
        pvc = await wait_bound(kube, claim)
        assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
        assert pvc["spec"]["volumeName"] == self.new[user]
        assert pvc["spec"]["storageClassName"] == RWX_CLASS
        annotations = pvc["metadata"].get("annotations") or {}
        assert annotations["hub.jupyter.org/username"] == user
        assert MIGRATION_ANNOTATION not in annotations
        assert annotations[migrate.FROM_KEY] == self.old[user]
        assert pvc["metadata"]["labels"]["component"] == "singleuser-storage"
        claims = await kube.core.list_namespaced_persistent_volume_claim(kube.namespace)
        assert [
            c.metadata.name
            for c in claims.items
            if (c.metadata.annotations or {}).get("hub.jupyter.org/username") == user
            or c.metadata.name.endswith(claim)
        ] == [claim]
        new = await kube.core.read_persistent_volume(self.new[user])
        assert (new.spec.claim_ref.name, new.spec.claim_ref.uid) == (claim, pvc["metadata"]["uid"])
        assert new.spec.persistent_volume_reclaim_policy == "Delete"  # restored
        old = await self.wait_released(user)
        assert old.spec.persistent_volume_reclaim_policy == "Retain"
        assert old.metadata.annotations[migrate.STEP_KEY] == migrate.DONE
        pods = await kube.core.list_namespaced_pod(
            kube.namespace, label_selector=f"{migrate.COMPONENT_LABEL}={migrate.COMPONENT}"
        )
        assert pods.items == []
        assert (
            independent_diff(
                self.sim.volume_dir(self.old[user]), self.sim.volume_dir(self.new[user])
            )
            == []
        )

    async def assert_moved_again(self, user: str):
        """After a rollback the new volume is used (or kept); the move went to some RWX volume."""
        pvc = await wait_bound(self.kube, f"claim-{user}")
        assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
        volume = pvc["spec"]["volumeName"]
        assert volume != self.old[user]
        assert (
            independent_diff(self.sim.volume_dir(self.old[user]), self.sim.volume_dir(volume)) == []
        )

    async def wait_released(self, user: str, timeout: float = 30):
        return await wait_until(
            lambda: self.kube.core.read_persistent_volume(self.old[user]),
            until=lambda old: old.status.phase == "Released",
            timeout=timeout,
            what=f"old volume {self.old[user]} Released",
            seen=lambda old: old.status.phase,
            interval=0.1,
        )

    async def assert_untouched(self, user: str):
        """claim-{user} still on the old volume, unmarked, usable."""
        pvc = await wait_bound(self.kube, f"claim-{user}")
        assert pvc["spec"]["volumeName"] == self.old[user]
        assert pvc["spec"]["accessModes"] == ["ReadWriteOnce"]
        assert MIGRATION_ANNOTATION not in (pvc["metadata"].get("annotations") or {})


@pytest.fixture
async def deployment(kube, tmp_path):
    await _ensure_storage_classes(kube)
    await kube.create_node(NODE)
    async with NodeSimulator(kube, tmp_path / "volumes") as sim:
        yield Deployment(kube, sim)


async def attached_volumes(kube, timeout: float = 30) -> dict[str, set[str]]:
    """Node -> PVs with a VolumeAttachment there, once the controller made at least two."""

    async def attached() -> dict[str, set[str]]:
        found: dict[str, set[str]] = {}
        for va in (await kube.storage.list_volume_attachment()).items:
            found.setdefault(va.spec.node_name, set()).add(va.spec.source.persistent_volume_name)
        return found

    return await wait_until(
        attached,
        until=lambda found: sum(len(v) for v in found.values()) >= 2,
        timeout=timeout,
        what="two VolumeAttachments",
        interval=0.1,
    )


def coordination(kube) -> client.CoordinationV1Api:
    return client.CoordinationV1Api(kube.api_client)


def mover(kube, **kwargs) -> migrate.Mover:
    kwargs.setdefault("copy_timeout", 60)
    kwargs.setdefault("storage_class", RWX_CLASS)
    m = migrate.Mover(kube.api_client, kube.namespace, **kwargs)
    m.copy_poll = 0.1
    return m


async def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        status = await asyncio.to_thread(cli.main, list(argv))
    except SystemExit as exc:
        status = exc.code
    out, err = capsys.readouterr()
    return status, out, err


def cli_args(kube, *argv: str) -> list[str]:
    return ["migrate", *argv, "--kubeconfig", kube.kubeconfig, "-n", kube.namespace]


# --------------------------------------------------------------------------------------------------
# plan, apply, status


async def test_plan_says_per_user_what_a_move_would_do(deployment, capsys):
    kube = deployment.kube
    await deployment.home("alice")
    await deployment.home("bob")
    await deployment.home("carol", modes=("ReadWriteMany",))
    await deployment.server_pod("bob")
    await kube.wait_for_running("jupyter-bob")

    status, out, err = await run_cli(
        capsys, *cli_args(kube, "plan", "--storage-class", RWX_CLASS, "--json")
    )
    assert (status, err) == (0, "")
    plan = json.loads(out)
    rows = {r["user"]: r for r in plan["homes"]}
    assert rows["alice"]["action"] == "move"
    assert rows["alice"]["access_modes"] == ["ReadWriteOnce"]
    assert (rows["alice"]["size"], rows["alice"]["storage_class"]) == ("1Gi", RWO_CLASS)
    assert rows["alice"]["volume"] == deployment.old["alice"]
    assert (rows["bob"]["action"], rows["bob"]["running"]) == ("servers-running", ["(default)"])
    assert rows["carol"]["action"] == "already-rwx"

    status, out, _ = await run_cli(capsys, *cli_args(kube, "plan", "--storage-class", RWX_CLASS))
    assert status == 0
    assert "move: copy to a new ReadWriteMany claim in class migrate-test-shared" in out
    assert "wait: stop (default) first" in out

    status, _, err = await run_cli(capsys, *cli_args(kube, "apply", "--all", "--dry-run"))
    assert (status, err.strip()) == (
        2,
        "nebari-colocate: no target storage class: pass --storage-class (the class the hub "
        "creates ReadWriteMany homes in, helm custom.storage-class)",
    )
    status, out, _ = await run_cli(
        capsys, *cli_args(kube, "apply", "--all", "--dry-run", "--storage-class", RWX_CLASS)
    )
    assert status == 0, out
    assert "would move" in out and "dry run: nothing was changed" in out
    await deployment.assert_untouched("alice")
    old = await kube.core.read_persistent_volume(deployment.old["alice"])
    assert old.spec.persistent_volume_reclaim_policy == "Delete"
    assert migrate.STEP_KEY not in (old.metadata.annotations or {})


async def test_apply_moves_a_home_and_a_second_apply_does_nothing(deployment, capsys):
    kube = deployment.kube
    await deployment.home("alice")
    status, out, err = await run_cli(
        capsys, *cli_args(kube, "apply", "alice", "--storage-class", RWX_CLASS)
    )
    assert (status, err) == (0, ""), out
    assert f"moved to volume {deployment.new['alice']}" in out
    assert f"kubectl delete pv {deployment.old['alice']}" in out
    await deployment.assert_moved("alice")
    assert len(deployment.sim.copies) == 1

    status, out, _ = await run_cli(
        capsys, *cli_args(kube, "apply", "alice", "--storage-class", RWX_CLASS, "--json")
    )
    assert status == 0
    assert json.loads(out)["results"][0]["outcome"] == "already-done"
    assert len(deployment.sim.copies) == 1
    status, out, _ = await run_cli(capsys, *cli_args(kube, "status", "--json"))
    (row,) = json.loads(out)["moves"]
    assert (row["user"], row["step"], row["copy"]["result"]) == ("alice", "done", "verified")
    status, out, _ = await run_cli(capsys, *cli_args(kube, "status"))
    assert status == 0
    assert out.splitlines()[0] == f"Moves in namespace {kube.namespace}: 1"
    assert out.splitlines()[1].split() == [
        "USER",
        "CLAIM",
        "STEP",
        "MODES",
        "OLD",
        "VOLUME",
        "NEW",
        "VOLUME",
        "COPY",
        "PROBLEM",
    ]
    assert out.splitlines()[2].split() == [
        "alice",
        "claim-alice",
        "done",
        "ReadWriteMany",
        deployment.old["alice"],
        deployment.new["alice"],
        "verified",
        "-",
    ]
    assert f"kubectl delete pv {deployment.old['alice']}" in out
    await deployment.assert_moved("alice")


async def test_apply_all_moves_the_stopped_users_and_leaves_a_running_one(deployment, capsys):
    kube = deployment.kube
    for user in ("alice", "bob", "dave"):
        await deployment.home(user, files=50)
    await deployment.server_pod("dave")
    status, out, _ = await run_cli(
        capsys,
        *cli_args(kube, "apply", "--all", "--concurrency", "2", "--storage-class", RWX_CLASS),
    )
    assert status == 0, out
    await deployment.assert_moved("alice")
    await deployment.assert_moved("bob")
    await deployment.assert_untouched("dave")
    status, out, _ = await run_cli(
        capsys, *cli_args(kube, "apply", "dave", "--storage-class", RWX_CLASS)
    )
    assert status == 1  # named, and it could not move
    assert out.strip() == "dave (claim-dave): skipped: wait: stop (default) first"


async def test_a_class_that_offers_no_read_write_many_is_refused(deployment, capsys):
    kube = deployment.kube
    await deployment.home("alice", files=5)
    status, _, err = await run_cli(
        capsys, *cli_args(kube, "apply", "alice", "--storage-class", BLOCK_ONLY_CLASS)
    )
    assert status == 2
    assert "provisioned by ebs.csi.aws.com, which offers no ReadWriteMany" in err
    status, _, err = await run_cli(
        capsys, *cli_args(kube, "apply", "alice", "--storage-class", "no-such-class")
    )
    assert (status, err.strip()) == (
        2,
        "nebari-colocate: storage class 'no-such-class' does not exist",
    )
    old = await kube.core.read_persistent_volume(deployment.old["alice"])
    assert migrate.STEP_KEY not in (old.metadata.annotations or {})
    await deployment.assert_untouched("alice")


# --------------------------------------------------------------------------------------------------
# interrupted, resumed


#: a process that moves one home and SIGKILLs itself at one checkpoint (no hook in the product:
#: the checkpoint callback is the Mover's own test seam)
#: the lease of a killed process and of its resume: the resume must wait it out (the lease is
#: not released by a SIGKILL), so the default 60 s would make each case last a minute
KILLED_LEASE_SECONDS = 6

KILLED_AT = """
import asyncio, os, signal, sys
from kubernetes_asyncio import config
from nebari_colocate import migrate

async def main(kubeconfig, namespace, claim, storage_class, stop_at, lease):
    api = await config.new_client_from_config(config_file=kubeconfig, persist_config=False)
    def die(_claim, name):
        if name == stop_at:
            os.kill(os.getpid(), signal.SIGKILL)
    mover = migrate.Mover(
        api, namespace, storage_class=storage_class, checkpoint=die, lease_seconds=int(lease)
    )
    mover.copy_poll = 0.1
    print(await mover.apply(claim))

asyncio.run(main(*sys.argv[1:]))
"""


class Interrupted(Exception):
    """Raised by a checkpoint callback of a test (stands for the process being killed)."""


async def assert_safe_while_interrupted(deployment, reached: str):
    """What holds at every interruption: the data's volume is retained; from the mark on, the
    user's claim (when it exists) refuses spawns."""
    kube = deployment.kube
    old = await kube.core.read_persistent_volume(deployment.old["alice"])
    assert old.spec.persistent_volume_reclaim_policy == "Retain"
    index = migrate.CHECKPOINTS.index(reached)
    if index >= migrate.CHECKPOINTS.index("marked"):
        with contextlib.suppress(ApiException):
            pvc = await kube.core.read_namespaced_persistent_volume_claim(
                "claim-alice", kube.namespace
            )
            assert pvc.metadata.annotations[MIGRATION_ANNOTATION] == "moving"
    assert (deployment.sim.volume_dir(deployment.old["alice"]) / "notebook.ipynb").exists()


@pytest.mark.parametrize("checkpoint", migrate.CHECKPOINTS)
async def test_the_process_killed_at_any_step_resumes_to_the_same_end(deployment, checkpoint):
    kube = deployment.kube
    await deployment.home("alice", files=100)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        KILLED_AT,
        kube.kubeconfig,
        kube.namespace,
        "claim-alice",
        RWX_CLASS,
        checkpoint,
        str(KILLED_LEASE_SECONDS),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode == -signal.SIGKILL, (out, err)
    await assert_safe_while_interrupted(deployment, checkpoint)

    result = await mover(kube, lease_seconds=KILLED_LEASE_SECONDS).apply("claim-alice")
    assert result["outcome"] == "done", result
    await deployment.assert_moved("alice")
    again = await mover(kube).apply("claim-alice")
    assert again["outcome"] == "already-done"


async def test_a_move_interrupted_by_an_error_at_every_step_in_turn_resumes_each_time(deployment):
    """One move, interrupted by an exception at the first checkpoint, resumed and interrupted at
    the next, and so on to the end: every resume starts from the state the previous one left."""
    kube = deployment.kube
    await deployment.home("alice", files=100)
    for checkpoint in migrate.CHECKPOINTS:
        reached = []

        def interrupt(_claim, name, checkpoint=checkpoint, reached=reached):
            reached.append(name)
            if name == checkpoint:
                raise Interrupted(name)

        with pytest.raises(Interrupted):
            await mover(kube, checkpoint=interrupt).apply("claim-alice")
        await assert_safe_while_interrupted(deployment, checkpoint)
    result = await mover(kube).apply("claim-alice")
    assert result["outcome"] == "done", result
    await deployment.assert_moved("alice")
    assert len(deployment.sim.copies) == 1


async def test_the_command_killed_during_the_copy_resumes(deployment, capsys):
    kube = deployment.kube
    await deployment.home("alice", files=100)
    deployment.sim.release.clear()  # the copy pod runs until the test lets it finish
    env = {**os.environ, "KUBECONFIG": kube.kubeconfig}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "nebari_colocate.cli",
            "migrate",
            "apply",
            "alice",
            "-n",
            kube.namespace,
            "--storage-class",
            RWX_CLASS,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        await kube.wait_for_running(migrate.temporary_name("claim-alice"))
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    status, out, _ = await run_cli(capsys, *cli_args(kube, "status", "--json"))
    assert status == 0
    (row,) = json.loads(out)["moves"]
    assert (row["step"], row["marked"], row["copy_pod"]) == ("copying", True, "Running")
    # the attach/detach controller attached both volumes to the copy pod's node
    attached = await attached_volumes(kube)
    assert {deployment.old["alice"], deployment.new["alice"]} <= attached[NODE]
    deployment.sim.release.set()
    result = await mover(kube).apply("claim-alice")
    assert result["outcome"] == "done"
    await deployment.assert_moved("alice")
    assert len(deployment.sim.copies) == 1  # the copy pod of the killed run was reused


# --------------------------------------------------------------------------------------------------
# users in the middle


async def test_a_spawn_during_the_move_is_refused_and_works_after_it(deployment, spawners):
    kube = deployment.kube
    await deployment.home("alice", files=50)
    deployment.sim.release.clear()
    move = asyncio.ensure_future(mover(kube).apply("claim-alice"))
    await kube.wait_for_running(migrate.temporary_name("claim-alice"))

    spawner = spawners.make("alice")
    with pytest.raises(ColocationRefused) as refused:
        await spawners.start(spawner)
    message = refused.value.jupyterhub_message
    assert message.startswith(
        "Your default server cannot start. Your home folder is being moved to new storage (since "
    )
    assert "Try again in a few minutes" in message
    assert refused.value.decision.reasons == ["home-being-moved"]
    pods = await kube.core.list_namespaced_pod(kube.namespace)
    assert [p.metadata.name for p in pods.items] == [migrate.temporary_name("claim-alice")]

    deployment.sim.release.set()
    assert (await move)["outcome"] == "done"
    await deployment.assert_moved("alice")
    after = spawners.make("alice")
    await spawners.start(after)
    assert after._colocation_decision.verdict == "skip"  # an RWX home: no co-location needed


async def test_a_server_started_beside_the_copy_stops_the_move_and_keeps_the_old_claim(
    deployment,
):
    kube = deployment.kube
    await deployment.home("alice", files=50)
    deployment.sim.release.clear()
    move = asyncio.ensure_future(mover(kube).apply("claim-alice"))
    await kube.wait_for_running(migrate.temporary_name("claim-alice"))
    # a pod no hub refused: an older hub, a job, kubectl
    await deployment.server_pod("alice", "jupyter-alice-other-hub")
    result = await move
    assert (result["outcome"], result["reason"]) == ("blocked", "servers-running")
    await deployment.assert_untouched("alice")
    old = await kube.core.read_persistent_volume(deployment.old["alice"])
    assert old.metadata.annotations[migrate.STEP_KEY] == migrate.RETAINED
    assert old.spec.persistent_volume_reclaim_policy == "Retain"

    await kube.core.delete_namespaced_pod(
        "jupyter-alice-other-hub", kube.namespace, grace_period_seconds=0
    )
    deployment.sim.release.set()
    # the deleted pod is gone from the API a moment later: blocked until then
    result = await wait_until(
        lambda: mover(kube).apply("claim-alice"),
        until=lambda result: result["outcome"] != "blocked",
        timeout=30,
        what="the move no longer blocked by the deleted pod",
    )
    assert result["outcome"] == "done", result
    await deployment.assert_moved("alice")


async def test_a_copy_that_does_not_verify_stops_the_move_and_a_retry_finishes_it(deployment):
    kube = deployment.kube
    await deployment.home("alice", files=2000)
    deployment.sim.writer = deployment.sim.volume_dir(deployment.old["alice"]) / "busy.log"
    result = await mover(kube).apply("claim-alice")
    assert (result["outcome"], result["reason"]) == ("failed", "copy-changed")
    assert any("busy.log" in p for p in result["problems"]), result
    await deployment.assert_untouched("alice")
    old = await kube.core.read_persistent_volume(deployment.old["alice"])
    assert old.metadata.annotations[migrate.STEP_KEY] == migrate.FAILED
    assert old.spec.persistent_volume_reclaim_policy == "Retain"

    deployment.sim.writer = None
    result = await mover(kube).apply("claim-alice")
    assert result["outcome"] == "done", result
    await deployment.assert_moved("alice")


# --------------------------------------------------------------------------------------------------
# the way back


@pytest.mark.parametrize("checkpoint", ["copied", "new-retained", "old-deleted", "created"])
async def test_rollback_of_an_unfinished_move_puts_the_home_back_as_it_was(
    deployment, capsys, checkpoint
):
    kube = deployment.kube
    await deployment.home("alice", files=20)

    def stop(claim, name):
        if name == checkpoint:
            raise Interrupted(name)

    with pytest.raises(Interrupted):
        await mover(kube, checkpoint=stop).apply("claim-alice")
    status, out, _ = await run_cli(capsys, *cli_args(kube, "rollback", "alice"))
    assert status == 0, out
    await deployment.assert_untouched("alice")
    old = await kube.core.read_persistent_volume(deployment.old["alice"])
    assert old.spec.persistent_volume_reclaim_policy == "Delete"  # as before the move
    assert not any(k.startswith("nebari.dev/") for k in old.metadata.annotations or {})
    claims = await kube.core.list_namespaced_persistent_volume_claim(kube.namespace)
    assert [c.metadata.name for c in claims.items] == ["claim-alice"]
    new = await kube.core.read_persistent_volume(deployment.new["alice"])
    if checkpoint != "copied":  # the copy was retained for the swap: kept, and said so
        assert new.spec.persistent_volume_reclaim_policy == "Retain"
        assert new.spec.claim_ref is None or new.spec.claim_ref.uid
        assert f"kubectl delete pv {deployment.new['alice']}" in out
    # a volume for the next move, as a provisioner would make one (the kept copy is Released)
    await create_volume(
        kube,
        f"{kube.namespace}-alice-shared-2",
        ("ReadWriteMany",),
        RWX_CLASS,
        for_claim=migrate.temporary_name("claim-alice"),
    )
    pods = await kube.core.list_namespaced_pod(kube.namespace)
    assert pods.items == []
    assert (await mover(kube).apply("claim-alice"))["outcome"] == "done"  # and it can move again
    await deployment.assert_moved_again("alice")


async def test_rollback_after_the_move_rebinds_the_old_volume_and_keeps_the_copy(
    deployment, capsys
):
    kube = deployment.kube
    await deployment.home("alice", files=20)
    assert (await mover(kube).apply("claim-alice"))["outcome"] == "done"
    status, out, _ = await run_cli(capsys, *cli_args(kube, "rollback", "alice"))
    assert status == 0, out
    assert f"kubectl delete pv {deployment.new['alice']}" in out
    await deployment.assert_untouched("alice")
    new = await kube.core.read_persistent_volume(deployment.new["alice"])
    assert new.spec.persistent_volume_reclaim_policy == "Retain"
    assert (deployment.sim.volume_dir(deployment.new["alice"]) / "notebook.ipynb").exists()


# --------------------------------------------------------------------------------------------------
# the permissions docs/migrate.md lists


async def test_the_example_rbac_is_enough_for_plan_apply_status_and_rollback(deployment, capsys):
    kube = deployment.kube
    await deployment.home("alice", files=20)
    documents = list(yaml.safe_load_all((EXAMPLES / "rbac-migrate.yaml").read_text()))
    user = f"migrator-{kube.namespace}"
    subject = {"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}
    cluster_objects = []
    for doc in documents:
        doc["metadata"]["name"] = f"{doc['metadata']['name']}-{kube.namespace}"
        if "roleRef" in doc:
            doc["roleRef"]["name"] = doc["metadata"]["name"]
            doc["subjects"] = [subject]
        if doc["kind"] in ("Role", "RoleBinding"):
            doc["metadata"]["namespace"] = kube.namespace
            create = (
                kube.rbac.create_namespaced_role
                if doc["kind"] == "Role"
                else kube.rbac.create_namespaced_role_binding
            )
            await create(kube.namespace, doc)
        else:
            create = (
                kube.rbac.create_cluster_role
                if doc["kind"] == "ClusterRole"
                else kube.rbac.create_cluster_role_binding
            )
            await create(doc)
            cluster_objects.append(doc)
    try:
        config = kube.user_kubeconfig(user)
        args = ["-n", kube.namespace, "--kubeconfig", config]
        for argv in (
            ["plan", "--storage-class", RWX_CLASS, "--json"],
            ["apply", "alice", "--storage-class", RWX_CLASS, "--json"],
            ["status", "--json"],
            ["rollback", "alice", "--json"],
        ):
            status, out, err = await run_cli(capsys, "migrate", *argv, *args)
            assert (status, err) == (0, ""), (argv, out)
        await deployment.assert_untouched("alice")
        # without the cluster role: a clear error naming what is missing
        await kube.rbac.delete_cluster_role_binding(cluster_objects[-1]["metadata"]["name"])
        status, _, err = await run_cli(
            capsys, "migrate", "apply", "alice", "--storage-class", RWX_CLASS, *args
        )
        assert status == 2
        assert err.startswith("nebari-colocate: forbidden (403) to migrate apply")
        assert "docs/migrate.md lists the permissions migrate needs" in err
    finally:
        for doc in cluster_objects:
            delete = (
                kube.rbac.delete_cluster_role
                if doc["kind"] == "ClusterRole"
                else kube.rbac.delete_cluster_role_binding
            )
            with contextlib.suppress(ApiException):
                await delete(doc["metadata"]["name"])


async def test_a_claim_recreated_by_a_spawn_mid_swap_stops_the_move_and_keeps_both_volumes(
    deployment,
):
    """The moment between deleting the old claim and creating the new one: KubeSpawner would
    create an empty claim-{user} if a spawn came then.  The move must notice, not bind over it."""
    kube = deployment.kube
    await deployment.home("alice", files=20)

    def stop_there(claim, name):
        if name == "old-deleted":
            raise Interrupted(name)

    with pytest.raises(Interrupted):
        await mover(kube, checkpoint=stop_there).apply("claim-alice")
    await create_volume(kube, f"{kube.namespace}-alice-empty", ("ReadWriteMany",), RWX_CLASS)
    await kube.core.create_namespaced_persistent_volume_claim(
        kube.namespace,
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {
                "name": "claim-alice",
                "annotations": {"hub.jupyter.org/username": "alice"},
            },
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": RWX_CLASS,
                "volumeName": f"{kube.namespace}-alice-empty",
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    )
    await wait_bound(kube, "claim-alice")
    with pytest.raises(migrate.MigrateError, match="was recreated meanwhile"):
        await mover(kube).apply("claim-alice")
    for name in (deployment.old["alice"], deployment.new["alice"]):
        volume = await kube.core.read_persistent_volume(name)
        assert volume.spec.persistent_volume_reclaim_policy == "Retain"
    assert (deployment.sim.volume_dir(deployment.new["alice"]) / "notebook.ipynb").exists()
    assert (deployment.sim.volume_dir(deployment.old["alice"]) / "notebook.ipynb").exists()


async def test_a_move_that_gives_up_mid_swap_tells_the_user_an_administrator_must_finish_it(
    deployment, capsys
):
    """Given up after the home claim was recreated on the new volume (it stays marked: the claim
    is being swapped), the user's refusal must not say "try again in a few minutes"."""
    kube = deployment.kube
    await deployment.home("alice", files=5)
    new_volume = deployment.new["alice"]

    async def reserve_elsewhere(_claim, name):
        if name == "old-deleted":  # the new volume reserved for another claim: no bind
            await kube.core.patch_persistent_volume(
                new_volume,
                {"spec": {"claimRef": {"name": "someone-else", "namespace": kube.namespace}}},
            )

    with pytest.raises(migrate.MigrateError) as error:
        await mover(kube, checkpoint=reserve_elsewhere, bind_timeout=3).apply("claim-alice")
    assert "stays marked" in str(error.value) and "rollback" in str(error.value)
    claim = await kube.core.read_namespaced_persistent_volume_claim("claim-alice", kube.namespace)
    marks = claim.metadata.annotations or {}
    assert marks.get(MIGRATION_ANNOTATION) == "moving"
    assert marks.get(MIGRATION_STALLED_ANNOTATION)
    # what alice's next spawn is told, from the claim as the API has it
    pvc = kube.api_client.sanitize_for_serialization(claim)
    lab = builders.pod("jupyter-alice", user="alice", server="", claims=["claim-alice"])
    lab["metadata"]["namespace"] = kube.namespace
    decision = decide(lab, ClusterState.from_objects([pvc], namespace=kube.namespace), Policy())
    assert decision.reasons == ["home-being-moved"]
    text = messages.user_message(decision, lab, username="alice", server_name="")
    assert "stopped part-way" in text and "administrator" in text, text
    assert "few minutes" not in text, text
    # the way back: rollback puts the home on its old volume, unmarked
    await kube.core.patch_persistent_volume(
        new_volume, {"spec": {"claimRef": {"name": "claim-alice", "namespace": kube.namespace}}}
    )
    status, out, _ = await run_cli(capsys, *cli_args(kube, "rollback", "alice"))
    assert status == 0, out
    claim = await kube.core.read_namespaced_persistent_volume_claim("claim-alice", kube.namespace)
    marks = claim.metadata.annotations or {}
    assert MIGRATION_ANNOTATION not in marks and MIGRATION_STALLED_ANNOTATION not in marks


async def test_a_new_claim_that_never_binds_ends_apply_with_a_reason_and_rolls_back(
    deployment, capsys
):
    kube = deployment.kube
    await deployment.home("alice", files=5)
    await kube.core.delete_persistent_volume(deployment.new["alice"])  # nothing to bind to
    with pytest.raises(migrate.MigrateError) as error:
        await mover(kube, bind_timeout=3).apply("claim-alice")
    assert "the copy pod" in str(error.value) and "is not scheduled after 3 s" in str(error.value)
    assert "unbound immediate PersistentVolumeClaims" in str(error.value)
    status, out, _ = await run_cli(capsys, *cli_args(kube, "rollback", "alice"))
    assert status == 0, out
    await deployment.assert_untouched("alice")


# --------------------------------------------------------------------------------------------------
# two hands on one home (a cron job and a person, two terminals)


async def test_two_applies_at_once_end_as_one_move_and_the_second_says_who_holds_it(
    deployment, capsys
):
    kube = deployment.kube
    await deployment.home("alice", files=50)
    reached, go = asyncio.Event(), asyncio.Event()

    async def hold(_claim, name):
        if name == "retained" and not reached.is_set():  # the first run pauses after its read
            reached.set()
            await go.wait()

    # (a short lease: the second run sees the first renew it within a second or two)
    first = asyncio.ensure_future(
        mover(kube, checkpoint=hold, bind_timeout=5, lease_seconds=6).apply("claim-alice")
    )
    await reached.wait()
    try:
        second = await mover(kube, bind_timeout=5).apply("claim-alice")
        status, out, err = await run_cli(
            capsys,
            *cli_args(kube, "apply", "alice", "--storage-class", RWX_CLASS, "--timeout", "5"),
        )
    finally:
        go.set()
    try:
        first_result = await first
    except migrate.MigrateError as exc:  # (before leases: the first run gave up on a stale read)
        first_result = {"outcome": "error", "reason": str(exc)}

    pvc = await kube.core.read_namespaced_persistent_volume_claim("claim-alice", kube.namespace)
    assert MIGRATION_ANNOTATION not in (pvc.metadata.annotations or {})  # not marked again
    old = await kube.core.read_persistent_volume(deployment.old["alice"])
    assert old.metadata.annotations[migrate.STEP_KEY] == migrate.DONE  # not rewritten
    assert (first_result["outcome"], second["outcome"]) == ("done", "held"), (first_result, second)
    assert second["holder"].startswith(migrate._who())
    assert second["since"] and second["lease"] == migrate.temporary_name("claim-alice")
    assert (status, err) == (1, "")
    (line,) = out.strip().splitlines()
    assert line.startswith(
        f"alice (claim-alice): not done: another run holds this home's move ({second['holder']}, "
        f"since {second['since']}"
    )
    await deployment.assert_moved("alice")
    assert len(deployment.sim.copies) == 1
    leases = await coordination(kube).list_namespaced_lease(kube.namespace)
    assert leases.items == []  # released at the end


def lease_time(offset: float = 0.0) -> str:
    """A Lease MicroTime ``offset`` seconds from this host's now (another host's clock)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime(time.time() + offset))


async def another_runs_lease(kube, *, host="ops-laptop", pid="4242", seconds=60, skew=0.0):
    """The lease of a run on another host whose clock is ``skew`` seconds off this one's."""
    name = migrate.temporary_name("claim-alice")
    written = lease_time(skew)
    await coordination(kube).create_namespaced_lease(
        kube.namespace,
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": name,
                "annotations": {migrate.HOST_KEY: host, migrate.PID_KEY: pid},
            },
            "spec": {
                "holderIdentity": f"ops@{host} pid {pid} 0a1b2c",
                "leaseDurationSeconds": seconds,
                "acquireTime": written,
                "renewTime": written,
            },
        },
    )
    return name, written


@contextlib.asynccontextmanager
async def renewing(kube, name: str, skew: float, every: float = 1.0):
    """That run, alive: it renews its lease every ``every`` seconds, by its own clock."""
    renewals = 0

    async def renew():
        nonlocal renewals
        while True:
            await asyncio.sleep(every)
            await coordination(kube).patch_namespaced_lease(
                name, kube.namespace, {"spec": {"renewTime": lease_time(skew)}}
            )
            renewals += 1

    task = asyncio.ensure_future(renew())
    try:
        yield lambda: renewals
    finally:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task


async def apply_json(capsys, kube) -> tuple[int, dict, float]:
    argv = cli_args(kube, "apply", "alice", "--storage-class", RWX_CLASS, "--json")
    began = time.monotonic()
    status, out, _ = await run_cli(capsys, *argv)
    (row,) = json.loads(out)["results"]
    return status, row, time.monotonic() - began


async def test_a_live_run_whose_clock_is_90_s_behind_is_never_taken_over(deployment, capsys):
    kube = deployment.kube
    await deployment.home("alice", files=5)
    name, _ = await another_runs_lease(kube, skew=-90)
    watched = []
    async with renewing(kube, name, skew=-90) as renewals:
        for _ in range(2):  # a cron job and then a person
            status, row, took = await apply_json(capsys, kube)
            assert (status, row["outcome"]) == (1, "held"), row
            assert row["holder"] == "ops@ops-laptop pid 4242 0a1b2c"
            watched.append(took)
        renewed = renewals()
    print(f"held after {[round(t, 1) for t in watched]} s of watching (renewed {renewed} times)")
    await deployment.assert_untouched("alice")
    lease = await coordination(kube).read_namespaced_lease(name, kube.namespace)
    assert lease.spec.holder_identity == "ops@ops-laptop pid 4242 0a1b2c"


async def test_a_dead_runs_lease_an_hour_ahead_is_taken_over_once_unchanged_for_its_duration(
    deployment, capsys
):
    kube = deployment.kube
    await deployment.home("alice", files=5)
    _, written = await another_runs_lease(kube, seconds=5, skew=3600)
    status, row, took = await apply_json(capsys, kube)
    assert (status, row["outcome"]) == (0, "done"), row
    assert row["took_over"]["state"] == migrate.STALE
    assert row["took_over"]["renewed"] == written
    assert took >= 5, took  # watched unchanged for its whole duration first
    assert row["took_over"]["unchanged_seconds"] >= 5
    print(f"taken over and moved {took:.1f} s after the run started")
    await deployment.assert_moved("alice")


async def test_a_renewed_lease_naming_this_host_and_a_pid_not_running_here_is_not_taken_over(
    deployment, capsys
):
    """A container that carries this host's name: its process ids are not this host's."""
    kube = deployment.kube
    await deployment.home("alice", files=5)
    ended = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    pid = ended.stdout.strip()
    name, _ = await another_runs_lease(kube, host=socket.gethostname(), pid=pid)
    async with renewing(kube, name, skew=0):
        status, row, _ = await apply_json(capsys, kube)
    assert (status, row["outcome"]) == (1, "held"), row
    await deployment.assert_untouched("alice")


async def test_rollback_after_interleaved_applies_says_where_the_home_is_and_keeps_the_old_disk(
    deployment, capsys
):
    """What two applies without a lease left (the moved claim marked again, the old volume's
    step back to ``copying``); an older version of this command could leave it so."""
    kube = deployment.kube
    await deployment.home("alice", files=20)
    assert (await mover(kube).apply("claim-alice"))["outcome"] == "done"
    await kube.core.patch_namespaced_persistent_volume_claim(
        "claim-alice",
        kube.namespace,
        {"metadata": {"annotations": {MIGRATION_ANNOTATION: "moving"}}},
    )
    await kube.core.patch_persistent_volume(
        deployment.old["alice"],
        {"metadata": {"annotations": {migrate.STEP_KEY: migrate.COPYING}}},
    )

    status, out, _ = await run_cli(capsys, *cli_args(kube, "rollback", "alice", "--json"))
    assert status == 0, out
    (result,) = json.loads(out)["results"]
    pvc = await wait_bound(kube, "claim-alice")
    old = await kube.core.read_persistent_volume(deployment.old["alice"])
    if old.status.phase != "Bound" or old.spec.claim_ref.uid != pvc["metadata"]["uid"]:
        assert old.spec.persistent_volume_reclaim_policy == "Retain"  # never Delete unbound
    assert result.get("volume") == pvc["spec"]["volumeName"]  # where the home really is
    await deployment.assert_untouched("alice")  # back on the old volume, unmarked
    assert old.spec.persistent_volume_reclaim_policy == "Delete"  # bound again: as before
    new = await kube.core.read_persistent_volume(deployment.new["alice"])
    assert new.spec.persistent_volume_reclaim_policy == "Retain"  # the copy, with work since
    assert result["kept_volume"] == deployment.new["alice"]
    status, out, _ = await run_cli(capsys, *cli_args(kube, "status", "claim-alice", "--json"))
    (row,) = json.loads(out)["moves"]
    assert (row["step"], row["marked"]) == (None, False)


# --------------------------------------------------------------------------------------------------
# a move that cannot go on; a corrected class


async def test_a_move_that_gives_up_unmarks_the_home_and_says_how_to_clear_it(
    deployment, capsys, spawners
):
    kube = deployment.kube
    await deployment.home("alice", files=5)
    # nothing will ever bind the new claim: its class's provisioner does not run here
    await kube.core.delete_persistent_volume(deployment.new["alice"])
    status, out, err = await run_cli(
        capsys,
        *cli_args(kube, "apply", "alice", "--storage-class", UNPROVISIONED_CLASS, "--timeout", "3"),
    )
    assert (status, err) == (1, ""), out
    (line,) = out.strip().splitlines()
    assert line.startswith(
        f"alice (claim-alice): error: the copy pod {kube.namespace}/migrate-claim-alice is not "
        "scheduled after 3 s (--timeout)"
    )
    assert line.endswith(
        "The move gave up: claim-alice is unmarked and stays on its old volume "
        f"{deployment.old['alice']}, so alice can start servers again; fix that and apply "
        f"again, or clear the move with: nebari-colocate migrate rollback alice -n {kube.namespace}"
    )
    await deployment.assert_untouched("alice")
    status, out, _ = await run_cli(capsys, *cli_args(kube, "status", "--json"))
    (row,) = json.loads(out)["moves"]
    assert row["problem"].startswith("gave up: the copy pod")
    spawner = spawners.make("alice")
    await spawners.start(spawner)  # not refused "your home folder is being moved"
    assert spawner._colocation_decision.verdict == "colocate"


async def test_a_second_apply_with_another_class_moves_to_it_and_cleans_up_the_first(deployment):
    kube = deployment.kube
    await deployment.home("alice", files=20)
    # the provisioner's volume of the class meant (not reserved for a claim name: the
    # first class's temporary claim would otherwise get it)
    await kube.core.delete_persistent_volume(deployment.new["alice"])
    deployment.new["alice"] = f"{kube.namespace}-alice-shared-any"
    await create_volume(kube, deployment.new["alice"], ("ReadWriteMany",), RWX_CLASS)
    with pytest.raises(migrate.MigrateError, match="is not scheduled after 3 s"):
        await mover(kube, storage_class=UNPROVISIONED_CLASS, bind_timeout=3).apply("claim-alice")
    temporary = await kube.core.read_namespaced_persistent_volume_claim(
        migrate.temporary_name("claim-alice"), kube.namespace
    )
    assert temporary.spec.storage_class_name == UNPROVISIONED_CLASS

    result = await mover(kube, bind_timeout=10).apply("claim-alice")
    assert result["outcome"] == "done", result
    assert result["storage_class_changed"] == {"from": UNPROVISIONED_CLASS, "to": RWX_CLASS}
    await deployment.assert_moved("alice")


async def test_another_class_after_the_copy_is_verified_is_refused_naming_both(deployment, capsys):
    kube = deployment.kube
    await deployment.home("alice", files=20)

    def stop(_claim, name):
        if name == "copied":
            raise Interrupted(name)

    with pytest.raises(Interrupted):
        await mover(kube, checkpoint=stop).apply("claim-alice")
    status, out, err = await run_cli(
        capsys, *cli_args(kube, "apply", "alice", "--storage-class", UNPROVISIONED_CLASS)
    )
    assert (status, err) == (1, "")
    assert out.strip() == (
        f"alice (claim-alice): error: claim-alice is moving to storage class {RWX_CLASS} (its "
        f"copy is verified, step copied), not {UNPROVISIONED_CLASS}: finish it with "
        f"nebari-colocate migrate apply alice -n {kube.namespace} --storage-class {RWX_CLASS}, "
        f"or reset the move with nebari-colocate migrate rollback alice -n {kube.namespace} and "
        "apply again"
    )
    old = await kube.core.read_persistent_volume(deployment.old["alice"])
    assert old.metadata.annotations[migrate.STEP_KEY] == migrate.COPIED
    assert (await mover(kube).apply("claim-alice"))["outcome"] == "done"
    await deployment.assert_moved("alice")
