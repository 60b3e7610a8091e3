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
  ``pod_affinity_required`` wherever the hub config writes them (not in observe mode, which
  changes nothing): ``c.Spawner``,
  ``c.KubeSpawner`` and the spawner class's own sections, plain or ``.append`` / ``.update``
  (traitlets' lazy values), and every profile's ``kubespawner_override`` (a callable
  ``profile_list``, sync or async, is wrapped so that what it returns is cleaned); the hub log
  says where each term was: the spawner emits its own, only when a volume needs it;
- a hard-coded ``storage_access_modes`` is made to follow ``storage_access_mode`` (a single mode
  written there and no ``custom.storage-access-mode`` becomes the mode);
- the templates this package ships for JupyterHub's spawn, spawn-pending and "Spawn failed"
  pages (the way out's button) go into ``template_paths`` after the operator's own; with
  jhub-apps, those for jhub-apps' pages go first (the reason of a refused spawn on the pages
  jhub-apps replaces);
- the way out's handler (``POST {hub}/colocate/way-out/<user>/<server>``,
  :mod:`nebari_colocate.handlers`) is added to ``c.JupyterHub.extra_handlers``;
- the operator's page (``GET {hub}/colocate/status``, :mod:`nebari_colocate.status_page`) is
  added there too, its scope ``custom:colocate:read`` to ``c.JupyterHub.custom_scopes`` and its
  navbar link (a Jinja extension) to ``c.JupyterHub.jinja_environment_options``;
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
      colocate-headroom: true                 # default false
      colocate-headroom-footprint: {cpu: "2", memory: 8Gi}
      colocate-mode: enforce                  # or observe: decide and record, change nothing

In observe mode (``colocate-mode: observe``) the hand-written co-location terms stay in the hub
config: the spawner changes no pod, so they keep the user's pods together as before.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from traitlets.config import Config
from traitlets.config.loader import LazyConfigValue
from traitlets.log import get_logger

from . import messages
from .affinity import drop_pod_affinity_terms, is_user_colocation_term, user_term_keys
from .config import (
    ACCESS_MODES,
    COLOCATION_MODES,
    DEFAULT_COLOCATION_MODE,
    DEFAULT_LABEL_KEY,
    MODE_OBSERVE,
    caseless_choice,
    check_config,
    computed_value,
    jupyterhub_default_templates,
    jupyterhub_value,
)
from .objects import JsonDict, Obj

#: templates for jhub-apps' pages (not_running.html, home.html), ahead of jhub-apps' own
JHUB_APPS_TEMPLATES = Path(__file__).resolve().parent / "templates" / "jhub_apps"
#: templates for JupyterHub's own pages (spawn.html, spawn_pending.html, not_running.html) and
#: the way out's button (colocate_way_out.html), extending JupyterHub's ("templates/<name>")
HUB_TEMPLATES = Path(__file__).resolve().parent / "templates" / "hub"

#: helm key under ``custom`` -> ColocatingKubeSpawner trait
KEYS = {
    "storage-access-mode": "storage_access_mode",
    "storage-class": "storage_class",
    "colocate-label-key": "colocation_label_key",
    "colocate-premium-resources": "premium_resources",
    "colocate-premium-node-policy": "premium_node_policy",
    "colocate-check-timeout": "colocation_check_timeout",
    "colocate-headroom": "colocation_headroom",
    "colocate-headroom-footprint": "colocation_headroom_footprint",
    "colocate-mode": "colocation_mode",
}

#: ColocatingKubeSpawner settings with no helm key: set them as ``c.ColocatingKubeSpawner.<name>``
#: in ``hub.extraConfig`` (tests/unit/test_settings_home.py checks that each setting is either
#: here or in :data:`KEYS`)
NOT_EXPOSED = (
    "colocation_watch_stale_seconds",
    "fail_fast_on_events",
    "colocation_share_pod_watch",
    "colocation_dry_run_reuse_seconds",
    "unschedulable_grace_seconds",
    "image_pull_grace_seconds",
    "detach_grace_seconds",
    "colocation_unscheduled_timeout",
    "refusal_hold_seconds",
    "default_server_display_name",
    "way_out_release_timeout",
)


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
    spawner_class = switch_spawner_class(c)
    mode = _configured(c, "colocation_mode", DEFAULT_COLOCATION_MODE)
    if caseless_choice(mode, COLOCATION_MODES) == MODE_OBSERVE:
        # observe changes nothing: the operator's co-location terms keep doing their job
        get_logger().info(messages.observe_mode_config_line(label_key))
    else:
        remove_colocation_affinity(c, label_key, (*_section_names(spawner_class), section))
    install_templates(c)
    install_way_out(c)
    return settings


