"""Nebari's JupyterHub helm release, as zero-to-jupyterhub runs it in the hub, from the installed
``nebari`` package (``nebari==2025.10.1``; scripts/test-e2e's ``nebari`` leg installs it).

Nebari's hub config is four ``hub.extraConfig`` strings (``01-theme.py`` ... ``04-auth.py``)
that its terraform module reads with ``file()`` beside the module's ``values.yaml`` and passes,
with a ``custom`` map of values (``main.tf``), to the zero-to-jupyterhub 4.2.0 chart; the chart's
``jupyterhub_config.py`` applies its own settings, then runs every ``hub.extraConfig`` string in
key order in one namespace with ``c`` and ``get_config`` defined, and ``z2jh.get_config`` reads
the values.  Everything here is read from the package at test time; nothing of Nebari's is
copied into this repository.

Stubbed, because they need Keycloak: the login and the user's auth state
(:class:`KeycloakStub`, in place of ``04-auth.py``'s ``KeyCloakOAuthenticator``, which stays
defined).  Nothing here needs conda-store: with ``jhub-apps-enabled`` false, ``02-spawner.py``
never calls it, and ``03-profiles.py`` reads conda-store's claim and paths from the values only.

Not played: the chart's user scheduler and priority class (``scheduling.userScheduler`` and
``podPriority`` are enabled in Nebari's values): the control plane's one kube-scheduler, with the
same filters, places the pods.
"""

from __future__ import annotations

import copy
import importlib.util
import re
from pathlib import Path
from typing import Any

#: the module of Nebari's stage that deploys JupyterHub, inside the ``_nebari`` package
MODULE = Path("stages/kubernetes_services/template/modules/kubernetes/services/jupyterhub")
#: the hub config strings, in the order main.tf lists them (the chart runs them by key)
FILES = ("01-theme.py", "02-spawner.py", "03-profiles.py", "04-auth.py")
#: the node group keys Nebari's AWS provider labels nodes with, and its taint on every group
#: but general (docs/quickstart-nebari.md)
GROUP_KEY = "dedicated"
NEBARI_TAINT = {"key": "dedicated", "value": "nebari", "effect": "NoSchedule"}


def module_dir() -> Path:
    """Nebari's jupyterhub module in the installed ``nebari`` package."""
    spec = importlib.util.find_spec("_nebari")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "the nebari package is not installed: scripts/test-e2e's nebari leg installs "
            "nebari==2025.10.1 (NEBARI_COLOCATE_E2E_LINES=nebari)"
        )
    return Path(next(iter(spec.submodule_search_locations))) / MODULE


def hub_files() -> dict[str, str]:
    """``hub.extraConfig`` as main.tf passes it: file name -> the file's text."""
    files = module_dir() / "files" / "jupyterhub"
    return {name: (files / name).read_text() for name in FILES}


def main_tf_custom_keys() -> set[str]:
    """The keys of the ``custom`` map main.tf passes to the chart (what ``z2jh.get_config
    ("custom.<key>")`` can read)."""
    text = (module_dir() / "main.tf").read_text()
    block = re.search(r"\n\s*custom = \{\n(.*?)\n\s*environments\s*=", text, re.S)
    if block is None:
        raise RuntimeError(f"no custom = {{...}} block in {module_dir() / 'main.tf'}")
    return {*re.findall(r"^\s{8}([a-z][a-z0-9-]*)\s*=", block.group(1), re.M), "environments"}


def merged(base: Any, override: Any) -> Any:
    """Helm's merge of values files (and Nebari's ``jupyterhub.overrides``): maps merge, lists
    and scalars replace."""
    if isinstance(base, dict) and isinstance(override, dict):
        out = dict(base)
        for key, value in override.items():
            out[key] = merged(base[key], value) if key in base else copy.deepcopy(value)
        return out
    return copy.deepcopy(override)


def values(namespace: str, profiles: list[dict], overrides: dict | None = None) -> dict:
    """The release's values: Nebari's values.yaml, main.tf's map (``custom``, the four hub
    files), then ``overrides`` (nebari-config.yaml's ``jupyterhub.overrides``)."""
    import yaml

    share = f"jupyterhub-{namespace}-share"
    custom = {
        "namespace": namespace,
        "external-url": "127.0.0.1",
        "theme": {"hub_title": "Nebari", "welcome": "Welcome to the nebari-colocate e2e hub"},
        "profiles": profiles,
        "argo-workflows-enabled": False,
        "home-pvc": share,  # home-pvc and shared-pvc are one claim (jupyterhub.tf)
        "shared-pvc": share,
        "conda-store-pvc": f"conda-store-{namespace}-share",
        "conda-store-mount": "/home/conda",
        "default-conda-store-namespace": "nebari-git",
        "conda-store-service-name": "conda-store-stub:8080",
        "conda-store-jhub-apps-token": "",
        "jhub-apps-enabled": False,
        "jhub-apps-overrides": "{}",
        "initial-repositories": "[]",
        "node-taint-tolerations": [dict(NEBARI_TAINT, operator="Equal")],
        "skel-mount": {"name": "etc-skel", "namespace": namespace},
        "extra-mounts": {},
        "environments": {},
    }
    missing = main_tf_custom_keys() - set(custom)
    if missing:
        raise RuntimeError(f"main.tf passes custom keys this test does not: {sorted(missing)}")
    with open(module_dir() / "values.yaml") as f:
        release = yaml.safe_load(f)
    # main.tf's map: hub.config (Nebari's Authenticator settings; the KeyCloakOAuthenticator
    # ones need Keycloak), singleuser.nodeSelector (the user node group)
    release = merged(
        release,
        {
            "custom": custom,
            "hub": {
                "extraConfig": hub_files(),
                "config": {"Authenticator": {"enable_auth_state": True}},
            },
            "singleuser": {"nodeSelector": {GROUP_KEY: "user"}},
        },
    )
    return merged(release, overrides or {})


