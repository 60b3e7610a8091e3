"""configure(c) reads every key it touches as JupyterHub will: traitlets' lazy idioms included.

A hub config file may write any key with ``.append`` / ``.extend`` / ``.prepend`` / ``.insert`` /
``.update`` (traitlets' LazyConfigValue), merge another config into ``c``, or only read a key
(which creates an empty lazy value).  Nebari's ``01-theme.py`` runs
``c.JupyterHub.extra_handlers.extend(...)`` and ``c.JupyterHub.template_paths.extend(...)``
before the operator's snippet calls configure(c).  Each row is a hub config file loaded by
traitlets' own PyFileConfigLoader; the oracle is the real configurable (``jupyterhub.app.
JupyterHub``, ColocatingKubeSpawner) built from that config, and the expected list or dict is
written out beside it, so the reader, the real configurable and the row must all agree.
"""

from __future__ import annotations

import copy
import textwrap
from pathlib import Path
from typing import Any

import pytest
from jupyterhub._data import DATA_FILES_PATH
from jupyterhub.app import JupyterHub
from traitlets.config import Config
from traitlets.config.loader import PyFileConfigLoader

from nebari_colocate import ColocatingKubeSpawner
from nebari_colocate.config import DEFAULT_PREMIUM_RESOURCES, jupyterhub_value
from nebari_colocate.handlers import MoveHandler, WayOutHandler
from nebari_colocate.helm import HUB_TEMPLATES, _configured, configure
from nebari_colocate.set_move_step import SetMoveHandler
from nebari_colocate.status_page import NAV_LINK, SCOPE, StatusHandler

from .test_spawner_config import offline_kubeconfig  # noqa: F401  (autouse fixture)

JUPYTERHUB_TEMPLATES = str(Path(DATA_FILES_PATH) / "templates")

#: two entries an operator writes, per key (valid for the trait: JupyterHub checks them)
LIST_KEYS: dict[str, tuple[Any, Any, list[Any]]] = {
    # key: (A, B, JupyterHub's default)
    "extra_handlers": ((r"/theme", "Theme"), (r"/other", "Other"), []),
    "template_paths": ("/srv/theme", "/srv/other", [JUPYTERHUB_TEMPLATES]),
    "services": ({"name": "argo", "url": "http://127.0.0.1:1"}, {"name": "users"}, []),
    "load_roles": ({"name": "ops", "scopes": ["list:users"]}, {"name": "viewers"}, []),
}
DICT_KEYS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "template_vars": ({"logo": "a.png", "hub_title": "Nebari"}, {"hub_title": "Mine"}),
    "tornado_settings": ({"slow_spawn_timeout": 0}, {"cookie_options": {"x": 1}}),
    "custom_scopes": (
        {"custom:a:read": {"description": "a"}},
        {"custom:b:read": {"description": "b"}},
    ),
    "jinja_environment_options": ({"trim_blocks": True}, {"lstrip_blocks": True}),
}

#: idiom: (hub config text, expected from (A, B, default))
LIST_IDIOMS = {
    "plain": ("c.{s}.{k} = [A]", lambda a, b, d: [a]),
    "append": ("c.{s}.{k}.append(A)", lambda a, b, d: [*d, a]),
    "extend": ("c.{s}.{k}.extend([A, B])", lambda a, b, d: [*d, a, b]),
    "prepend": ("c.{s}.{k}.prepend([A])", lambda a, b, d: [a, *d]),
    "insert": ("c.{s}.{k}.insert(0, A)", lambda a, b, d: [a, *d]),
    "prepend-then-append": (
        "c.{s}.{k}.prepend([A]); c.{s}.{k}.append(B)",
        lambda a, b, d: [a, *d, b],
    ),
    "merge-onto-a-plain-list": (
        "c.{s}.{k} = [B]\nlater = Config(); later.{s}.{k}.append(A); c.merge(later)",
        lambda a, b, d: [b, a],
    ),
    "merge-onto-a-lazy-list": (
        "c.{s}.{k}.append(B)\nlater = Config(); later.{s}.{k}.append(A); c.merge(later)",
        lambda a, b, d: [*d, b, a],
    ),
    "only-read": ("print(c.{s}.{k})", lambda a, b, d: list(d)),
}
DICT_IDIOMS = {
    "plain": ("c.{s}.{k} = dict(A)", lambda a, b, d: {**a}),
    "update": ("c.{s}.{k}.update(A)", lambda a, b, d: {**d, **a}),
    "update-twice": ("c.{s}.{k}.update(A); c.{s}.{k}.update(B)", lambda a, b, d: {**d, **a, **b}),
    "merge-onto-a-plain-dict": (
        "c.{s}.{k} = dict(A)\nlater = Config(); later.{s}.{k}.update(B); c.merge(later)",
        lambda a, b, d: {**a, **b},
    ),
    "only-read": ("print(c.{s}.{k})", lambda a, b, d: dict(d)),
}


