"""Configuration of ColocatingKubeSpawner: traits, conflicts, helm values, hub-start validation.

No cluster: KubeSpawner's constructor only loads a kubeconfig (pointed at a closed loopback port).
"""

from __future__ import annotations

import pytest
import yaml
from kubernetes_asyncio.config import kube_config
from traitlets import TraitError
from traitlets.config import Config

from nebari_colocate import ColocatingKubeSpawner
from nebari_colocate.config import ColocationConfigError, check_config
from nebari_colocate.helm import HelmValuesError, configure, values_to_config


@pytest.fixture(autouse=True)
def offline_kubeconfig(tmp_path, monkeypatch):
    """KubeSpawner loads a kubeconfig in __init__; give it one that points nowhere reachable."""
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": "x"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    # kubernetes_asyncio reads $KUBECONFIG at import time; KubeSpawner's load_config() reads this.
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(path))


def make(**traits) -> ColocatingKubeSpawner:
    c = Config()
    for name, value in traits.items():
        setattr(c.ColocatingKubeSpawner, name, value)
    return ColocatingKubeSpawner(config=c, _mock=True)


async def test_defaults_follow_design_section_4():
    spawner = make()
    assert spawner.storage_access_mode == "ReadWriteOnce"
    assert spawner.storage_access_modes == ["ReadWriteOnce"]
    assert spawner.colocation_label_key == "nebari.dev/colocate-user"
    assert spawner.premium_resources == ["nvidia.com/gpu", "amd.com/gpu"]
    assert spawner.premium_node_policy == "warn"
    assert spawner.colocation_check_timeout == 5
    assert spawner.colocation_watch_stale_seconds == 75


async def test_storage_access_mode_is_caseless_and_drives_new_pvcs():
    spawner = make(storage_access_mode="readwritemany", storage_class="nfs-client")
    assert spawner.storage_access_mode == "ReadWriteMany"
    assert spawner.get_pvc_manifest().spec.access_modes == ["ReadWriteMany"]


@pytest.mark.parametrize(
    "test_variation_id, traits, error, expect_in_message",
    [
        (
            "unknown-mode",
            {"storage_access_mode": "RWO"},
            TraitError,
            ["storage_access_mode", "'RWO'", "ReadWriteOnce", "ReadWriteMany"],
        ),
        (
            "rwx-without-class-on-a-hub-that-creates-claims",
            {"storage_access_mode": "ReadWriteMany", "storage_pvc_ensure": True},
            ColocationConfigError,
            ["storage_access_mode", "storage_class", "StorageClass", "storage_pvc_ensure"],
        ),
        (
            "rwx-with-empty-class",
            {
                "storage_access_mode": "ReadWriteMany",
                "storage_class": "",
                "storage_pvc_ensure": True,
            },
            ColocationConfigError,
            ["storage_class is ''"],
        ),
        (
            "explicit-modes-contradict",
            {"storage_access_modes": ["ReadWriteMany"]},
            ColocationConfigError,
            ["storage_access_modes is ['ReadWriteMany']", "storage_access_mode is 'ReadWriteOnce'"],
        ),
        (
            "label-key-with-space",
            {"colocation_label_key": "nebari dev/user"},
            TraitError,
            ["colocation_label_key", "'nebari dev/user'", "prefix"],
        ),
        (
            "label-key-too-long",
            {"colocation_label_key": "a" * 64},
            TraitError,
            ["colocation_label_key", "1-63 characters"],
        ),
        (
            "unknown-premium-policy",
            {"premium_node_policy": "deny"},
            TraitError,
            ["premium_node_policy", "'deny'", "allow", "warn", "refuse"],
        ),
        (
            "premium-resource-without-domain",
            {"premium_resources": ["gpu"]},
            TraitError,
            ["premium_resources", "'gpu'", "nvidia.com/gpu"],
        ),
        (
            "zero-timeout",
            {"colocation_check_timeout": 0},
            TraitError,
            ["colocation_check_timeout", "at least 0.25 seconds"],
        ),
        (
            "timeout-too-short-for-one-request",
            {"colocation_check_timeout": 0.001},
            TraitError,
            ["colocation_check_timeout 0.001 cannot work", "at least 0.25 seconds", "API"],
        ),
        (
            "infinite-timeout",
            {"colocation_check_timeout": float("inf")},
            TraitError,
            ["colocation_check_timeout inf", "finite"],
        ),
        (
            "watch-stale-bound-shorter-than-a-bookmark",
            {"colocation_watch_stale_seconds": 30},
            TraitError,
            ["colocation_watch_stale_seconds 30 cannot work", "at least 65", "bookmark"],
        ),
    ],
)
async def test_bad_configuration_fails_with_a_message_naming_setting_value_and_choices(
    test_variation_id, traits, error, expect_in_message
):
    with pytest.raises(error) as raised:
        make(**traits)
    for fragment in expect_in_message:
        assert fragment in str(raised.value)