def install_way_out(c: Config) -> None:
    """The way out's hub handlers (the way out, the move off a premium node, the move of the
    whole set) in ``c.JupyterHub.extra_handlers``, and the operator's page with its scope and
    navbar link (:mod:`nebari_colocate.status_page`); imported here: JupyterHub's handlers are
    needed only in a hub."""
    from .handlers import install
    from .set_move_step import SET_MOVE_PATH, SetMoveHandler
    from .status_page import install as install_status_page

    install(c, more=((SET_MOVE_PATH, SetMoveHandler),))
    install_status_page(c)


def _configured(c: Config, trait: str, default: Any) -> Any:
    """``trait`` as a ColocatingKubeSpawner would read it: later sections win, a lazy value
    (``.append``) applies to the value before it."""
    value = default
    for section in ("Spawner", "KubeSpawner", "ColocatingKubeSpawner"):
        if section in c and trait in c[section]:
            value = computed_value(c[section][trait], value)
    return value


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

    current = jupyterhub_value(c, "spawner_class")
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


def _section_names(cls: type) -> list[str]:
    """The config sections traitlets applies to a spawner of ``cls`` (its Configurable
    bases, e.g. jhub-apps' subclass's own)."""
    names = getattr(cls, "section_names", None)
    return list(names()) if callable(names) else [cls.__name__]


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


#: KubeSpawner traits a hub config writes co-location pod affinity into
AFFINITY_TRAITS = ("pod_affinity_required", "extra_pod_config")
#: the mark of a callable whose results are cleaned (so configure(c) twice wraps it once)
_CLEANS = "__nebari_colocate_cleans__"

#: (where, label key): a hand-written co-location term taken out, for the hub log
Removal = tuple[str, str]


def remove_colocation_affinity(
    c: Config, label_key: str, sections: Iterable[str] = ()
) -> list[Removal]:
    """Take hand-written co-location terms (:func:`~nebari_colocate.affinity.user_term_keys`)
    out of ``pod_affinity_required``, ``extra_pod_config`` and every profile's
    ``kubespawner_override`` (and its ``profile_options`` choices), in ``c.Spawner``,
    ``c.KubeSpawner``, ``c.ColocatingKubeSpawner`` and ``sections`` (the spawner class's own
    sections, as traitlets applies them all); returns where they were and on which label key,
    and says so in the hub log.

    Every idiom a hub config uses is read: plain values; ``.append`` / ``.extend`` /
    ``.prepend`` / ``.insert`` / ``.update`` (traitlets' LazyConfigValue: cleaned in place, so it
    still adds to the trait's default and the parent section's value as traitlets merges them);
    and callables (a ``profile_list`` function, sync or async, or a callable override value):
    wrapped, so what they return is cleaned each time they are called.
    """
    cleaner = _Cleaner(label_key)
    names = dict.fromkeys(("Spawner", "KubeSpawner", "ColocatingKubeSpawner", *sections))
    for section in names:
        if section not in c or not isinstance(c[section], Config):
            continue
        config = c[section]
        for trait in (*AFFINITY_TRAITS, "profile_list"):
            if trait in config:
                config[trait] = cleaner.value(trait, config[trait], f"c.{section}.{trait}")
    removed = list(dict.fromkeys(cleaner.removed))
    logger = get_logger()
    if removed:
        logger.info(messages.removed_affinity_line(removed))
    if cleaner.wrapped:
        logger.info(messages.cleaned_when_called_line(cleaner.wrapped))
    return removed