def keycloak_state(username: str) -> dict:
    """The auth state Nebari's KeyCloakOAuthenticator stores: Keycloak's userinfo."""
    return {
        "oauth_user": {
            "preferred_username": username,
            "groups": ["/developer"],
            "sub": f"sub-{username}",
        },
        "groups_with_permission_to_mount": [],
    }


def _keycloak_stub() -> type:
    from jupyterhub.auth import DummyAuthenticator

    class KeycloakStub(DummyAuthenticator):  # type: ignore[misc]
        """Keycloak's part of Nebari's KeyCloakOAuthenticator: a password login (the e2e
        harness's) that stores Keycloak's auth state, and the refresh Nebari asks before every
        spawn (``refresh_pre_spawn``), which stores it for a user created through the API."""

        async def authenticate(self, handler: Any, data: dict) -> dict | None:
            name = await super().authenticate(handler, data)
            return None if name is None else {"name": name, "auth_state": keycloak_state(name)}

        async def refresh_user(self, user: Any, handler: Any = None) -> dict:
            return {"name": user.name, "auth_state": keycloak_state(user.name)}

    return KeycloakStub


def chart_settings(c: Any, get_config: Any) -> None:
    """What the zero-to-jupyterhub 4.2.0 chart's own ``jupyterhub_config.py`` sets from these
    values before ``hub.extraConfig`` (the parts a pod or the spawner reads), in its idioms."""
    c.JupyterHub.tornado_settings = {"slow_spawn_timeout": 0}
    c.Spawner.consecutive_failure_limit = get_config("hub.consecutiveFailureLimit", 5)
    c.KubeSpawner.environment = get_config("singleuser.extraEnv", {})
    c.KubeSpawner.node_selector = get_config("singleuser.nodeSelector", {})
    c.KubeSpawner.cpu_limit = float(get_config("singleuser.cpu.limit"))
    c.KubeSpawner.cpu_guarantee = 0.1  # Nebari's 1 CPU per server, small for the test nodes
    c.KubeSpawner.mem_limit = get_config("singleuser.memory.limit")
    c.KubeSpawner.mem_guarantee = "128M"
    c.KubeSpawner.node_affinity_preferred.append(
        {
            "weight": 100,
            "preference": {
                "matchExpressions": [
                    {"key": "hub.jupyter.org/node-purpose", "operator": "In", "values": ["user"]}
                ]
            },
        }
    )
    for key in ("hub.jupyter.org/dedicated", "hub.jupyter.org_dedicated"):
        c.KubeSpawner.tolerations.append(
            {"key": key, "operator": "Equal", "value": "user", "effect": "NoSchedule"}
        )
    assert get_config("singleuser.storage.type") == "static"
    c.KubeSpawner.storage_pvc_ensure = False
    c.KubeSpawner.volumes = [
        {
            "name": "home",
            "persistentVolumeClaim": {"claimName": get_config("singleuser.storage.static.pvcName")},
        }
    ]
    c.KubeSpawner.volume_mounts = [
        {
            "mountPath": get_config("singleuser.storage.homeMountPath", "/home/jovyan"),
            "name": "home",
            "subPath": get_config("singleuser.storage.static.subPath", "{username}"),
        }
    ]
    c.KubeSpawner.volumes.extend(get_config("singleuser.storage.extraVolumes", []))
    c.KubeSpawner.volume_mounts.extend(get_config("singleuser.storage.extraVolumeMounts", []))
    set_hub_config(c, get_config("hub.config", {}) or {})


def set_hub_config(c: Any, config: dict) -> None:
    """``hub.config``: trait values by class (Nebari's Authenticator.enable_auth_state)."""
    for section, traits in config.items():
        for trait, value in traits.items():
            setattr(c[section], trait, value)


def run(c: Any, get_config: Any, z2jh: Any) -> Any:
    """The chart's settings, then every ``hub.extraConfig`` string in key order, in one
    namespace with ``c``, ``get_config`` and ``z2jh`` (importable as in the hub image); then the
    Keycloak stub in place of the login Keycloak gives.  Returns ``c`` (a file may rebind it,
    as ``02-spawner.py`` does with jhub-apps)."""
    import os
    import secrets
    import sys

    # Nebari stores Keycloak's auth state (hub.config: Authenticator.enable_auth_state)
    os.environ.setdefault("JUPYTERHUB_CRYPT_KEY", secrets.token_hex(32))
    sys.modules["z2jh"] = z2jh
    chart_settings(c, get_config)
    scope = {"c": c, "get_config": get_config, "__name__": "__main__"}
    for key, text in sorted((get_config("hub.extraConfig", {}) or {}).items()):
        print(f"Loading extra config: {key}")
        exec(compile(text, key, "exec"), scope)
    c = scope["c"]
    c.JupyterHub.authenticator_class = _keycloak_stub()
    c.Authenticator.refresh_pre_spawn = True  # Nebari's KeyCloakOAuthenticator setting
    return c
