"""Spawners driven against the real control plane.

``spawners`` builds real ColocatingKubeSpawner (or stock KubeSpawner) objects the way JupyterHub
does, with a minimal stand-in for JupyterHub's User (name, id, url: what KubeSpawner reads), and
stops every server it started at the end of the test.
"""

from __future__ import annotations

import asyncio

import pytest
from traitlets.config import Config

from nebari_colocate import ColocatingKubeSpawner
from tests.support.spawning import make_spawner, stop_reflectors
from tests.support.z2jh import USER_SCHEDULER, USER_SCHEDULER_PROFILE


class Spawners:
    def __init__(self, kube, monkeypatch):
        self.kube = kube
        self.started: list = []
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
        return make_spawner(cls, self.kube.namespace, username, server, config=config, **traits)

    async def start(self, spawner):
        """``spawner.start()`` as JupyterHub calls it; records the spawner for teardown."""
        self.started.append(spawner)
        return await spawner.start()

    async def stop_all(self):
        await asyncio.gather(*(s.stop(now=True) for s in self.started), return_exceptions=True)


@pytest.fixture(scope="session")
def user_scheduler(control_plane) -> str:
    """zero-to-jupyterhub's user-scheduler beside the cluster's scheduler (session long)."""
    control_plane.start_scheduler("user", [USER_SCHEDULER_PROFILE])
    return USER_SCHEDULER


@pytest.fixture
async def spawners(kube, monkeypatch):
    """Factory of spawners wired to this test's namespace (admin credentials until a test calls
    ``spawners.use_credentials``)."""
    s = Spawners(kube, monkeypatch)
    await s.use_credentials(kube.kubeconfig)
    yield s
    await s.stop_all()
    await stop_reflectors(kube.namespace)
