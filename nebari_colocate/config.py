"""The settings: their choices, their defaults and their validators.

One home for what the spawner's traits, the helm values (:mod:`nebari_colocate.helm`) and the
``nebari-colocate`` options accept, so the three cannot drift apart.  ``docs/reference.md`` lists
the settings; the validators raise with a message that names the setting, the value and what is
allowed, and :func:`check_config` runs them all on a hub's config at hub start.
"""

from __future__ import annotations

import copy
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from traitlets import TraitError
from traitlets.config import Config
from traitlets.config.loader import LazyConfigValue

from . import quantity
from .objects import GPU_RESOURCES, RWO, RWX

# --------------------------------------------------------------------------------------------------
# choices and defaults

#: the access modes a hub may create home claims with (``storage_access_mode``)
ACCESS_MODES = (RWO, RWX)
#: what to do with a server that needs no premium resource on a premium node
POLICY_ALLOW, POLICY_WARN, POLICY_REFUSE = "allow", "warn", "refuse"
PREMIUM_POLICIES = (POLICY_ALLOW, POLICY_WARN, POLICY_REFUSE)
#: what the library does with its decisions (``colocation_mode``): ``enforce`` them, or only
#: ``observe`` (decide and record what enforce would have done, change nothing)
MODE_ENFORCE, MODE_OBSERVE = "enforce", "observe"
COLOCATION_MODES = (MODE_ENFORCE, MODE_OBSERVE)

DEFAULT_ACCESS_MODE = RWO
DEFAULT_PREMIUM_RESOURCES = GPU_RESOURCES
DEFAULT_PREMIUM_NODE_POLICY = POLICY_WARN
DEFAULT_COLOCATION_MODE = MODE_ENFORCE
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
#: unpinned decision's confirming LIST of pods then needs no LIST of VolumeAttachments beside it
#: (and the way out's wait for the release reads the view alone)
FRESH_SECONDS = 3.0
#: ``fail_fast_on_events``: end a spawn its pod's events say cannot succeed
DEFAULT_FAIL_FAST_ON_EVENTS = True
#: seconds an unpinned pod may stay unschedulable with no word from an autoscaler
#: (``unschedulable_grace_seconds``; 0 or less: wait for start_timeout)
DEFAULT_UNSCHEDULABLE_GRACE_SECONDS = 60.0
#: seconds image pulls may keep failing before the spawn is ended (``image_pull_grace_seconds``)
DEFAULT_IMAGE_PULL_GRACE_SECONDS = 120.0
#: seconds a home still attached to another node that no pod uses (a detach under way) may keep
#: a spawn waiting before it is ended (``detach_grace_seconds``; 0 or less: wait for start_timeout)
DEFAULT_DETACH_GRACE_SECONDS = 60.0
#: seconds a created pod may go without any word from a scheduler (not bound, no PodScheduled
#: condition, no event) before its spawn is ended (``colocation_unscheduled_timeout``; 0 or less:
#: wait for start_timeout): a running kube-scheduler binds a pod or says why not within a second
#: or two, and a z2jh user-scheduler's leader failover takes about 15 s
DEFAULT_UNSCHEDULED_TIMEOUT_SECONDS = 30.0
#: the shortest colocation_unscheduled_timeout above 0: a scheduler with a queue (a burst of
#: spawns) may take seconds to try a new pod, and a false refusal is worse than a late one
MIN_UNSCHEDULED_TIMEOUT_SECONDS = 5.0
#: seconds a pod the scheduler makes room for by preemption (nominated to a node, its victims
#: evicted) may wait for them to be gone before the spawn is ended (``preemption-stalled``):
#: victims get their terminationGracePeriodSeconds (30 s by default; z2jh's placeholders 0)
PREEMPTION_GRACE_SECONDS = 120.0
#: ``colocation_share_pod_watch``: KubeSpawner's pod reflector reads the live view's watch (a pod a
#: spawn waits on is read by name while that watch is quiet: ``shared_reflector``)
DEFAULT_SHARE_POD_WATCH = True
#: seconds the dry run of a pinned pod serves the pods of the same shape
#: (``colocation_dry_run_reuse_seconds``; 0 or less: a dry run for every pinned pod)
DEFAULT_DRY_RUN_REUSE_SECONDS = 600.0
#: seconds a REST-requested refusal stays pending before it fails (``refusal_hold_seconds``)
DEFAULT_REFUSAL_HOLD_SECONDS = 3.0
#: ``colocation_headroom``: a first server is steered toward nodes with room for the user's usual
#: set (off until an operator has measured it on the cluster: docs/performance.md, "capacity")
DEFAULT_HEADROOM = False
#: ``colocation_headroom_footprint``: the room (resource -> quantity) every user's first server
#: looks for at least, beside the largest set the user has run before
DEFAULT_HEADROOM_FOOTPRINT: dict[str, str] = {}
#: what messages call the default server (``default_server_display_name``); None: chosen by
#: whether jhub-apps built the spawner class
DEFAULT_SERVER_DISPLAY_NAME: str | None = None