@pytest.mark.parametrize(
    "test_variation_id, sections, expect_error",
    [
        ("defaults", {}, None),
        (
            "rwx-with-class-on-kubespawner",
            {
                "KubeSpawner": {"storage_class": "nfs"},
                "ColocatingKubeSpawner": {"storage_access_mode": "ReadWriteMany"},
            },
            None,
        ),
        (
            "rwx-without-class-creating-claims",
            {
                "KubeSpawner": {"storage_pvc_ensure": True},
                "ColocatingKubeSpawner": {"storage_access_mode": "ReadWriteMany"},
            },
            "storage_class",
        ),
        (
            # Nebari: storage.type static, one shared claim made by Nebari, none by the hub
            "rwx-without-class-on-claims-made-by-others",
            {
                "KubeSpawner": {"storage_pvc_ensure": False},
                "ColocatingKubeSpawner": {"storage_access_mode": "ReadWriteMany"},
            },
            None,
        ),
        (
            "rwx-without-class-and-kubespawners-default-of-creating-none",
            {"ColocatingKubeSpawner": {"storage_access_mode": "ReadWriteMany"}},
            None,
        ),
        (
            "subclass-section-wins",
            {
                "KubeSpawner": {"storage_access_modes": ["ReadWriteMany"]},
                "ColocatingKubeSpawner": {"storage_access_modes": ["ReadWriteOnce"]},
            },
            None,
        ),
        (
            "stock-rwx-modes-left-in-kubespawner",
            {"KubeSpawner": {"storage_access_modes": ["ReadWriteMany"]}},
            "storage_access_modes",
        ),
        (
            "bad-mode",
            {"ColocatingKubeSpawner": {"storage_access_mode": "Many"}},
            "storage_access_mode 'Many'",
        ),
        (
            "bad-label",
            {"ColocatingKubeSpawner": {"colocation_label_key": "-bad"}},
            "colocation_label_key",
        ),
        (
            "check-timeout-too-short",
            {"ColocatingKubeSpawner": {"colocation_check_timeout": 0.001}},
            "at least 0.25 seconds",
        ),
        (
            "watch-stale-bound-too-short",
            {"ColocatingKubeSpawner": {"colocation_watch_stale_seconds": 10}},
            "at least 65 seconds",
        ),
    ],
)
def test_check_config_validates_a_hub_config_without_creating_a_spawner(
    test_variation_id, sections, expect_error
):
    c = Config()
    for section, values in sections.items():
        for name, value in values.items():
            setattr(c[section], name, value)
    if expect_error is None:
        check_config(c)
    else:
        with pytest.raises((TraitError, ColocationConfigError), match=expect_error):
            check_config(c)


@pytest.mark.parametrize(
    "test_variation_id, custom, expect",
    [
        ("empty", {}, {}),
        (
            "rwx",
            {"storage-access-mode": "ReadWriteMany", "storage-class": "nfs"},
            {"storage_access_mode": "ReadWriteMany", "storage_class": "nfs"},
        ),
        ("empty-class-means-unset", {"storage-class": ""}, {"storage_class": None}),
        (
            "colocate-keys",
            {"colocate-premium-node-policy": "refuse", "colocate-check-timeout": 2},
            {"premium_node_policy": "refuse", "colocation_check_timeout": 2},
        ),
        ("other-custom-keys-ignored", {"theme": {"x": 1}}, {}),
    ],
)
def test_helm_custom_values_map_to_traits(test_variation_id, custom, expect):
    assert values_to_config(custom) == expect


def test_helm_unknown_colocate_key_is_named():
    with pytest.raises(HelmValuesError, match=r"custom\.colocate-policy"):
        values_to_config({"colocate-policy": "refuse"})


