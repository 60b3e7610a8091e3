"""Single-user server stub: TEST SCAFFOLDING, not jupyterhub-singleuser.

The test control plane runs no containers: kwok (tests/kube/kwok-stages.yaml) marks a bound pod
Running with a podIP in 127.0.0.0/8, and nothing listens there. JupyterHub, once KubeSpawner
reports the pod running, waits for an HTTP answer at ``http://<podIP>:<port><base_url>api``
before it calls the server ready, adds the proxy route and reports it ready in the REST API.

This script stands in for the server process of every pod in one namespace: it watches the pods
and, for each Running pod with a podIP in 127.0.0.0/8, listens on that IP and the pod's first
container port (8888, KubeSpawner's default) and answers every request with 200 and a small JSON
body naming the pod, as jupyter_server's ``GET <base_url>api`` would, with the
``X-JupyterHub-Version`` header the hub reads from that response. When the pod goes away it stops
listening. It never authenticates anyone and serves nothing else: it only lets the hub's
"is the server up?" check succeed for a pod that kwok says is running.

    python singleuser_stub.py --kubeconfig admin.kubeconfig --namespace NS

It prints ``singleuser-stub: ready`` once its first list of pods succeeded, then one line per
address it starts or stops serving.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import sys

import jupyterhub
from kubernetes_asyncio import client, config, watch
from kubernetes_asyncio.client.exceptions import ApiException
from tornado import httpserver, web

LOOPBACK = ipaddress.ip_network("127.0.0.0/8")
DEFAULT_PORT = 8888


def log(msg: str) -> None:
    print(f"singleuser-stub: {msg}", flush=True)


class Answer(web.RequestHandler):
    """200 with the pod's identity for any path and method the hub (or a test) sends."""

    def initialize(self, pod: dict) -> None:
        self.pod = pod

    def _answer(self) -> None:
        self.set_header("Content-Type", "application/json")
        self.set_header("X-JupyterHub-Version", jupyterhub.__version__)
        self.finish(json.dumps({"version": "stub", "path": self.request.path, **self.pod}))

    def get(self, *_):
        self._answer()

    def post(self, *_):
        self._answer()

    def head(self, *_):
        self.set_header("X-JupyterHub-Version", jupyterhub.__version__)
        self.finish()


class Stub:
    def __init__(self, core: client.CoreV1Api, namespace: str) -> None:
        self.core = core
        self.namespace = namespace
        self.servers: dict[str, tuple[str, int, httpserver.HTTPServer]] = {}  # uid -> server

    @staticmethod
    def address(pod) -> tuple[str, int] | None:
        status = pod.status
        if pod.metadata.deletion_timestamp is not None or status is None:
            return None
        if status.phase != "Running" or not status.pod_ip:
            return None
        if ipaddress.ip_address(status.pod_ip) not in LOOPBACK:
            log(f"not serving {pod.metadata.name}: podIP {status.pod_ip} is not loopback")
            return None
        port = DEFAULT_PORT
        for container in pod.spec.containers or []:
            for p in container.ports or []:
                port = p.container_port
                break
            break
        return status.pod_ip, port

    def serve(self, pod) -> None:
        uid = pod.metadata.uid
        address = self.address(pod)
        if address is None:
            self.release(uid, pod.metadata.name)
            return
        current = self.servers.get(uid)
        if current is not None and current[:2] == address:
            return
        self.release(uid, pod.metadata.name)
        ip, port = address
        identity = {"pod": pod.metadata.name, "podIP": ip, "node": pod.spec.node_name}
        app = web.Application([(r"/(.*)", Answer, {"pod": identity})])
        server = httpserver.HTTPServer(app)
        try:
            server.listen(port, address=ip)
        except OSError as e:
            log(f"cannot listen on {ip}:{port} for {pod.metadata.name}: {e}")
            return
        self.servers[uid] = (ip, port, server)
        log(f"serving {self.namespace}/{pod.metadata.name} at {ip}:{port}")

    def release(self, uid: str, name: str) -> None:
        current = self.servers.pop(uid, None)
        if current is not None:
            ip, port, server = current
            server.stop()
            log(f"stopped serving {self.namespace}/{name} at {ip}:{port}")

    async def run(self) -> None:
        ready = False
        while True:
            try:
                pods = await self.core.list_namespaced_pod(self.namespace)
                seen = set()
                for pod in pods.items:
                    seen.add(pod.metadata.uid)
                    self.serve(pod)
                for uid in set(self.servers) - seen:
                    self.release(uid, uid)
                if not ready:
                    log("ready")
                    ready = True
                w = watch.Watch()
                async with w.stream(
                    self.core.list_namespaced_pod,
                    self.namespace,
                    resource_version=pods.metadata.resource_version,
                    timeout_seconds=60,
                ) as stream:
                    async for event in stream:
                        pod = event["object"]
                        if event["type"] == "DELETED":
                            self.release(pod.metadata.uid, pod.metadata.name)
                        elif event["type"] in ("ADDED", "MODIFIED"):
                            self.serve(pod)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # relist on anything: 410 Gone, a dropped connection, ...
                if not (isinstance(e, ApiException) and e.status == 410):
                    log(f"watch interrupted ({type(e).__name__}: {e}); relisting")
                await asyncio.sleep(0.2)


async def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--namespace", required=True)
    args = parser.parse_args(argv)
    api_client = await config.new_client_from_config(
        config_file=args.kubeconfig, persist_config=False
    )
    async with api_client:
        await Stub(client.CoreV1Api(api_client), args.namespace).run()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
