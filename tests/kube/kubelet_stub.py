"""Kubelet stub: TEST SCAFFOLDING, not a kubelet.

The test control plane has no kubelet and no container runtime, so a pod bound by kube-scheduler
would stay Pending forever. This script watches pods in all namespaces and, for every pod that has
``spec.nodeName`` set, no ``deletionTimestamp`` and phase ``Pending``, patches its status the way a
kubelet would report a started pod: phase ``Running``, ``podIP`` 127.0.0.X (X from a counter,
2..254, loopback only), ``hostIP`` 127.0.0.1, conditions PodScheduled/Initialized/ContainersReady/
Ready True, and a ready, started, running ``containerStatuses`` entry for every container. That is
what KubeSpawner's ``is_pod_running`` waits for. No container ever runs and nothing listens on the
pod IPs.

Run by ``ControlPlane`` (``kubelet_stub=True``) as a subprocess and killed by ``stop()``:

    python kubelet_stub.py --kubeconfig admin.kubeconfig

It prints ``kubelet-stub: ready`` once its first list of pods succeeded, then one line per pod it
marks Running. Pods annotated ``kubelet-stub.nebari.dev/hold: "true"`` are left Pending.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import sys

from kubernetes_asyncio import client, config, watch
from kubernetes_asyncio.client.exceptions import ApiException

# Only bound pods that a kubelet has not reported on yet.
FIELD_SELECTOR = "spec.nodeName!=,status.phase=Pending"
HOST_IP = "127.0.0.1"
# A pod with this annotation stays Pending once bound, as on a node whose kubelet cannot start it
# (a volume that will not attach, an image that will not pull): tests of event-driven verdicts.
HOLD_ANNOTATION = "kubelet-stub.nebari.dev/hold"


def log(msg: str) -> None:
    print(f"kubelet-stub: {msg}", flush=True)


class KubeletStub:
    def __init__(self, core: client.CoreV1Api) -> None:
        self.core = core
        self._counter = 0
        self._ip_by_uid: dict[str, str] = {}

    def pod_ip(self, uid: str) -> str:
        ip = self._ip_by_uid.get(uid)
        if ip is None:
            ip = f"127.0.0.{2 + self._counter % 253}"
            self._counter += 1
            self._ip_by_uid[uid] = ip
        return ip

    @staticmethod
    def wants_status(pod) -> bool:
        held = (pod.metadata.annotations or {}).get(HOLD_ANNOTATION) == "true"
        return bool(
            pod.spec.node_name
            and not held
            and pod.metadata.deletion_timestamp is None
            and (pod.status is None or pod.status.phase == "Pending")
        )

    def status_patch(self, pod) -> dict:
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        ip = self.pod_ip(pod.metadata.uid)
        conditions = [
            {"type": t, "status": "True", "lastTransitionTime": now, "lastProbeTime": None}
            for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
        ]
        statuses = [
            {
                "name": c.name,
                "image": c.image or "stub",
                "imageID": f"stub://{c.image or 'stub'}",
                "containerID": f"stub://{pod.metadata.uid}/{c.name}",
                "ready": True,
                "started": True,
                "restartCount": 0,
                "state": {"running": {"startedAt": now}},
            }
            for c in pod.spec.containers or []
        ]
        return {
            "status": {
                "phase": "Running",
                "podIP": ip,
                "podIPs": [{"ip": ip}],
                "hostIP": HOST_IP,
                "hostIPs": [{"ip": HOST_IP}],
                "startTime": now,
                "conditions": conditions,
                "containerStatuses": statuses,
            }
        }

    async def handle(self, pod) -> None:
        if not self.wants_status(pod):
            return
        ns, name = pod.metadata.namespace, pod.metadata.name
        patch = self.status_patch(pod)
        try:
            await self.core.patch_namespaced_pod_status(name, ns, patch)
        except ApiException as e:
            if e.status != 404:  # deleted meanwhile: nothing to report
                log(f"patching {ns}/{name} failed: {e.status} {e.reason} {e.body}")
            return
        log(f"{ns}/{name} on {pod.spec.node_name}: Running, podIP {patch['status']['podIP']}")

    async def run(self) -> None:
        ready = False
        while True:
            try:
                pods = await self.core.list_pod_for_all_namespaces(field_selector=FIELD_SELECTOR)
                if not ready:
                    log("ready")
                    ready = True
                for pod in pods.items:
                    await self.handle(pod)
                w = watch.Watch()
                async with w.stream(
                    self.core.list_pod_for_all_namespaces,
                    field_selector=FIELD_SELECTOR,
                    resource_version=pods.metadata.resource_version,
                    timeout_seconds=60,
                ) as stream:
                    async for event in stream:
                        if event["type"] in ("ADDED", "MODIFIED"):
                            await self.handle(event["object"])
            except asyncio.CancelledError:
                raise
            except Exception as e:  # relist on anything: 410 Gone, a dropped connection, ...
                if not (isinstance(e, ApiException) and e.status == 410):
                    log(f"watch interrupted ({type(e).__name__}: {e}); relisting")
                await asyncio.sleep(0.2)


async def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    args = parser.parse_args(argv)
    api_client = await config.new_client_from_config(
        config_file=args.kubeconfig, persist_config=False
    )
    async with api_client:
        await KubeletStub(client.CoreV1Api(api_client)).run()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