class _Cleaner:
    """Cleans hub config values of co-location terms, noting what it took out."""

    def __init__(self, label_key: str) -> None:
        self.label_key = label_key
        self.removed: list[Removal] = []
        #: callables wrapped (newly) to clean what they return
        self.wrapped: list[str] = []

    def value(self, trait: str, value: Any, where: str) -> Any:
        """``value`` of ``trait`` (an affinity trait, ``profile_list``), cleaned."""
        if isinstance(value, LazyConfigValue):
            return self.lazy(trait, value, where)
        if callable(value):
            return self.wrap(trait, value, where)
        if trait == "pod_affinity_required" and isinstance(value, (list, tuple)):
            return self.terms(value, where)
        if trait == "extra_pod_config" and isinstance(value, Mapping):
            return self.pod_config(value, where)
        if trait == "profile_list" and isinstance(value, (list, tuple, Mapping)):
            return self.profiles(value, where)
        return value

    def terms(self, terms: Iterable[Any], where: str) -> list[Any]:
        kept = []
        for term in terms:
            keys = user_term_keys(term, self.label_key)
            self.removed.extend((where, key) for key in keys)
            if not keys:
                kept.append(term)
        return kept

    def pod_config(self, extra: Mapping[str, Any], where: str) -> Mapping[str, Any]:
        affinity = extra.get("affinity")
        pod_affinity = affinity.get("podAffinity") if isinstance(affinity, Mapping) else None
        if not isinstance(affinity, Mapping) or not isinstance(pod_affinity, Mapping):
            return extra
        required = pod_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or []
        self.terms(required, where)
        cleaned = dict(affinity)
        if not drop_pod_affinity_terms(
            cleaned, lambda t: is_user_colocation_term(t, self.label_key)
        ):
            return extra
        extra = dict(extra)
        if cleaned:
            extra["affinity"] = cleaned
        else:
            del extra["affinity"]
        return extra

    def lazy(self, trait: str, value: LazyConfigValue, where: str) -> LazyConfigValue:
        """Clean a LazyConfigValue's pending operations in place (traitlets applies them to the
        trait's value when a spawner is configured: computing it now would drop what the parent
        section adds)."""
        if trait == "extra_pod_config":
            if isinstance(value._update, Mapping):
                value._update = dict(self.pod_config(value._update, where))
        elif trait == "pod_affinity_required":
            value._extend = self.terms(value._extend, where)
            value._prepend = self.terms(value._prepend, where)
            value._inserts = [(i, t) for i, t in value._inserts if self.terms([t], where)]
        elif trait == "profile_list":
            value._extend = list(self.profiles(value._extend, where))
            value._prepend = list(self.profiles(value._prepend, where))
            value._inserts = [(i, self.profile(p, f"{where}[{i}]")) for i, p in value._inserts]
            if isinstance(value._update, Mapping):
                value._update = dict(self.profiles(value._update, where))
        if value._value is not None:  # already computed by someone: clean that too
            value._value = self.value(trait, value._value, where)
        return value

    def profiles(self, profiles: Any, where: str) -> Any:
        if isinstance(profiles, Mapping):
            return {k: self.profile(p, f"{where}[{k}]") for k, p in profiles.items()}
        return [self.profile(p, f"{where}[{_profile_name(p, i)}]") for i, p in enumerate(profiles)]

    def profile(self, profile: Any, where: str) -> Any:
        if not isinstance(profile, Mapping):
            return profile
        cleaned = dict(profile)
        if isinstance(profile.get("kubespawner_override"), Mapping):
            cleaned["kubespawner_override"] = self.override(
                profile["kubespawner_override"], f"{where}.kubespawner_override"
            )
        options = profile.get("profile_options")
        if isinstance(options, Mapping):
            cleaned["profile_options"] = {
                name: self.option(option, f"{where}.profile_options.{name}")
                for name, option in options.items()
            }
        return cleaned

    def option(self, option: Any, where: str) -> Any:
        if not isinstance(option, Mapping):
            return option
        cleaned = dict(option)
        if isinstance(option.get("choices"), Mapping):
            cleaned["choices"] = {
                name: self.choice(choice, f"{where}.choices.{name}")
                for name, choice in option["choices"].items()
            }
        if isinstance(option.get("unlisted_choice"), Mapping):
            cleaned["unlisted_choice"] = self.choice(
                option["unlisted_choice"], f"{where}.unlisted_choice"
            )
        return cleaned

    def choice(self, choice: Mapping[str, Any], where: str) -> Any:
        if not isinstance(choice, Mapping) or not isinstance(
            choice.get("kubespawner_override"), Mapping
        ):
            return choice
        override = self.override(choice["kubespawner_override"], f"{where}.kubespawner_override")
        return {**choice, "kubespawner_override": override}

    def override(self, override: Mapping[str, Any], where: str) -> dict[str, Any]:
        return {
            trait: self.value(trait, value, f"{where}.{trait}")
            if trait in AFFINITY_TRAITS
            else value
            for trait, value in override.items()
        }

    def wrap(self, trait: str, fn: Callable[..., Any], where: str) -> Callable[..., Any]:
        """``fn`` wrapped so that what it returns (or its coroutine returns) is cleaned; the
        first call that removes a term says so in the hub log (through the spawner's log)."""
        if getattr(fn, _CLEANS, None):
            return fn
        label_key = self.label_key
        said: set[Removal] = set()

        def cleaned(args: tuple[Any, ...], result: Any) -> Any:
            cleaner = _Cleaner(label_key)
            result = cleaner.value(trait, result, where)
            new = [r for r in dict.fromkeys(cleaner.removed) if r not in said]
            if new:
                said.update(new)
                logger = getattr(args[0], "log", None) if args else None
                (logger or get_logger()).info(messages.removed_affinity_line(new))
            return result

        async def later(args: tuple[Any, ...], result: Awaitable[Any]) -> Any:
            return cleaned(args, await result)

        wrapper: Callable[..., Any]
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def wrapper(*args: Any, **kwargs: Any) -> Any:
                return cleaned(args, await fn(*args, **kwargs))

        else:

            @functools.wraps(fn)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                result = fn(*args, **kwargs)
                if inspect.isawaitable(result):
                    return later(args, result)
                return cleaned(args, result)

        setattr(wrapper, _CLEANS, where)
        self.wrapped.append(where)
        return wrapper