# named constants the spawner reads (not settings: a test or a benchmark may change them on one
# spawner, a hub has no reason to)

#: seconds between looks at the event reflector's cache while a pod starts
EVENT_POLL_INTERVAL = 0.5
#: seconds the pod reflector on the live view waits for the view's first LIST of the pods (as
#: KubeSpawner's own reflector's ``request_timeout``)
POD_WATCH_FIRST_LIST_SECONDS = 60.0
#: seconds a spawn the API failed keeps watching for its pod (a create request that reached a
#: stalled API server can be carried out after the spawn ended), to delete it
API_FAULT_SWEEP_SECONDS = 600.0
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


def check_seconds(name: str, value: Any) -> float:
    """A finite number of seconds for the setting ``name`` (0 or less turns its rule off), or
    TraitError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TraitError(f"{name} {value!r} must be a finite number of seconds (0 turns it off)")
    return float(value)


def check_unscheduled_timeout(value: Any) -> float:
    """A colocation_unscheduled_timeout that can work: 0 or less (off), or a finite number of
    seconds of at least :data:`MIN_UNSCHEDULED_TIMEOUT_SECONDS`, or TraitError."""
    seconds = check_seconds("colocation_unscheduled_timeout", value)
    if 0 < seconds < MIN_UNSCHEDULED_TIMEOUT_SECONDS:
        raise TraitError(
            f"colocation_unscheduled_timeout {value!r} is too short: use at least "
            f"{MIN_UNSCHEDULED_TIMEOUT_SECONDS:g} seconds, or 0 to turn the rule off. A scheduler "
            "busy with a burst of spawns may take seconds to try a new pod, and the spawn would "
            "be ended although the scheduler runs. "
            f"Default: {DEFAULT_UNSCHEDULED_TIMEOUT_SECONDS:g}"
        )
    return seconds


def check_positive_seconds(name: str, value: Any) -> float:
    """A finite number of seconds above 0 for the setting ``name``, or TraitError."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value <= 0
    ):
        raise TraitError(f"{name} {value!r} must be a finite number of seconds above 0")
    return float(value)


