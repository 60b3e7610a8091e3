"""Volume gate: the one step of a kubelet that kwok cannot play (TEST SCAFFOLDING).

A kubelet starts no container of a pod before its volume manager saw every attachable volume of
the pod in its Node's ``status.volumesAttached``, which the attach/detach controller of
kube-controller-manager writes once the volume's VolumeAttachment is attached. kwok moves pods
through Stages that select on the pod object alone: no Stage can wait for another object, so with
kwok alone a pod whose volume cannot attach (Multi-Attach) would still report Running.

This process does that one wait and nothing else. For every pod bound to a node, Pending and not
being deleted, once each PersistentVolumeClaim volume of the pod resolves (claim -> bound PV) to a
unique volume name listed in the Node's ``status.volumesAttached`` (``kubernetes.io/csi/<driver>^
<volumeHandle>`` for a CSI PV; a PV of a plugin that needs no attach is not waited for), it sets
the pod condition ``PodReadyToStartContainers=True``: the condition a kubelet sets once the pod's
sandbox is up, after its volumes are attached and mounted. kwok's ``pod-running`` Stage
(kwok-stages.yaml) then reports the pod Running with its pod IP. A pod with no claim passes at once.

Run by ``ControlPlane`` as a subprocess and killed by ``stop()``:

    python volume_gate.py --kubeconfig admin.kubeconfig

It prints ``volume-gate: ready`` once its first lists succeeded, then one line per pod it opens.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import sys

from kubernetes_asyncio import client, config, watch
from kubernetes_asyncio.client.exceptions import ApiException

# Bound pods that no kubelet has reported on yet.
POD_SELECTOR = "spec.nodeName!=,status.phase=Pending"
CONDITION = "PodReadyToStartContainers"
CSI_PLUGIN = "kubernetes.io/csi"
# A safety net besides the watches: a claim bound after its pod was seen sends no pod or node event.
RESYNC_SECONDS = 1.0


def log(msg: str) -> None:
    print(f"volume-gate: {msg}", flush=True)


def opened(pod) -> bool:
    return any(c.type == CONDITION and c.status == "True" for c in (pod.status.conditions or []))


class VolumeGate:
    def __init__(self, core: client.CoreV1Api) -> None:
        self.core = core
        self.pending: dict[str, object] = {}  # uid -> pod
        self.attached: dict[str, set[str]] = {}  # node -> unique volume names
        self.needs: dict[str, set[str]] = {}  # uid -> the pod's attachable volumes, once known
        self.changed = asyncio.Event()

    async def needed_volumes(self, pod) -> set[str] | None:
        """Unique names of the pod's attachable volumes; None while a claim is not bound yet."""
        names: set[str] = set()
        for volume in pod.spec.volumes or []:
            source = volume.persistent_volume_claim
            if source is None:
                continue
            try:
                pvc = await self.core.read_namespaced_persistent_volume_claim(
                    source.claim_name, pod.metadata.namespace
                )
            except ApiException as e:
                if e.status == 404:
                    return None
                raise
            if not pvc.spec.volume_name or (pvc.status and pvc.status.phase != "Bound"):
                return None
            try:
                pv = await self.core.read_persistent_volume(pvc.spec.volume_name)
            except ApiException as e:
                if e.status == 404:
                    return None
                raise
            if pv.spec.csi is not None:
                names.add(f"{CSI_PLUGIN}/{pv.spec.csi.driver}^{pv.spec.csi.volume_handle}")
        return names

    async def try_open(self, pod) -> bool:
        uid = pod.metadata.uid
        needed = self.needs.get(uid)
        if needed is None:
            needed = await self.needed_volumes(pod)
            if needed is None:
                return False
            self.needs[uid] = needed  # a bound claim's volume never changes
        if not needed <= self.attached.get(pod.spec.node_name, set()):
            return False
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        patch = {
            "status": {
                "conditions": [{"type": CONDITION, "status": "True", "lastTransitionTime": now}]
            }
        }
        ns, name = pod.metadata.namespace, pod.metadata.name
        try:
            await self.core.patch_namespaced_pod_status(name, ns, patch)
        except ApiException as e:
            if e.status != 404:  # deleted meanwhile: nothing to open
                log(f"patching {ns}/{name} failed: {e.status} {e.reason}")
                return False
            return True
        log(f"{ns}/{name} on {pod.spec.node_name}: volumes attached {sorted(needed)}")
        return True

    async def sweep(self) -> None:
        for uid, pod in list(self.pending.items()):
            try:
                done = await self.try_open(pod)
            except ApiException as e:
                log(f"checking {pod.metadata.namespace}/{pod.metadata.name}: {e.status} {e.reason}")
                done = False
            if done and self.pending.get(uid) is pod:
                del self.pending[uid]
                self.needs.pop(uid, None)

    def on_pod(self, kind: str, pod) -> None:
        uid = pod.metadata.uid
        if kind == "DELETED" or pod.metadata.deletion_timestamp is not None or opened(pod):
            self.pending.pop(uid, None)
            self.needs.pop(uid, None)
        else:
            self.pending[uid] = pod
        self.changed.set()

    def on_node(self, kind: str, node) -> None:
        if kind == "DELETED":
            self.attached.pop(node.metadata.name, None)
        else:
            volumes = (node.status.volumes_attached if node.status else None) or []
            self.attached[node.metadata.name] = {v.name for v in volumes}
        self.changed.set()

    async def follow(self, list_fn, handle, **kwargs) -> None:
        first = True
        while True:
            try:
                items = await list_fn(**kwargs)
                for item in items.items:
                    handle("ADDED", item)
                if first:
                    first = False
                    self.listed.release()
                async with watch.Watch().stream(
                    list_fn,
                    resource_version=items.metadata.resource_version,
                    timeout_seconds=60,
                    **kwargs,
                ) as stream:
                    async for event in stream:
                        if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                            handle(event["type"], event["object"])
            except asyncio.CancelledError:
                raise
            except Exception as e:  # relist on anything: 410 Gone, a dropped connection, ...
                if not (isinstance(e, ApiException) and e.status == 410):
                    log(f"watch interrupted ({type(e).__name__}: {e}); relisting")
                await asyncio.sleep(0.2)

    async def run(self) -> None:
        self.listed = asyncio.Semaphore(0)
        followers = [
            asyncio.ensure_future(self.follow(self.core.list_node, self.on_node)),
            asyncio.ensure_future(
                self.follow(
                    self.core.list_pod_for_all_namespaces,
                    self.on_pod,
                    field_selector=POD_SELECTOR,
                )
            ),
        ]
        for _ in followers:
            await self.listed.acquire()
        log("ready")
        try:
            while True:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self.changed.wait(), RESYNC_SECONDS)
                self.changed.clear()
                await self.sweep()
        finally:
            for f in followers:
                f.cancel()


async def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    args = parser.parse_args(argv)
    api_client = await config.new_client_from_config(
        config_file=args.kubeconfig, persist_config=False
    )
    async with api_client:
        await VolumeGate(client.CoreV1Api(api_client)).run()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
