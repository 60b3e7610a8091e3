"""Spawners built outside JupyterHub, for the cluster tests and the benchmarks (test scaffolding).

KubeSpawner needs a hub, a user and an ORM spawner; these are the minimal stand-ins for the parts
it reads, plus the base configuration that fits the test control plane.
"""

from __future__ import annotations

import contextlib
import itertools

_uids = itertools.count(1001)


class HubUser:
    """The parts of jupyterhub.user.User that KubeSpawner reads."""

    def __init__(self, name: str, uid: int = 1):
        from jupyterhub.objects import Server

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


def kubespawner_settings(namespace: str) -> dict:
    """The KubeSpawner settings of every test hub and test spawner on the test control plane:
    one shared home claim per user, small pods, servers stopped at once. Written once, here:
    ``base_config`` applies them, and so does the end-to-end hub's tests/e2e/jupyterhub_config.py
    (which loads this file by its path: JupyterHub runs it outside the test package)."""
    return {
        "namespace": namespace,
        "image": "quay.io/jupyter/base-notebook:latest",
        # stop servers at once: no test here is about the grace period
        "delete_grace_period": 0,
        "storage_pvc_ensure": True,
        "pvc_name_template": "claim-{username}",
        "storage_capacity": "1Gi",
        "volumes": [{"name": "home", "persistentVolumeClaim": {"claimName": "claim-{username}"}}],
        "volume_mounts": [{"name": "home", "mountPath": "/home/jovyan"}],
        "cpu_guarantee": 0.1,
        "mem_guarantee": "128M",
        "k8s_api_request_retry_timeout": 15,
    }


def base_config(namespace: str):
    """KubeSpawner settings for the test control plane: :func:`kubespawner_settings`, and the
    timeouts of a spawner started without a hub."""
    from traitlets.config import Config

    c = Config()
    ks = c.KubeSpawner
    for name, value in kubespawner_settings(namespace).items():
        setattr(ks, name, value)
    ks.start_timeout = 30
    ks.http_timeout = 5
    return c


def make_spawner(
    cls,
    namespace: str,
    username: str,
    server: str = "",
    *,
    config=None,
    api_token="test-token",
    **traits,
):
    """A KubeSpawner (or subclass) for ``username``'s server ``server`` in ``namespace``:
    ``base_config``, merged with ``config``, then ``traits`` set on ``cls``'s section."""
    from jupyterhub.objects import Hub

    c = base_config(namespace)
    if config is not None:
        c.merge(config)
    for name, value in traits.items():
        setattr(c[cls.__name__], name, value)
    return cls(
        hub=Hub(),
        user=HubUser(username, next(_uids)),
        orm_spawner=OrmSpawner(server),
        config=c,
        api_token=api_token,
        oauth_client_id=f"jupyterhub-user-{username}",
        _mock=True,
    )


async def stop_reflectors(namespace: str) -> None:
    """Stop the class-level reflectors KubeSpawner started for ``namespace``, and the live views
    of nebari_colocate."""
    from kubespawner import KubeSpawner

    from nebari_colocate.view import ClusterView

    await ClusterView.stop_all(namespace)

    for key, reflector in list(KubeSpawner.reflectors.items()):
        if key[1] == namespace:
            KubeSpawner.reflectors.pop(key, None)
            with contextlib.suppress(Exception):
                await reflector.stop()


def legacy_affinity(username: str, label: str = "hub.jupyter.org/username") -> dict:
    """KubeSpawner traits for the hard pod affinity deployments put on every user pod today (the
    one data-science-pack writes by hand in ``extra_pod_config``): all of a user's pods on one
    node."""
    return {
        "pod_affinity_required": [
            {
                "labelSelector": {"matchLabels": {label: username}},
                "topologyKey": "kubernetes.io/hostname",
            }
        ]
    }
