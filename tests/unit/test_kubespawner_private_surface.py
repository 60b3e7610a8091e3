"""KubeSpawner's private surface that ColocatingKubeSpawner overrides or reads, guarded.

KubeSpawner gives no promise about its private names; the subclass still overrides five of its
private methods and reads five more names. When a kubespawner release renames one or changes a
signature, this test fails with the name and what changed, instead of a hub that breaks at its
first spawn. The package pins ``jupyterhub-kubespawner<8`` for the same reason; a new kubespawner
line needs this table checked again (docs/jupyterhub-versions.md).
"""

import inspect
import re
from pathlib import Path

import pytest
from kubespawner import KubeSpawner

from nebari_colocate.spawner import ColocatingKubeSpawner

ROOT = Path(__file__).resolve().parents[2]

# name -> parameters (after self) as KubeSpawner 7.0 and 7.1 define them, and whether async
OVERRIDDEN = {
    "_ensure_namespace": ((), True),
    "_make_create_pod_request": (("pod", "request_timeout"), True),
    "_make_create_pvc_request": (("pvc", "request_timeout"), True),
    "_make_delete_pod_request": (
        ("pod_name", "delete_options", "grace_seconds", "request_timeout"),
        True,
    ),
    "_start_watching_pods": (("replace",), True),
}

# methods read (called), with their parameters after self
CALLED = {
    "_get_reflector_key": (("kind",), False),
    "_start_watching_events": (("replace",), True),
}

# attributes read: set by KubeSpawner (or JupyterHub's Spawner) on an instance or its class
ATTRIBUTES = ("_last_event", "_start_future", "_spawn_future")


def parameters(function) -> tuple[str, ...]:
    return tuple(list(inspect.signature(function).parameters)[1:])


@pytest.mark.parametrize("name", sorted(OVERRIDDEN))
def test_every_overridden_private_method_still_has_the_signature_we_override(name):
    expected, is_async = OVERRIDDEN[name]
    theirs = getattr(KubeSpawner, name, None)
    assert theirs is not None, f"KubeSpawner.{name} is gone: ColocatingKubeSpawner overrides it"
    assert parameters(theirs) == expected, (
        f"KubeSpawner.{name}'s parameters changed to {parameters(theirs)} "
        f"(ColocatingKubeSpawner overrides it with {expected})"
    )
    assert inspect.iscoroutinefunction(theirs) is is_async, f"KubeSpawner.{name} changed async-ness"
    ours = ColocatingKubeSpawner.__dict__.get(name)
    assert ours is not None, f"ColocatingKubeSpawner no longer overrides {name}: update this table"
    assert parameters(ours) == expected, f"ColocatingKubeSpawner.{name} takes other parameters"


@pytest.mark.parametrize("name", sorted(CALLED))
def test_every_private_method_we_call_still_takes_what_we_pass(name):
    expected, is_async = CALLED[name]
    theirs = getattr(KubeSpawner, name, None)
    assert theirs is not None, f"KubeSpawner.{name} is gone: ColocatingKubeSpawner calls it"
    assert parameters(theirs) == expected, (
        f"KubeSpawner.{name}'s parameters changed to {parameters(theirs)} (we pass {expected})"
    )
    assert inspect.iscoroutinefunction(theirs) is is_async, f"KubeSpawner.{name} changed async-ness"


def test_every_private_attribute_we_read_is_still_set_by_kubespawner_or_jupyterhub():
    import jupyterhub.spawner
    import kubespawner.spawner

    sources = inspect.getsource(kubespawner.spawner) + inspect.getsource(jupyterhub.spawner)
    for name in ATTRIBUTES:
        assert re.search(rf"(self\.|^\s+){name}\s*(:[^=]*)?=", sources, re.M), (
            f"neither KubeSpawner nor JupyterHub's Spawner sets {name} any more"
        )


def test_the_table_names_every_kubespawner_private_name_the_package_uses():
    package = ROOT / "nebari_colocate"
    text = "".join(p.read_text() for p in package.rglob("*.py"))
    used = set(re.findall(r"\b(?:self|spawner|super\(\))\.(_[a-zA-Z]\w*)", text))
    theirs = {n for n in used if hasattr(KubeSpawner, n)} | {n for n in used if n in ATTRIBUTES}
    # names both sides define because we override them are in OVERRIDDEN; the rest are reads
    known = set(OVERRIDDEN) | set(CALLED) | set(ATTRIBUTES) | {"_failed"}
    unknown = sorted(theirs - known)
    assert not unknown, f"KubeSpawner private names used but not guarded here: {unknown}"


def test_the_package_pins_kubespawner_below_its_next_major_version():
    text = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'"jupyterhub-kubespawner>=7\.0,<8"', text), (
        "pyproject.toml must pin jupyterhub-kubespawner>=7.0,<8"
    )
