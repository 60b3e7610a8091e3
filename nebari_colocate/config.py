"""The settings: their choices, their defaults and their validators.

One home for what the spawner's traits, the helm values (:mod:`nebari_colocate.helm`) and the
``nebari-colocate`` options accept, so the three cannot drift apart.  ``docs/reference.md`` lists
the settings; the validators raise with a message that names the setting, the value and what is
allowed, and :func:`check_config` runs them all on a hub's config at hub start.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from traitlets import TraitError
from traitlets.config import Config
from traitlets.config.loader import LazyConfigValue

from .objects import GPU_RESOURCES, RWO, RWX

# --------------------------------------------------------------------------------------------------
# choices and defaults

#: the access modes a hub may create home claims with (``storage_access_mode``)
ACCESS_MODES = (RWO, RWX)
#: what to do with a server that needs no premium resource on a premium node
POLICY_ALLOW, POLICY_WARN, POLICY_REFUSE = "allow", "warn", "refuse"
PREMIUM_POLICIES = (POLICY_ALLOW, POLICY_WARN, POLICY_REFUSE)

DEFAULT_ACCESS_MODE = RWO
DEFAULT_PREMIUM_RESOURCES = GPU_RESOURCES
DEFAULT_PREMIUM_NODE_POLICY = POLICY_WARN
DEFAULT_LABEL_KEY = "nebari.dev/colocate-user"
DEFAULT_CHECK_TIMEOUT = 5.0
#: the shortest colocation_check_timeout that can work (seconds): the check makes up to four
#: rounds of API requests, and one request to an API server in the cluster takes milliseconds on
#: a quiet control plane and tens of milliseconds on a busy one
MIN_CHECK_TIMEOUT = 0.25
#: seconds a live-view watch may go without an event or a bookmark before it is listed again
#: (``colocation_watch_stale_seconds``): kube-apiserver sends a bookmark about every 60 s
DEFAULT_WATCH_STALE_SECONDS = 75.0
#: the shortest colocation_watch_stale_seconds: less than a bookmark interval and a quiet
#: cluster's watches would be listed again over and over
MIN_WATCH_STALE_SECONDS = 65.0
#: seconds since a watch's last event or bookmark within which the live view is *fresh*: an
#: unpinned decision is then taken from memory alone, else confirmed by one namespaced LIST
FRESH_SECONDS = 3.0
#: seconds the way out waits for the home to be released (``way_out_release_timeout``)
DEFAULT_WAY_OUT_RELEASE_TIMEOUT = 120.0


def caseless_choice(value: object, choices: Sequence[str]) -> str | None:
    """The choice ``value`` names, compared case-insensitively (``readwritemany`` ->
    ``ReadWriteMany``); None when it names none (each caller words its own error)."""
    if isinstance(value, str):
        for choice in choices:
            if value.lower() == choice.lower():
                return choice
    return None


# --------------------------------------------------------------------------------------------------
# validators

_LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class ColocationConfigError(ValueError):
    """Configuration that cannot work; the message names the setting, the value, what is allowed."""


def label_key_problem(key: str) -> str | None:
    """Why ``key`` is not a valid Kubernetes label key, or None."""
    prefix, _, name = key.rpartition("/")
    if not name or len(name) > 63 or not _LABEL_NAME.match(name):
        return "the name part must be 1-63 characters [A-Za-z0-9-_.], alphanumeric at both ends"
    if "/" in key and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return "the prefix must be a DNS subdomain (lowercase, dots, at most 253 characters)"
    return None


def check_label_key(key: Any) -> str:
    """A valid ``colocation_label_key``, or TraitError."""
    problem = label_key_problem(key) if isinstance(key, str) else "it is not a string"
    if problem:
        raise TraitError(
            f"colocation_label_key {key!r} is not a valid Kubernetes label key: {problem}"
        )
    return str(key)


def check_premium_resources(names: Any) -> Any:
    """``premium_resources`` whose every entry is an extended resource name, or TraitError."""
    for name in names:
        if not isinstance(name, str) or label_key_problem(name) or "/" not in name:
            raise TraitError(
                f"premium_resources entry {name!r} is not an extended resource name: use a "
                "domain-prefixed name such as 'nvidia.com/gpu'"
            )
    return names


def check_watch_stale(value: Any) -> float:
    """A colocation_watch_stale_seconds that can work: a finite number of seconds, at least
    :data:`MIN_WATCH_STALE_SECONDS`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise TraitError(f"colocation_watch_stale_seconds {value!r} must be a number of seconds")
    if not MIN_WATCH_STALE_SECONDS <= value < float("inf"):
        raise TraitError(
            f"colocation_watch_stale_seconds {value:g} cannot work: use at least "
            f"{MIN_WATCH_STALE_SECONDS:g} seconds (and a finite number). kube-apiserver sends a "
            "bookmark on a quiet watch about every 60 s; with less, every quiet watch would be "
            f"listed again over and over. Default: {DEFAULT_WATCH_STALE_SECONDS:g}"
        )
    return float(value)