def hub_rows() -> list[Any]:
    rows = []
    for key, (a, b, default) in LIST_KEYS.items():
        for idiom, (text, expect) in LIST_IDIOMS.items():
            rows.append(pytest.param(key, text, a, b, expect(a, b, default), id=f"{key}-{idiom}"))
    for key, (a, b) in DICT_KEYS.items():
        for idiom, (text, expect) in DICT_IDIOMS.items():
            rows.append(pytest.param(key, text, a, b, expect(a, b, {}), id=f"{key}-{idiom}"))
    return rows


def load(
    tmp_path: Path, section: str, key: str, text: str, a: Any, b: Any, after: str = ""
) -> Config:
    path = tmp_path / "jupyterhub_config.py"
    body = text.format(s=section, k=key)
    path.write_text(
        f"from traitlets.config import Config\nA = {a!r}\nB = {b!r}\n{body}\n"
        + textwrap.dedent(after)
    )
    return PyFileConfigLoader(path.name, path=str(tmp_path)).load_config()


def hub_from(c: Config) -> JupyterHub:
    """The real JupyterHub application configured by ``c`` (as ``jupyterhub -f`` loads it)."""
    return JupyterHub(config=copy.deepcopy(c))


@pytest.mark.parametrize(("key", "text", "a", "b", "expected"), hub_rows())
def test_every_jupyterhub_key_is_read_as_jupyterhub_reads_it_in_every_idiom(
    tmp_path, key, text, a, b, expected
):
    c = load(tmp_path, "JupyterHub", key, text, a, b)
    before = repr(c.JupyterHub)
    assert jupyterhub_value(c, key) == expected
    assert getattr(hub_from(c), key) == expected
    assert repr(c.JupyterHub) == before  # reading leaves the lazy value for JupyterHub


@pytest.mark.parametrize(("key", "text", "a", "b", "expected"), hub_rows())
def test_configure_keeps_the_operators_entries_of_every_jupyterhub_key_in_every_idiom(
    tmp_path, key, text, a, b, expected
):
    c = load(tmp_path, "JupyterHub", key, text, a, b)
    configure(c, get_config=lambda key, default=None: default)
    hub = hub_from(c)
    value = getattr(hub, key)
    if key == "extra_handlers":
        ours = [WayOutHandler, MoveHandler, SetMoveHandler, StatusHandler]
        assert value == [*expected, *((value[i - 4][0], h) for i, h in enumerate(ours))]
    elif key == "custom_scopes":
        assert value == {**expected, SCOPE: value[SCOPE]}
    elif key == "jinja_environment_options":
        assert value == {**expected, "extensions": [NAV_LINK]}
    elif key == "template_paths":
        at = expected.index(JUPYTERHUB_TEMPLATES) if JUPYTERHUB_TEMPLATES in expected else None
        ours = [*expected]
        ours.insert(len(ours) if at is None else at, str(HUB_TEMPLATES))
        assert value == ours
    elif key == "template_vars":
        assert {k: v for k, v in value.items() if k != "announcement_home"} == expected
        assert callable(value["announcement_home"])
    else:  # configure(c) does not write it: what the operator wrote reaches JupyterHub intact
        assert value == expected
    assert issubclass(hub.spawner_class, ColocatingKubeSpawner)