def test_helm_configure_sets_config_and_fails_at_hub_start_on_conflict():
    c = Config()
    values = {"custom": {"storage-access-mode": "ReadWriteMany", "storage-class": "nfs"}}
    configure(c, get_config=lambda key, default=None: values.get(key, default))
    assert c.ColocatingKubeSpawner.storage_access_mode == "ReadWriteMany"
    assert c.ColocatingKubeSpawner.storage_class == "nfs"

    values = {"custom": {"storage-access-mode": "ReadWriteMany", "storage-class": ""}}
    dynamic = Config()
    dynamic.KubeSpawner.storage_pvc_ensure = True  # zero-to-jupyterhub's storage type dynamic
    with pytest.raises(ColocationConfigError, match="storage_class"):
        configure(dynamic, get_config=lambda key, default=None: values.get(key, default))


@pytest.mark.parametrize(
    "test_variation_id, storage_pvc_ensure, storage_class, expect_error",
    [
        ("nebari-static-storage-no-class", False, None, False),
        ("nebari-static-storage-empty-class", False, "", False),
        ("dynamic-storage-no-class", True, None, True),
        ("dynamic-storage-with-class", True, "nfs", False),
    ],
)
async def test_rwx_needs_a_storage_class_only_when_the_hub_creates_claims(
    test_variation_id, storage_pvc_ensure, storage_class, expect_error
):
    traits = {"storage_access_mode": "ReadWriteMany", "storage_pvc_ensure": storage_pvc_ensure}
    if storage_class is not None:
        traits["storage_class"] = storage_class
    if expect_error:
        with pytest.raises(ColocationConfigError, match="storage_class"):
            make(**traits)
    else:
        assert make(**traits).storage_access_mode == "ReadWriteMany"
    c = Config()
    c.KubeSpawner.storage_pvc_ensure = storage_pvc_ensure
    values = {"custom": {"storage-access-mode": "ReadWriteMany", "storage-class": storage_class}}
    if expect_error:
        with pytest.raises(ColocationConfigError, match="storage_class"):
            configure(c, get_config=lambda key, default=None: values.get(key, default))
    else:
        configure(c, get_config=lambda key, default=None: values.get(key, default))


def test_helm_configure_writes_the_values_into_the_section_it_is_given():
    c = Config()
    values = {"custom": {"storage-access-mode": "ReadWriteMany", "storage-class": "nfs"}}
    configure(c, get_config=lambda key, default=None: values.get(key, default), section="MySpawner")
    assert c.MySpawner.storage_access_mode == "ReadWriteMany"
    assert c.MySpawner.storage_class == "nfs"
    assert "storage_access_mode" not in c.ColocatingKubeSpawner


def test_helm_mode_wins_over_the_charts_storage_access_modes_and_keeps_its_class():
    # zero-to-jupyterhub always sets these two from singleuser.storage.dynamic.*
    c = Config()
    c.KubeSpawner.storage_access_modes = ["ReadWriteOnce"]
    c.KubeSpawner.storage_class = "longhorn-rwx"
    values = {"custom": {"storage-access-mode": "readwritemany", "storage-class": ""}}
    configure(c, get_config=lambda key, default=None: values.get(key, default))
    assert c.ColocatingKubeSpawner.storage_access_mode == "ReadWriteMany"
    assert c.ColocatingKubeSpawner.storage_access_modes == ["ReadWriteMany"]
    assert "storage_class" not in c.ColocatingKubeSpawner


def test_helm_bad_mode_is_named():
    values = {"custom": {"storage-access-mode": "RWX", "storage-class": "nfs"}}
    with pytest.raises(HelmValuesError, match=r"custom\.storage-access-mode 'RWX'"):
        configure(Config(), get_config=lambda key, default=None: values.get(key, default))


def test_helm_configure_outside_the_hub_image_says_why():
    with pytest.raises(HelmValuesError, match="z2jh"):
        configure(Config())


def test_importing_the_package_has_no_side_effects():
    import subprocess
    import sys

    code = (
        "import sys, nebari_colocate; "
        "print('kubespawner' in sys.modules, 'jupyterhub' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_entry_point_names_the_spawner():
    from importlib.metadata import entry_points

    (ep,) = [e for e in entry_points(group="jupyterhub.spawners") if e.name == "colocate"]
    assert ep.load() is ColocatingKubeSpawner
