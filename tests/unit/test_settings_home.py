"""Every setting has one home: nebari_colocate/config.py holds its default and its validator, the
reference documents it, and the helm module says whether it has a key.

"Ours" are the configurable traits ColocatingKubeSpawner adds to KubeSpawner's.  No cluster.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import math
from pathlib import Path

import pytest
from kubespawner import KubeSpawner
from traitlets import TraitError, ValidateHandler

from nebari_colocate import ColocatingKubeSpawner
from nebari_colocate.config import SETTINGS, check_config
from nebari_colocate.events import classify
from nebari_colocate.helm import KEYS, NOT_EXPOSED

DOCS = Path(__file__).resolve().parents[2] / "docs"
OURS = sorted(
    name
    for name in ColocatingKubeSpawner.class_traits(config=True)
    if name not in KubeSpawner.class_traits()
)


def _shown(value: object) -> str:
    """A default as the trait's help writes it (``Default: 60``, ``["nvidia.com/gpu", ...]``)."""
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list):
        return json.dumps(value)
    return str(value)


def test_there_are_settings_of_ours_to_check():
    assert "colocation_check_timeout" in OURS and "refusal_hold_seconds" in OURS


@pytest.mark.parametrize("name", OURS)
def test_every_setting_of_ours_takes_its_default_from_config(name):
    assert name in SETTINGS, f"{name} has no entry in nebari_colocate.config.SETTINGS"
    trait = ColocatingKubeSpawner.class_traits()[name]
    assert trait.default() == SETTINGS[name].default


def test_config_lists_no_setting_the_spawner_lacks():
    assert set(SETTINGS) == set(OURS)


@pytest.mark.parametrize("name", OURS)
def test_every_setting_of_ours_is_validated_by_its_validator_in_config(name):
    handlers = [v for v in vars(ColocatingKubeSpawner).values() if isinstance(v, ValidateHandler)]
    assert any(name in handler.trait_names for handler in handlers), f"{name} has no @validate"
    assert SETTINGS[name].check.__module__ == "nebari_colocate.config"


# a value each setting's validator refuses at hub start, with a message that names the setting
BAD_VALUES = {
    "storage_access_mode": "RWO",
    "premium_node_policy": "sometimes",
    "colocation_label_key": "not a key",
    "premium_resources": ["gpu"],
    "colocation_check_timeout": 0.1,
    "colocation_mode": "dryrun",
    "colocation_watch_stale_seconds": 10,
    "fail_fast_on_events": "yes",
    "colocation_share_pod_watch": "no",
    "colocation_dry_run_reuse_seconds": "600",
    "unschedulable_grace_seconds": math.nan,
    "image_pull_grace_seconds": math.inf,
    "detach_grace_seconds": -math.inf,
    "refusal_hold_seconds": "3",
    "colocation_unscheduled_timeout": 3,
    "default_server_display_name": 7,
    "way_out_release_timeout": 0,
    "colocation_headroom": "on",
    "colocation_headroom_footprint": {"cpu": "lots"},
}


def test_every_setting_has_a_bad_value_in_this_table():
    assert set(BAD_VALUES) == set(SETTINGS)


@pytest.mark.parametrize("name, value", sorted(BAD_VALUES.items()))
def test_a_bad_value_of_any_setting_stops_the_hub_naming_it(name, value):
    with pytest.raises(TraitError, match=name):
        check_config({"ColocatingKubeSpawner": {name: value}})


def test_the_defaults_pass_their_own_validators():
    check_config({})
    for name, setting in SETTINGS.items():
        assert setting.check(setting.default) == setting.default, name


def test_the_event_graces_of_classify_are_the_settings_defaults():
    params = inspect.signature(classify).parameters
    for name in ("unschedulable_grace_seconds", "image_pull_grace_seconds", "detach_grace_seconds"):
        assert params[name].default == SETTINGS[name].default
    timeout = SETTINGS["colocation_unscheduled_timeout"].default
    assert params["unscheduled_timeout_seconds"].default == timeout


def _docs_conf():
    spec = importlib.util.spec_from_file_location("_docs_conf", DOCS / "conf.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_reference_generates_an_entry_for_every_setting_of_ours():
    reference = (DOCS / "reference.md").read_text()
    assert ".. own-traits:: nebari_colocate.spawner.ColocatingKubeSpawner" in reference
    listed = _docs_conf()._own_config_traits("nebari_colocate.spawner.ColocatingKubeSpawner")
    assert sorted(listed) == OURS


@pytest.mark.parametrize("name", OURS)
def test_every_setting_of_ours_says_its_default_in_its_help(name):
    help_text = " ".join(ColocatingKubeSpawner.class_traits()[name].help.split())
    assert _shown(SETTINGS[name].default) in help_text


@pytest.mark.parametrize("name", OURS)
def test_every_setting_of_ours_is_a_helm_key_or_listed_as_not_exposed(name):
    assert (name in KEYS.values()) != (name in NOT_EXPOSED), (
        f"{name}: give it a helm key in helm.KEYS or list it in helm.NOT_EXPOSED (not both)"
    )


def test_helm_keys_and_not_exposed_name_real_settings():
    traits = ColocatingKubeSpawner.class_traits(config=True)
    assert set(KEYS.values()) <= set(traits)
    assert set(NOT_EXPOSED) <= set(OURS)
    assert len(set(NOT_EXPOSED)) == len(NOT_EXPOSED)


def test_the_reference_names_every_setting_helm_does_not_expose():
    reference = " ".join((DOCS / "reference.md").read_text().split())
    for name in NOT_EXPOSED:
        assert f"`{name}`" in reference
    for key in KEYS:
        assert f"`custom.{key}`" in reference