#: the spawner's keys configure(c) reads (profile_list and the affinity keys are also cleaned,
#: tests/unit/test_helm_configure.py): (A, B, ColocatingKubeSpawner's default)
SPAWNER_LIST_KEYS: dict[str, tuple[Any, Any, list[Any]]] = {
    "premium_resources": ("x.io/tpu", "y.io/fpga", list(DEFAULT_PREMIUM_RESOURCES)),
    "pod_affinity_required": (
        {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "zone"},
        {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": "zone"},
        [],
    ),
    "profile_list": ({"display_name": "cpu", "slug": "cpu"}, {"display_name": "gpu"}, []),
}
SPAWNER_DICT_KEYS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "extra_pod_config": ({"dnsPolicy": "None"}, {"priorityClassName": "users"}),
}


def spawner_rows() -> list[Any]:
    rows = []
    for section in ("Spawner", "KubeSpawner", "ColocatingKubeSpawner"):
        for key, (a, b, default) in SPAWNER_LIST_KEYS.items():
            for idiom, (text, expect) in LIST_IDIOMS.items():
                rows.append(
                    pytest.param(
                        section,
                        key,
                        default,
                        text,
                        a,
                        b,
                        expect(a, b, default),
                        id=f"{section}-{key}-{idiom}",
                    )
                )
        for key, (a, b) in SPAWNER_DICT_KEYS.items():
            for idiom, (text, expect) in DICT_IDIOMS.items():
                rows.append(
                    pytest.param(
                        section,
                        key,
                        {},
                        text,
                        a,
                        b,
                        expect(a, b, {}),
                        id=f"{section}-{key}-{idiom}",
                    )
                )
    return rows


@pytest.mark.parametrize(
    ("section", "key", "default", "text", "a", "b", "expected"), spawner_rows()
)
async def test_every_spawner_key_is_read_as_the_spawner_reads_it_in_every_idiom_and_section(
    tmp_path, section, key, default, text, a, b, expected
):
    c = load(tmp_path, section, key, text, a, b)
    assert _configured(c, key, default) == expected
    assert getattr(ColocatingKubeSpawner(config=copy.deepcopy(c), _mock=True), key) == expected
    configure(c, get_config=lambda key, default=None: default)
    assert getattr(ColocatingKubeSpawner(config=c, _mock=True), key) == expected


def test_nebari_s_theme_then_configure_starts_the_real_hub_with_every_handler_and_path(tmp_path):
    """Nebari's ``01-theme.py`` idiom, then the documented switch, loaded the way
    ``jupyterhub -f`` loads a config file: before the fix, ``TypeError: 'LazyConfigValue'
    object is not iterable`` stopped the hub here."""
    path = tmp_path / "jupyterhub_config.py"
    path.write_text(
        textwrap.dedent(
            """
            class Theme:
                pass

            c.JupyterHub.extra_handlers.extend([(r"/theme", Theme)])
            c.JupyterHub.template_paths.extend(["/srv/theme"])
            c.JupyterHub.template_vars = {"hub_title": "Nebari"}
            c.JupyterHub.services.extend([{"name": "argo", "url": "http://127.0.0.1:1"}])
            c.JupyterHub.tornado_settings.update({"slow_spawn_timeout": 0})

            from nebari_colocate.helm import configure

            configure(c, get_config=lambda key, default=None: default)
            c.JupyterHub.extra_handlers.append((r"/later", Theme))
            """
        )
    )
    hub = JupyterHub()
    hub.load_config_file(path.name, path=str(tmp_path))
    handlers = [(p, h.__name__) for p, h in hub.extra_handlers]
    assert [h for _, h in handlers] == [
        "Theme",
        "WayOutHandler",
        "MoveHandler",
        "SetMoveHandler",
        "StatusHandler",
        "Theme",
    ]
    assert hub.template_paths == [str(HUB_TEMPLATES), JUPYTERHUB_TEMPLATES, "/srv/theme"]
    assert hub.template_vars["hub_title"] == "Nebari"
    assert hub.services == [{"name": "argo", "url": "http://127.0.0.1:1"}]
    assert hub.tornado_settings == {"slow_spawn_timeout": 0}
    assert issubclass(hub.spawner_class, ColocatingKubeSpawner)
