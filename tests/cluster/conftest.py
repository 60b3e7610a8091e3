"""Spawners driven against the real control plane.

``spawners`` builds real ColocatingKubeSpawner (or stock KubeSpawner) objects the way JupyterHub
does, with a minimal stand-in for JupyterHub's User (name, id, url: what KubeSpawner reads), and
stops every server it started at the end of the test.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from jupyterhub.objects import Hub, Server
from kubespawner import KubeSpawner
from traitlets.config import Config

from nebari_colocate import ColocatingKubeSpawner


class HubUser:
    """The parts of jupyterhub.user.User that KubeSpawner reads."""

    def __init__(self, name: str, uid: int = 1):
        self.name = name
        self.id = uid
        self.server = Server()
        self.url = f"/user/{name}/"
        self.escaped_name = name

    async def get_auth_state(self):
        return {}


class OrmSpawner:
    """The parts of jupyterhub.orm.Spawner a Spawner reads: its server name."""

    def __init__(self, name: str):
        self.name = name
        self.server = None
        self.state = {}


def base_config(namespace: str) -> Config:
    c = Config()
    ks = c.KubeSpawner
    ks.namespace = namespace
    ks.image = "quay.io/jupyter/base-notebook:latest"
    ks.start_timeout = 30
    ks.http_timeout = 5
    ks.delete_grace_period = 0  # no kubelet: a graceful delete would never complete
    ks.storage_pvc_ensure = True
    ks.pvc_name_template = "claim-{username}"
    ks.storage_capacity = "1Gi"
    ks.volumes = [{"name": "home", "persistentVolumeClaim": {"claimName": "claim-{username}"}}]
    ks.volume_mounts = [{"name": "home", "mountPath": "/home/jovyan"}]
    ks.cpu_guarantee = 0.1
    ks.mem_guarantee = "128M"
    ks.k8s_api_request_retry_timeout = 15
    return c


class Spawners:
    def __init__(self, kube, monkeypatch, uid_base: int = 1000):
        self.kube = kube
        self.started: list = []
        self._uid = uid_base
        self._monkeypatch = monkeypatch

    async def use_credentials(self, kubeconfig: str) -> None:
        """Make spawners created from now on (in this test's loop) use ``kubeconfig``.

        KubeSpawner loads the default kubeconfig once per process and shares one API client per
        event loop, so point both the default path and the default configuration at it, before
        the first spawner of the test is created.
        """
        from kubernetes_asyncio import config
        from kubernetes_asyncio.config import kube_config

        self._monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", kubeconfig)
        await config.load_kube_config(config_file=kubeconfig)

    def make(
        self,
        username: str,
        server: str = "",
        *,
        cls=ColocatingKubeSpawner,
        config: Config | None = None,
        **traits,
    ):
        c = base_config(self.kube.namespace)
        if config is not None:
            c.merge(config)
        for name, value in traits.items():
            setattr(c[cls.__name__], name, value)
        self._uid += 1
        spawner = cls(
            hub=Hub(),
            user=HubUser(username, self._uid),
            orm_spawner=OrmSpawner(server),
            config=c,
            api_token="test-token",
            oauth_client_id=f"jupyterhub-user-{username}",
            _mock=True,
        )
        return spawner

    async def start(self, spawner):
        """``spawner.start()`` as JupyterHub calls it; records the spawner for teardown."""
        self.started.append(spawner)
        return await spawner.start()

    async def stop_all(self):
        await asyncio.gather(*(s.stop(now=True) for s in self.started), return_exceptions=True)


@pytest.fixture
async def spawners(kube, monkeypatch):
    """Factory of spawners wired to this test's namespace (admin credentials until a test calls
    ``spawners.use_credentials``)."""
    s = Spawners(kube, monkeypatch)
    await s.use_credentials(kube.kubeconfig)
    yield s
    await s.stop_all()
    await stop_reflectors(kube.namespace)


async def stop_reflectors(namespace: str) -> None:
    """Stop the class-level reflectors KubeSpawner started for this namespace."""
    for key, reflector in list(KubeSpawner.reflectors.items()):
        if key[1] == namespace:
            KubeSpawner.reflectors.pop(key, None)
            with contextlib.suppress(Exception):
                await reflector.stop()