def check_flag(name: str, value: Any) -> bool:
    """True or False for the setting ``name`` (1 and 0 too, as traitlets' Bool takes them), or
    TraitError."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise TraitError(f"{name} {value!r} must be True or False")


def check_display_name(value: Any) -> str | None:
    """A ``default_server_display_name``: a string, or None (the default), or TraitError."""
    if value is not None and not isinstance(value, str):
        raise TraitError(
            f"default_server_display_name {value!r} must be a string, or None for the default"
        )
    return value


def check_headroom_footprint(value: Any) -> dict[str, Any]:
    """A ``colocation_headroom_footprint``: a mapping of resource names (``cpu``, ``memory``,
    ``nvidia.com/gpu``) to quantities the API would take (``"2"``, ``"8Gi"``), or TraitError."""
    name = "colocation_headroom_footprint"
    if not isinstance(value, Mapping):
        raise TraitError(
            f"{name} {value!r} must be a mapping of resource to quantity, for example "
            '{"cpu": "2", "memory": "8Gi"}'
        )
    for resource, amount in value.items():
        problem = label_key_problem(resource) if isinstance(resource, str) else "it is not a string"
        if problem:
            raise TraitError(f"{name} key {resource!r} is not a resource name: {problem}")
        if isinstance(amount, bool) or not isinstance(amount, (str, int, float)):
            raise TraitError(
                f"{name}[{resource!r}] {amount!r} must be a quantity such as '2', '500m' or '8Gi'"
            )
        problem = quantity.problem(resource, amount)
        if problem:
            raise TraitError(f"{name}[{resource!r}] {amount!r} is not valid: {problem}")
    return dict(value)


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


# --------------------------------------------------------------------------------------------------
# the settings table


@dataclass(frozen=True)
class Setting:
    """One ColocatingKubeSpawner setting: its default and its validator (``check(value)``
    returns the value to use or raises TraitError naming the setting)."""

    default: Any
    check: Callable[[Any], Any]


#: every setting ColocatingKubeSpawner adds to KubeSpawner's, by trait name: the spawner's traits
#: take their defaults and validators from here and :func:`check_config` runs the validators at
#: hub start (tests/unit/test_settings_home.py checks that none is missing)
SETTINGS: Mapping[str, Setting] = {
    "storage_access_mode": Setting(
        DEFAULT_ACCESS_MODE, lambda value: _choice("storage_access_mode", value, ACCESS_MODES)
    ),
    "colocation_mode": Setting(
        DEFAULT_COLOCATION_MODE,
        lambda value: _choice("colocation_mode", value, COLOCATION_MODES),
    ),
    "premium_node_policy": Setting(
        DEFAULT_PREMIUM_NODE_POLICY,
        lambda value: _choice("premium_node_policy", value, PREMIUM_POLICIES),
    ),
    "colocation_label_key": Setting(DEFAULT_LABEL_KEY, check_label_key),
    "premium_resources": Setting(list(DEFAULT_PREMIUM_RESOURCES), check_premium_resources),
    "colocation_check_timeout": Setting(DEFAULT_CHECK_TIMEOUT, check_timeout),
    "colocation_watch_stale_seconds": Setting(DEFAULT_WATCH_STALE_SECONDS, check_watch_stale),
    "fail_fast_on_events": Setting(
        DEFAULT_FAIL_FAST_ON_EVENTS, lambda value: check_flag("fail_fast_on_events", value)
    ),
    "colocation_share_pod_watch": Setting(
        DEFAULT_SHARE_POD_WATCH, lambda value: check_flag("colocation_share_pod_watch", value)
    ),
    "colocation_dry_run_reuse_seconds": Setting(
        DEFAULT_DRY_RUN_REUSE_SECONDS,
        lambda value: check_seconds("colocation_dry_run_reuse_seconds", value),
    ),
    "unschedulable_grace_seconds": Setting(
        DEFAULT_UNSCHEDULABLE_GRACE_SECONDS,
        lambda value: check_seconds("unschedulable_grace_seconds", value),
    ),
    "image_pull_grace_seconds": Setting(
        DEFAULT_IMAGE_PULL_GRACE_SECONDS,
        lambda value: check_seconds("image_pull_grace_seconds", value),
    ),
    "detach_grace_seconds": Setting(
        DEFAULT_DETACH_GRACE_SECONDS,
        lambda value: check_seconds("detach_grace_seconds", value),
    ),
    "colocation_unscheduled_timeout": Setting(
        DEFAULT_UNSCHEDULED_TIMEOUT_SECONDS, check_unscheduled_timeout
    ),
    "refusal_hold_seconds": Setting(
        DEFAULT_REFUSAL_HOLD_SECONDS, lambda value: check_seconds("refusal_hold_seconds", value)
    ),
    "default_server_display_name": Setting(DEFAULT_SERVER_DISPLAY_NAME, check_display_name),
    "colocation_headroom": Setting(
        DEFAULT_HEADROOM, lambda value: check_flag("colocation_headroom", value)
    ),
    "colocation_headroom_footprint": Setting(
        dict(DEFAULT_HEADROOM_FOOTPRINT), check_headroom_footprint
    ),
    "way_out_release_timeout": Setting(
        DEFAULT_WAY_OUT_RELEASE_TIMEOUT,
        lambda value: check_positive_seconds("way_out_release_timeout", value),
    ),
}


def computed_value(value: Any, default: Any) -> Any:
    """A config value as the configurable will get it: plain, or traitlets' LazyConfigValue
    (``.append`` / ``.extend`` / ``.prepend`` / ``.insert`` / ``.update``, merged by
    ``Config.merge``, or only read: ``c.X.y`` creates an empty one) applied to ``default`` the
    way traitlets applies it (inserts, then prepends, then extends; a dict or set updated).

    The one reader of lazy config values: the lazy value is left as it is (traitlets applies it
    to the trait when the hub starts) and ``default`` is copied, shallowly, so values that are
    classes, functions or objects (handlers, template variables) stay the same objects.
    """
    if not isinstance(value, LazyConfigValue):
        return value
    if value._value is not None:  # already applied by someone: traitlets returns that
        return value._value
    if isinstance(default, list):
        applied = list(default)
        for index, item in value._inserts:
            applied.insert(index, item)
        applied[:0] = value._prepend
        applied.extend(value._extend)
        return applied
    if isinstance(default, (dict, set)):
        updated = copy.copy(default)
        if value._update:
            updated.update(value._update)
        return updated
    return default


#: JupyterHub settings configure(c) reads or writes, and their defaults (JupyterHub 5 and 6),
#: which a lazy value applies to; ``template_paths``' default is JupyterHub's own templates
JUPYTERHUB_DEFAULTS: dict[str, Callable[[Config], Any]] = {
    "extra_handlers": lambda hub: [],
    "template_paths": lambda hub: jupyterhub_default_templates(hub),
    "template_vars": lambda hub: {},
    "services": lambda hub: [],
    "load_roles": lambda hub: [],
    "tornado_settings": lambda hub: {},
    "spawner_class": lambda hub: None,
    "custom_scopes": lambda hub: {},
    "jinja_environment_options": lambda hub: {},
}


def jupyterhub_value(c: Config, key: str) -> Any:
    """``c.JupyterHub.<key>`` as JupyterHub will use it (:data:`JUPYTERHUB_DEFAULTS`): a plain
    value as it is, a lazy one (Nebari's ``c.JupyterHub.extra_handlers.extend(...)``) applied to
    JupyterHub's default, keeping the operator's entries in their order; unset, the default."""
    hub = c["JupyterHub"] if "JupyterHub" in c else Config()
    default = JUPYTERHUB_DEFAULTS[key](hub)
    if key not in hub:
        return default
    return computed_value(hub[key], default)


def jupyterhub_default_templates(hub: Config) -> list[str]:
    """JupyterHub's default ``template_paths``: ``<data_files_path>/templates``."""
    data = hub.get("data_files_path") if "data_files_path" in hub else None
    if not isinstance(data, str):
        try:
            from jupyterhub._data import DATA_FILES_PATH
        except ImportError:  # pragma: no cover - a hub always has it
            return []
        data = DATA_FILES_PATH
    return [os.path.join(data, "templates")]


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
    for name, setting in SETTINGS.items():
        if name != "storage_access_mode":  # checked above: the defaults follow it
            setting.check(merged.get(name, setting.default))
    check_mode_conflicts(
        mode,
        merged.get("storage_class"),
        merged.get("storage_access_modes"),
        # KubeSpawner's default is False; zero-to-jupyterhub sets True for storage type dynamic
        creates_claims=bool(merged.get("storage_pvc_ensure", False)),
    )