def _profile_name(profile: Any, index: int) -> str:
    if isinstance(profile, Mapping):
        return str(profile.get("slug") or profile.get("display_name") or index)
    return str(index)


def install_templates(c: Config) -> bool:
    """This package's templates in ``c.JupyterHub.template_paths``, keeping every path the
    operator (or jhub-apps) put there: the templates for JupyterHub's own pages
    (:data:`HUB_TEMPLATES`: spawn, spawn-pending, "Spawn failed", the way out's button) after
    them, so that an operator's own version of a page still wins, and before JupyterHub's
    default templates when those are listed (JupyterHub appends them otherwise); with
    jhub-apps' templates there, the templates for jhub-apps' pages first.  Idempotent.
    Returns whether the templates for jhub-apps' pages are installed."""
    if "template_paths" in c.JupyterHub:
        paths = [str(p) for p in jupyterhub_value(c, "template_paths")]
    else:  # JupyterHub appends its default templates to whatever the list ends up being
        paths = []
    ours = (str(JHUB_APPS_TEMPLATES), str(HUB_TEMPLATES))
    paths = [p for p in paths if p not in ours]
    default = next(iter(jupyterhub_default_templates(c.JupyterHub)), None)
    at = next((i for i, p in enumerate(paths) if _same_dir(p, default)), len(paths))
    paths.insert(at, str(HUB_TEMPLATES))
    with_jhub_apps = any(_is_jhub_apps_templates(p) for p in paths)
    if with_jhub_apps:
        paths.insert(0, str(JHUB_APPS_TEMPLATES))
    c.JupyterHub.template_paths = paths
    return with_jhub_apps


def _same_dir(path: str, other: str | None) -> bool:
    return other is not None and os.path.realpath(path) == os.path.realpath(other)


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
