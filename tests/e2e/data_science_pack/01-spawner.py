# A faithful replica of the parts of data-science-pack's config/jupyterhub/01-spawner.py that
# matter to nebari-colocate (read from nebari-dev/data-science-pack; written here, not copied):
# the hard-coded storage_access_modes, slug_scheme "escape", the per-user home claim, the chart
# label nebari.dev/colocate-user: "{username}" with the hand-written required pod affinity on it
# in extra_pod_config, an async profile_list, and the pre_spawn_hook that creates the per-user
# RWO workspace claim nebi-workspaces-{slug} through the spawner's API client.
# ruff: noqa: F821 - `c`, `get_config` and `get_chart_config` come from the hub config
import logging
import string

import escapism
from kubernetes_asyncio.client.rest import ApiException
from kubespawner.objects import make_pvc

log = logging.getLogger(__name__)

c.KubeSpawner.storage_pvc_ensure = True
c.KubeSpawner.storage_capacity = get_config("custom.storage-capacity", "1Gi")
c.KubeSpawner.storage_access_modes = ["ReadWriteOnce"]
c.KubeSpawner.slug_scheme = "escape"
c.KubeSpawner.pvc_name_template = "claim-{username}"
c.KubeSpawner.volumes = [
    {"name": "home", "persistentVolumeClaim": {"claimName": "claim-{username}"}},
]
c.KubeSpawner.volume_mounts = [{"name": "home", "mountPath": "/home/jovyan"}]

c.KubeSpawner.extra_labels = {
    **get_config("singleuser.extraLabels", {}),
    "nebari.dev/colocate-user": "{username}",
}
c.KubeSpawner.extra_pod_config = {
    "affinity": {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {
                        "matchExpressions": [
                            {
                                "key": "nebari.dev/colocate-user",
                                "operator": "In",
                                "values": ["{username}"],
                            }
                        ]
                    },
                    "topologyKey": "kubernetes.io/hostname",
                }
            ]
        }
    },
    "securityContext": {"fsGroup": 100, "fsGroupChangePolicy": "OnRootMismatch"},
}

_profiles = get_config("custom.profiles", [])


async def _render_profile_list(spawner):
    """data-science-pack filters profiles by the user's groups; every user sees all here."""
    await spawner.user.get_auth_state()
    return [dict(p) for p in _profiles]


if _profiles:
    c.KubeSpawner.profile_list = _render_profile_list


async def _ensure_workspace_pvc(spawner):
    username = spawner.user.name
    safe_chars = set(string.ascii_lowercase + string.digits)
    slug = escapism.escape(username, safe=safe_chars, escape_char="-").lower()
    pvc_name = f"nebi-workspaces-{slug}"
    pvc = make_pvc(
        name=pvc_name,
        storage_class=get_config("custom.workspace-storage-class", "") or None,
        access_modes=["ReadWriteOnce"],
        selector=None,
        storage=get_config("custom.workspace-storage-capacity", "1Gi"),
        labels={"app": "nebi-workspaces", "hub.jupyter.org/username": slug},
    )
    try:
        await spawner.api.create_namespaced_persistent_volume_claim(
            namespace=spawner.namespace, body=pvc
        )
    except ApiException as exc:
        if exc.status != 409:
            raise
    return pvc_name


async def _pre_spawn_hook(spawner):
    try:
        workspace = await _ensure_workspace_pvc(spawner)
    except Exception:
        log.exception("pre-spawn: workspace PVC setup FAILED for %s", spawner.user.name)
        return
    spawner.volumes.append(
        {"name": "nebi-workspaces", "persistentVolumeClaim": {"claimName": workspace}}
    )
    spawner.volume_mounts.append(
        {"name": "nebi-workspaces", "mountPath": "/var/lib/nebi/workspaces"}
    )


c.KubeSpawner.pre_spawn_hook = _pre_spawn_hook
