"""Read zero-to-jupyterhub helm values (``custom.*``) into traitlets config.

In the hub image, ``z2jh.get_config`` reads the chart's values; it exists only there, so it is
imported lazily.  Use it in ``hub.extraConfig`` (or ``01-spawner.py``)::

    from nebari_colocate.helm import configure
    configure(c)

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

from collections.abc import Callable, Mapping

#: helm key under ``custom`` -> ColocatingKubeSpawner trait
KEYS = {
    "storage-access-mode": "storage_access_mode",
    "storage-class": "storage_class",
    "colocate-label-key": "colocation_label_key",
    "colocate-premium-resources": "premium_resources",
    "colocate-premium-node-policy": "premium_node_policy",
    "colocate-check-timeout": "colocation_check_timeout",
}


class HelmValuesError(ValueError):
    """A ``custom.*`` value that cannot be used; the message names the key."""


def _z2jh_get_config() -> Callable:
    try:
        from z2jh import get_config
    except ImportError as exc:
        raise HelmValuesError(
            "z2jh.get_config is not importable: nebari_colocate.helm reads zero-to-jupyterhub "
            "helm values and works only in the hub image (pass get_config= elsewhere)"
        ) from exc
    return get_config


def values_to_config(custom: Mapping) -> dict:
    """Trait values from the ``custom`` mapping; ``""`` means unset (None)."""
    if not isinstance(custom, Mapping):
        raise HelmValuesError(f"custom must be a mapping, not {type(custom).__name__}")
    settings = {}
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


def configure(c, get_config: Callable | None = None, section: str = "ColocatingKubeSpawner"):
    """Copy the helm values into ``c.<section>`` and validate the result (fails at hub start).

    Returns the trait values that were set.
    """
    from .spawner import check_config

    get_config = get_config or _z2jh_get_config()
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
    for trait, value in settings.items():
        setattr(c[section], trait, value)
    check_config(c, class_names=("Spawner", "KubeSpawner", section))
    return settings


def _canonical_mode(value) -> str:
    from .spawner import ACCESS_MODES

    for mode in ACCESS_MODES:
        if isinstance(value, str) and value.lower() == mode.lower():
            return mode
    raise HelmValuesError(
        f"custom.storage-access-mode {value!r} is not valid: choose one of "
        + ", ".join(ACCESS_MODES)
    )
