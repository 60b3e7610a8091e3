"""The one-call switch of a zero-to-jupyterhub deployment: helm values, spawner, templates.

In the hub image, ``z2jh.get_config`` reads the chart's values; it exists only there, so it is
imported lazily.  One snippet in ``hub.extraConfig`` (which zero-to-jupyterhub runs after the
chart's settings, ``hub.config`` and every ``jupyterhub_config.d`` file, such as
data-science-pack's ``01-spawner.py`` and ``02-jhub-apps.py``)::

    from nebari_colocate.helm import configure
    configure(c)

turns the deployment over without a fork of its config files
(``docs/quickstart-data-science-pack.md``):

- the spawner class: KubeSpawner becomes ColocatingKubeSpawner; the class jhub-apps built on
  KubeSpawner is built again, by jhub-apps' own ``subclass_spawner``, on ColocatingKubeSpawner;
- a hand-written required pod affinity that keeps a user's pods together (on the co-location
  label key, or on ``hub.jupyter.org/username``) is taken out of ``extra_pod_config`` and
  ``pod_affinity_required``: the spawner emits its own, only when a volume needs it;
- a hard-coded ``storage_access_modes`` is made to follow ``storage_access_mode`` (a single mode
  written there and no ``custom.storage-access-mode`` becomes the mode);
- with jhub-apps, the templates this package ships for jhub-apps' pages go first in
  ``template_paths`` (the reason of a refused spawn on the pages jhub-apps replaces);
- the settings are validated: a bad value stops the hub at start with a message naming it.

Calling it again changes nothing more.

Keys (all optional)::

    custom:
      storage-access-mode: ReadWriteMany      # or ReadWriteOnce (default)
      storage-class: nfs-client               # "" means unset (the chart's class stays)
      colocate-label-key: nebari.dev/colocate-user
      colocate-premium-resources: [nvidia.com/gpu, amd.com/gpu]
      colocate-premium-node-policy: warn      # allow | warn | refuse
      colocate-check-timeout: 5
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from traitlets.config import Config

from .affinity import drop_pod_affinity_terms, selects_on
from .config import ACCESS_MODES, DEFAULT_LABEL_KEY, caseless_choice, check_config
from .objects import HOSTNAME, USERNAME_LABEL, JsonDict, Obj

log = logging.getLogger("nebari_colocate")

#: templates for jhub-apps' pages (not_running.html, home.html), ahead of jhub-apps' own
JHUB_APPS_TEMPLATES = Path(__file__).resolve().parent / "templates" / "jhub_apps"

#: helm key under ``custom`` -> ColocatingKubeSpawner trait
KEYS = {
    "storage-access-mode": "storage_access_mode",
    "storage-class": "storage_class",
    "colocate-label-key": "colocation_label_key",
    "colocate-premium-resources": "premium_resources",
    "colocate-premium-node-policy": "premium_node_policy",
    "colocate-check-timeout": "colocation_check_timeout",
}


#: z2jh's ``get_config(key, default)``: a helm value by its dotted key
GetConfig = Callable[[str, Any], Any]


class HelmValuesError(ValueError):
    """A ``custom.*`` value that cannot be used; the message names the key."""


def _z2jh_get_config() -> GetConfig:
    try:
        from z2jh import get_config
    except ImportError as exc:
        raise HelmValuesError(
            "z2jh.get_config is not importable: nebari_colocate.helm reads zero-to-jupyterhub "
            "helm values and works only in the hub image (pass get_config= elsewhere)"
        ) from exc
    getter: GetConfig = get_config  # z2jh is untyped
    return getter


def values_to_config(custom: Obj) -> JsonDict:
    """Trait values from the ``custom`` mapping; ``""`` means unset (None)."""
    if not isinstance(custom, Mapping):
        raise HelmValuesError(f"custom must be a mapping, not {type(custom).__name__}")
    settings: JsonDict = {}
    for key, value in custom.items():
        if not isinstance(key, str) or (not key.startswith("colocate-") and key not in KEYS):
            continue
        if key not in KEYS:
            raise HelmValuesError(
                f"custom.{key} is not a nebari-colocate setting: use one of "
                + ", ".join(f"custom.{k}" for k in KEYS)
            )
        settings[KEYS[key]] = None if value == "" else value
    return settings


def configure(
    c: Config, get_config: GetConfig | None = None, section: str = "ColocatingKubeSpawner"
) -> JsonDict:
    """Switch the hub config ``c`` to ColocatingKubeSpawner (see the module docstring): helm
    values into ``c.<section>``, spawner class, hand-written affinity, access modes, jhub-apps
    templates, then validate (fails at hub start with a message naming the setting).

    Returns the trait values that were set.
    """
    get_config = get_config or _z2jh_get_config()
    settings = helm_settings(c, get_config, section)
    label_key = settings.get("colocation_label_key") or _configured(
        c, "colocation_label_key", DEFAULT_LABEL_KEY
    )
    switch_spawner_class(c)
    removed = remove_colocation_affinity(c, label_key)
    if removed:
        log.info("nebari-colocate: removed hand-written co-location affinity: %s", removed)
    install_templates(c)
    return settings


def _configured(c: Config, trait: str, default: Any) -> Any:
    for section in ("ColocatingKubeSpawner", "KubeSpawner", "Spawner"):
        if section in c and trait in c[section]:
            return c[section][trait]
    return default


def helm_settings(
    c: Config, get_config: GetConfig, section: str = "ColocatingKubeSpawner"
) -> JsonDict:
    """The ``custom.*`` values into ``c.<section>``, access modes reconciled, validated."""
    settings = values_to_config(get_config("custom", {}) or {})
    # "" (None here) means "not set": leave the chart's own value (e.g. the storage class from
    # singleuser.storage.dynamic.storageClass) in place rather than clearing it.
    settings = {trait: value for trait, value in settings.items() if value is not None}
    if "storage_access_mode" in settings:
        # zero-to-jupyterhub always writes KubeSpawner.storage_access_modes from
        # singleuser.storage.dynamic.storageAccessModes ([ReadWriteOnce] by default); the mode
        # chosen here must win for the claims this hub creates.
        mode = _canonical_mode(settings["storage_access_mode"])
        settings["storage_access_mode"] = mode
        settings["storage_access_modes"] = [mode]
    else:
        # A hard-coded c.KubeSpawner.storage_access_modes (data-science-pack writes
        # ["ReadWriteOnce"]) and no helm value: that single mode is the mode.
        explicit = _configured(c, "storage_access_modes", None)
        mode = _configured(c, "storage_access_mode", None)
        if mode is None and isinstance(explicit, (list, tuple)) and len(explicit) == 1:
            mode = _canonical_mode(explicit[0])
            settings["storage_access_mode"] = mode
        if mode is not None:
            settings["storage_access_modes"] = [_canonical_mode(mode)]
    for trait, value in settings.items():
        setattr(c[section], trait, value)
    check_config(c, class_names=("Spawner", "KubeSpawner", section))
    return settings


def switch_spawner_class(c: Config) -> type:
    """``c.JupyterHub.spawner_class`` on ColocatingKubeSpawner; returns the class now set.

    KubeSpawner (by class or entry-point name) -> ColocatingKubeSpawner.  jhub-apps'
    ``install_jhub_apps`` sets a class it built on the class it was given (``JHubSpawner``);
    built on KubeSpawner, it is built again by jhub-apps' ``subclass_spawner`` on
    ColocatingKubeSpawner.  A class already based on ColocatingKubeSpawner stays.  Any other
    class cannot be switched without knowing what it does: an error names it.
    """
    from kubespawner import KubeSpawner

    from .spawner import ColocatingKubeSpawner

    current = c.JupyterHub.spawner_class if "spawner_class" in c.JupyterHub else None
    if isinstance(current, str):
        current = _spawner_from_name(current)
    if current is None or current is KubeSpawner:
        c.JupyterHub.spawner_class = ColocatingKubeSpawner
    elif isinstance(current, type) and issubclass(current, ColocatingKubeSpawner):
        pass
    elif _is_jhub_apps_class(current) and current.__bases__ == (KubeSpawner,):
        from jhub_apps.spawner.spawner_creation import subclass_spawner

        c.JupyterHub.spawner_class = subclass_spawner(ColocatingKubeSpawner)
    else:
        raise HelmValuesError(
            f"c.JupyterHub.spawner_class is {current!r}: nebari_colocate.helm.configure "
            "switches KubeSpawner, and jhub-apps' class built on KubeSpawner, to "
            "ColocatingKubeSpawner; base this class on ColocatingKubeSpawner instead "
            "(docs/quickstart-z2jh.md)"
        )
    switched: type = c.JupyterHub.spawner_class
    return switched


def _spawner_from_name(name: str) -> type | None:
    if name in ("kubespawner", "kubernetes", "kubespawner.KubeSpawner"):
        from kubespawner import KubeSpawner

        kubespawner: type = KubeSpawner  # kubespawner is untyped
        return kubespawner
    if name in ("colocate", "nebari_colocate.ColocatingKubeSpawner"):
        from .spawner import ColocatingKubeSpawner

        return ColocatingKubeSpawner
    from traitlets.utils.importstring import import_item

    try:
        return import_item(name) if "." in name else None
    except ImportError as exc:
        raise HelmValuesError(f"c.JupyterHub.spawner_class {name!r} cannot be imported") from exc


def _is_jhub_apps_class(cls: object) -> bool:
    return isinstance(cls, type) and cls.__module__.startswith("jhub_apps")


def is_colocation_term(term: object, label_key: str) -> bool:
    """A required pod-affinity term that keeps a user's pods on one node: topology
    ``kubernetes.io/hostname``, selecting on ``label_key`` or ``hub.jupyter.org/username``."""
    if not isinstance(term, Mapping) or term.get("topologyKey") != HOSTNAME:
        return False
    return selects_on(term, label_key) or selects_on(term, USERNAME_LABEL)


def remove_colocation_affinity(c: Config, label_key: str) -> list[str]:
    """Take hand-written co-location terms out of ``extra_pod_config`` and
    ``pod_affinity_required`` in every KubeSpawner section; returns where they were."""
    removed = []
    for section in ("KubeSpawner", "ColocatingKubeSpawner"):
        if section not in c:
            continue
        config = c[section]
        if "pod_affinity_required" in config:
            terms = list(config.pod_affinity_required or [])
            kept = [t for t in terms if not is_colocation_term(t, label_key)]
            if len(kept) != len(terms):
                config.pod_affinity_required = kept
                removed.append(f"c.{section}.pod_affinity_required")
        if "extra_pod_config" in config and isinstance(config.extra_pod_config, Mapping):
            extra = dict(config.extra_pod_config)
            if not isinstance(extra.get("affinity"), Mapping):
                continue
            affinity = dict(extra["affinity"])
            if not drop_pod_affinity_terms(affinity, lambda t: is_colocation_term(t, label_key)):
                continue
            if affinity:
                extra["affinity"] = affinity
            else:
                del extra["affinity"]
            config.extra_pod_config = extra
            removed.append(f"c.{section}.extra_pod_config")
    return removed


def install_templates(c: Config) -> bool:
    """With jhub-apps' templates in ``c.JupyterHub.template_paths``, put this package's
    templates for jhub-apps' pages first; returns whether they are installed."""
    paths = list(c.JupyterHub.template_paths) if "template_paths" in c.JupyterHub else []
    ours = str(JHUB_APPS_TEMPLATES)
    if not any(_is_jhub_apps_templates(p) for p in paths):
        return False
    paths = [ours] + [str(p) for p in paths if str(p) != ours]
    c.JupyterHub.template_paths = paths
    return True


def _is_jhub_apps_templates(path: object) -> bool:
    parts = Path(str(path)).parts
    return len(parts) >= 2 and parts[-1] == "templates" and parts[-2] == "jhub_apps"


def _canonical_mode(value: object) -> str:
    mode = caseless_choice(value, ACCESS_MODES)
    if mode is not None:
        return mode
    raise HelmValuesError(
        f"custom.storage-access-mode {value!r} is not valid: choose one of "
        + ", ".join(ACCESS_MODES)
    )