def check_timeout(value: Any) -> float:
    """A colocation_check_timeout that can work: a finite number of seconds, at least
    :data:`MIN_CHECK_TIMEOUT`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise TraitError(f"colocation_check_timeout {value!r} must be a number of seconds")
    if not MIN_CHECK_TIMEOUT <= value < float("inf"):
        raise TraitError(
            f"colocation_check_timeout {value!r} cannot work: use at least {MIN_CHECK_TIMEOUT} "
            "seconds (and a finite number). The check makes up to four rounds of Kubernetes API "
            "requests (the pods and claims, the volume attachments, the node and volumes, the "
            "node's pods); with less time than that even a healthy API server cannot answer, and "
            "every spawn would take the safe side. Default: 5"
        )
    return value


def check_mode_conflicts(
    mode: str,
    storage_class: str | None,
    explicit_modes: Iterable[str] | None,
    creates_claims: bool = True,
) -> None:
    """RWX needs a storage class when the hub creates claims (``creates_claims``, KubeSpawner's
    ``storage_pvc_ensure``: a hub on claims made by others, as Nebari's ``storage.type: static``,
    names no class); an explicit storage_access_modes must agree with the mode."""
    if mode == RWX and not storage_class and creates_claims:
        raise ColocationConfigError(
            f"storage_access_mode is {mode!r} but storage_class is {storage_class!r}: "
            "ReadWriteMany needs the name of a StorageClass that provides it (for example an "
            "NFS, CephFS, EFS or Longhorn RWX class) for the claims this hub creates "
            "(storage_pvc_ensure is True); set storage_class (helm: custom.storage-class)"
        )
    if explicit_modes is not None and set(explicit_modes) != {mode}:
        raise ColocationConfigError(
            f"storage_access_modes is {list(explicit_modes)!r} but storage_access_mode is "
            f"{mode!r}: remove storage_access_modes (it follows storage_access_mode) or set it "
            f"to [{mode!r}]"
        )


def _choice(name: str, value: object, choices: Sequence[str]) -> str:
    choice = caseless_choice(value, choices)
    if choice is None:
        raise TraitError(f"{name} {value!r} is not valid: choose one of {', '.join(choices)}")
    return choice


def computed_value(value: Any, default: Any) -> Any:
    """A config value as a spawner would get it: a LazyConfigValue (``c.X.y.append(...)``, or
    a ``c.X.y`` only read) applied to the trait's default."""
    if isinstance(value, LazyConfigValue):
        return copy.deepcopy(value).get_value(default)
    return value


def check_config(
    config: Mapping[str, Any],
    class_names: Sequence[str] = ("Spawner", "KubeSpawner", "ColocatingKubeSpawner"),
) -> None:
    """Validate a hub's traitlets config at hub start, without creating a spawner.

    Reads the sections in ``class_names`` (later ones win, as for a ColocatingKubeSpawner) and
    raises TraitError / ColocationConfigError naming the setting, the value and what is allowed.
    Call it at the end of the hub config (``nebari_colocate.helm.configure`` does).
    """
    sections = Config()
    for section in class_names:
        if section in config:
            # traitlets' own merge (a later section's ``.append`` adds to an earlier value), on a
            # copy: merging and computing a LazyConfigValue changes it
            sections.merge(copy.deepcopy(config[section]))
    mode = _choice(
        "storage_access_mode",
        computed_value(
            sections.get("storage_access_mode", DEFAULT_ACCESS_MODE), DEFAULT_ACCESS_MODE
        ),
        ACCESS_MODES,
    )
    defaults = {
        "premium_resources": list(DEFAULT_PREMIUM_RESOURCES),
        "storage_access_modes": [mode],  # the spawner's default follows the mode
    }
    merged = {key: computed_value(value, defaults.get(key)) for key, value in sections.items()}
    _choice(
        "premium_node_policy",
        merged.get("premium_node_policy", DEFAULT_PREMIUM_NODE_POLICY),
        PREMIUM_POLICIES,
    )
    check_label_key(merged.get("colocation_label_key", DEFAULT_LABEL_KEY))
    check_premium_resources(merged.get("premium_resources", []))
    check_timeout(merged.get("colocation_check_timeout", DEFAULT_CHECK_TIMEOUT))
    check_watch_stale(merged.get("colocation_watch_stale_seconds", DEFAULT_WATCH_STALE_SECONDS))
    check_mode_conflicts(
        mode,
        merged.get("storage_class"),
        merged.get("storage_access_modes"),
        # KubeSpawner's default is False; zero-to-jupyterhub sets True for storage type dynamic
        creates_claims=bool(merged.get("storage_pvc_ensure", False)),
    )
