"""configure(c) takes hand-written co-location affinity out of every place a hub config writes it.

Each row is a hub config file, loaded by traitlets' own PyFileConfigLoader (as JupyterHub loads
``jupyterhub_config.py``), so ``.append`` / ``.update`` are real LazyConfigValues; the check is
what a real ColocatingKubeSpawner built from the config ends up with, after KubeSpawner applied
the chosen profile.
"""

from __future__ import annotations

import logging
import re
import textwrap

import pytest
from kubespawner import KubeSpawner
from traitlets import TraitError
from traitlets.config import Config
from traitlets.config.loader import PyFileConfigLoader

from nebari_colocate import ColocatingKubeSpawner
from nebari_colocate.helm import configure, remove_colocation_affinity

from .test_spawner_config import offline_kubeconfig  # noqa: F401  (autouse fixture)

HOSTNAME = "kubernetes.io/hostname"
BY_USERNAME = {
    "labelSelector": {"matchLabels": {"hub.jupyter.org/username": "{username}"}},
    "topologyKey": HOSTNAME,
}
BY_OUR_KEY = {
    "labelSelector": {
        "matchExpressions": [
            {"key": "nebari.dev/colocate-user", "operator": "In", "values": ["{username}"]}
        ]
    },
    "topologyKey": HOSTNAME,
}
BY_CUSTOM_KEY = {
    "labelSelector": {"matchLabels": {"example.org/user": "{username}"}},
    "topologyKey": HOSTNAME,
}
NEAR_DB = {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": HOSTNAME}
SAME_ZONE = {  # not co-location on a node: a zone holds many nodes
    "labelSelector": {"matchLabels": {"hub.jupyter.org/username": "{username}"}},
    "topologyKey": "topology.kubernetes.io/zone",
}

PRELUDE = f"""
BY_USERNAME = {BY_USERNAME!r}
BY_OUR_KEY = {BY_OUR_KEY!r}
BY_CUSTOM_KEY = {BY_CUSTOM_KEY!r}
NEAR_DB = {NEAR_DB!r}
SAME_ZONE = {SAME_ZONE!r}

def affinity(*terms):
    return {{"podAffinity": {{"requiredDuringSchedulingIgnoredDuringExecution": list(terms)}}}}

def profile(override, slug="gpu", **more):
    return {{"display_name": slug, "slug": slug, "kubespawner_override": override, **more}}
"""

VALUES = {"custom": {"storage-access-mode": "ReadWriteMany", "storage-class": "nfs"}}


def get_config(key, default=None):
    return VALUES.get(key, default)


def affinity_of(*terms: dict) -> dict:
    return {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": list(terms)}}


def load_hub_config(tmp_path, text: str) -> Config:
    path = tmp_path / "jupyterhub_config.py"
    path.write_text(PRELUDE + textwrap.dedent(text))
    return PyFileConfigLoader(path.name, path=str(tmp_path)).load_config()


def pod_terms(extra_pod_config: dict) -> list:
    affinity = extra_pod_config.get("affinity") or {}
    return (affinity.get("podAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")


async def spawner_of(c: Config, profile: str | None = None) -> ColocatingKubeSpawner:
    """The spawner JupyterHub would build from ``c``, with ``profile``'s overrides applied
    the way KubeSpawner applies them (its own load_user_options: no API call)."""
    cls = c.JupyterHub.spawner_class
    spawner = cls(config=c, _mock=True)
    if profile is not None:
        spawner.user_options = {"profile": profile}
        await KubeSpawner.load_user_options(spawner)
    return spawner


ROWS = [
    (
        "a-term-appended-to-the-lazy-list-is-removed-and-the-hub-starts",
        "c.KubeSpawner.pod_affinity_required.append(BY_USERNAME)",
        None,
        [],
        {},
        ["c.KubeSpawner.pod_affinity_required", "hub.jupyter.org/username"],
    ),
    (
        "only-the-co-location-term-of-the-lazy-list-goes",
        """
            c.KubeSpawner.pod_affinity_required.append(NEAR_DB)
            c.KubeSpawner.pod_affinity_required.extend([BY_OUR_KEY, SAME_ZONE])
            c.KubeSpawner.pod_affinity_required.insert(0, BY_USERNAME)
            c.KubeSpawner.pod_affinity_required.prepend([BY_USERNAME])
            """,
        None,
        [NEAR_DB, SAME_ZONE],
        {},
        ["nebari.dev/colocate-user", "hub.jupyter.org/username"],
    ),
    (
        "a-term-in-a-lazy-extra-pod-config-update-is-removed-the-rest-stays",
        """
            c.KubeSpawner.extra_pod_config.update(
                {"affinity": affinity(BY_USERNAME, NEAR_DB), "dnsPolicy": "None"}
            )
            """,
        None,
        [],
        {"affinity": affinity_of(NEAR_DB), "dnsPolicy": "None"},
        ["c.KubeSpawner.extra_pod_config", "hub.jupyter.org/username"],
    ),
    (
        "the-parent-section-spawner-is-cleaned-too",
        """
            c.Spawner.extra_pod_config = {"affinity": affinity(BY_OUR_KEY)}
            c.Spawner.pod_affinity_required = [BY_USERNAME]
            """,
        None,
        [],
        {},
        ["c.Spawner.extra_pod_config", "c.Spawner.pod_affinity_required"],
    ),
    (
        "a-lazy-update-on-top-of-the-parent-section-keeps-traitlets-merge",
        """
            c.Spawner.extra_pod_config = {"affinity": affinity(BY_OUR_KEY), "hostIPC": False}
            c.KubeSpawner.extra_pod_config.update({"dnsPolicy": "None"})
            """,
        None,
        [],
        {"hostIPC": False, "dnsPolicy": "None"},
        ["c.Spawner.extra_pod_config", "nebari.dev/colocate-user"],
    ),
    (
        "a-term-written-with-the-python-clients-names-counts",
        """
        c.KubeSpawner.pod_affinity_required = [
            {"label_selector": {"match_labels": {"hub.jupyter.org/username": "{username}"}},
             "topology_key": "kubernetes.io/hostname"},
        ]
        """,
        None,
        [],
        {},
        ["c.KubeSpawner.pod_affinity_required (term on hub.jupyter.org/username)"],
    ),
    (
        "the-configured-label-key-counts",
        """
            c.ColocatingKubeSpawner.colocation_label_key = "example.org/user"
            c.ColocatingKubeSpawner.pod_affinity_required = [BY_CUSTOM_KEY]
            """,
        None,
        [],
        {},
        ["c.ColocatingKubeSpawner.pod_affinity_required", "example.org/user"],
    ),
    (
        "a-profiles-kubespawner-override-is-cleaned",
        """
            c.KubeSpawner.profile_list = [
                profile({"extra_pod_config": {"affinity": affinity(BY_USERNAME)}}),
            ]
            """,
        "gpu",
        [],
        {},
        ["c.KubeSpawner.profile_list[gpu].kubespawner_override.extra_pod_config"],
    ),
    (
        "a-profile-appended-to-the-lazy-profile-list-is-cleaned",
        """
            c.KubeSpawner.profile_list.append(
                profile({"pod_affinity_required": [BY_USERNAME, NEAR_DB]})
            )
            """,
        "gpu",
        [NEAR_DB],
        {},
        ["c.KubeSpawner.profile_list[gpu].kubespawner_override.pod_affinity_required"],
    ),
    (
        "a-profile-options-choice-override-is-cleaned",
        """
            choice = {"display_name": "Big", "kubespawner_override": {
                "extra_pod_config": {"affinity": affinity(BY_OUR_KEY)}}}
            c.KubeSpawner.profile_list = [
                profile({}, profile_options={"size": {"display_name": "Size",
                                                      "choices": {"big": choice}}}),
            ]
            """,
        "gpu",
        [],
        {},
        ["c.KubeSpawner.profile_list[gpu].profile_options.size.choices.big"],
    ),
    (
        "a-callable-override-value-is-cleaned-when-called",
        """
            c.KubeSpawner.profile_list = [
                profile({"pod_affinity_required": lambda spawner: [BY_USERNAME, NEAR_DB]}),
            ]
            """,
        "gpu",
        [NEAR_DB],
        {},
        [
            "c.KubeSpawner.profile_list[gpu].kubespawner_override.pod_affinity_required",
            "called",
        ],
    ),
    (
        "a-sync-callable-profile-list-is-cleaned-when-called",
        """
            def profiles(spawner):
                return [profile({"extra_pod_config": {"affinity": affinity(BY_USERNAME)}})]
            c.KubeSpawner.profile_list = profiles
            """,
        "gpu",
        [],
        {},
        ["c.KubeSpawner.profile_list", "called"],
    ),
    (
        "an-async-callable-profile-list-is-cleaned-when-called",
        """
            async def profiles(spawner):
                return [profile({"pod_affinity_required": [BY_OUR_KEY]})]
            c.KubeSpawner.profile_list = profiles
            """,
        "gpu",
        [],
        {},
        ["c.KubeSpawner.profile_list", "called"],
    ),
    (
        "other-affinity-is-not-touched-and-nothing-is-said",
        """
            c.KubeSpawner.pod_affinity_required.append(NEAR_DB)
            c.KubeSpawner.extra_pod_config = {"affinity": affinity(SAME_ZONE)}
            """,
        None,
        [NEAR_DB],
        {"affinity": affinity_of(SAME_ZONE)},
        [],
    ),
]


@pytest.mark.parametrize(
    "test_variation_id, hub_config, profile, expect_required, expect_extra, expect_logged",
    ROWS,
    ids=[row[0] for row in ROWS],
)
async def test_configure_removes_hand_written_colocation_in_every_config_idiom(
    tmp_path,
    caplog,
    test_variation_id,
    hub_config,
    profile,
    expect_required,
    expect_extra,
    expect_logged,
):
    c = load_hub_config(tmp_path, hub_config)
    with caplog.at_level(logging.INFO):
        configure(c, get_config=get_config)
    logged = "\n".join(r.getMessage() for r in caplog.records if "co-location" in r.getMessage())
    for words in expect_logged:
        assert words in logged, logged
    if not expect_logged:
        assert "removed" not in logged, logged
    spawner = await spawner_of(c, profile)
    assert spawner.pod_affinity_required == expect_required
    assert spawner.extra_pod_config == expect_extra


async def test_configure_twice_changes_nothing_more(tmp_path):
    c = load_hub_config(
        tmp_path,
        """
        async def profiles(spawner):
            return [profile({"pod_affinity_required": [BY_OUR_KEY, NEAR_DB]})]
        c.KubeSpawner.profile_list = profiles
        c.KubeSpawner.pod_affinity_required.append(BY_USERNAME)
        """,
    )
    configure(c, get_config=get_config)
    wrapped = c.KubeSpawner.profile_list
    assert remove_colocation_affinity(c, "nebari.dev/colocate-user") == []
    configure(c, get_config=get_config)
    assert c.KubeSpawner.profile_list is wrapped
    spawner = await spawner_of(c, "gpu")
    assert spawner.pod_affinity_required == [NEAR_DB]


async def test_the_jhub_apps_subclass_section_is_cleaned(tmp_path):
    class JHubSpawner(ColocatingKubeSpawner):
        pass

    c = Config()
    c.JupyterHub.spawner_class = JHubSpawner
    c.JHubSpawner.pod_affinity_required.append(BY_USERNAME)
    configure(c, get_config=get_config)
    assert (await spawner_of(c)).pod_affinity_required == []


@pytest.mark.parametrize(
    "test_variation_id, hub_config, expect_error",
    [
        (
            "an-appended-premium-resource-is-valid",
            'c.KubeSpawner.premium_resources.append("x.io/tpu")',
            None,
        ),
        (
            "an-appended-bad-premium-resource-is-named",
            'c.KubeSpawner.premium_resources.append("bad key")',
            "'bad key'",
        ),
        (
            "an-appended-mode-that-agrees-is-valid",
            'c.KubeSpawner.storage_access_modes.append("ReadWriteOnce")',
            None,
        ),
        (
            "an-appended-mode-that-disagrees-is-named",
            'c.KubeSpawner.storage_access_modes.append("ReadWriteMany")',
            "storage_access_modes is ['ReadWriteOnce', 'ReadWriteMany']",
        ),
        (
            "a-setting-only-read-is-no-setting",
            "print(c.KubeSpawner.storage_class, c.KubeSpawner.storage_access_mode)",
            None,
        ),
    ],
)
def test_configure_validates_lazy_settings_as_the_spawner_would_read_them(
    tmp_path, test_variation_id, hub_config, expect_error
):
    c = load_hub_config(tmp_path, hub_config)
    before = repr(c.KubeSpawner)
    if expect_error is None:
        configure(c, get_config=lambda key, default=None: default)
    else:
        with pytest.raises((TraitError, ValueError), match=re.escape(expect_error)):
            configure(c, get_config=lambda key, default=None: default)
    assert repr(c.KubeSpawner) == before  # validating computed copies: the lazy values are intact


def test_configure_installs_the_way_out_handler_once_beside_other_handlers(tmp_path):
    from nebari_colocate.handlers import MoveHandler, WayOutHandler
    from nebari_colocate.set_move_step import SetMoveHandler
    from nebari_colocate.status_page import StatusHandler

    class Other:
        pass

    c = load_hub_config(tmp_path, "")
    c.JupyterHub.extra_handlers = [(r"/other", Other)]
    configure(c, get_config=get_config)
    configure(c, get_config=get_config)
    handlers = c.JupyterHub.extra_handlers
    assert [h[1] for h in handlers] == [
        Other,
        WayOutHandler,
        MoveHandler,
        SetMoveHandler,
        StatusHandler,
    ]
    # JupyterHub puts extra handlers under the hub's prefix (tests/e2e/test_way_out.py)
    assert handlers[1][0] == r"/colocate/way-out/([^/]+)/?([^/]*)"
