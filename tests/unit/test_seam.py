"""The handler <-> spawner seam (nebari_colocate/seam.py): every member the way out's and the
move's steps (and fail fast's late refusal) may ask of a spawner is one ColocatingKubeSpawner
has. mypy checks the steps'
side; KubeSpawner ships no types, so this checks the spawner's side on a real instance."""

from __future__ import annotations

import inspect

import pytest

from nebari_colocate.seam import HandlerSpawner, LateMoveSpawner
from nebari_colocate.spawner import ColocatingKubeSpawner


def _members(seam: type) -> list[str]:
    return sorted(
        set(seam.__annotations__)
        | {
            name
            for name, value in vars(seam).items()
            if not name.startswith("_") and (callable(value) or isinstance(value, property))
        }
    )


MEMBERS = _members(HandlerSpawner)
LATE_MOVE_MEMBERS = _members(LateMoveSpawner)


def test_the_seam_lists_what_the_steps_ask():
    assert {"colocation_failure", "colocation_locks", "home_pods", "refusal_hold_ended"} <= set(
        MEMBERS
    )
    assert {"colocation_policy", "whole_set_state", "log"} <= set(LATE_MOVE_MEMBERS)


def _set_in_init(name: str) -> bool:
    """``self.<name> =`` in the __init__ of the spawner or of a class it derives from."""
    return any(
        f"self.{name} =" in inspect.getsource(cls.__init__)
        or f"self.{name}: " in inspect.getsource(cls.__init__)
        for cls in ColocatingKubeSpawner.__mro__
        if "__init__" in vars(cls)
        and cls.__module__.split(".")[0] in {"nebari_colocate", "kubespawner", "jupyterhub"}
    )


@pytest.mark.parametrize(
    ("seam", "name"),
    [(HandlerSpawner, n) for n in MEMBERS] + [(LateMoveSpawner, n) for n in LATE_MOVE_MEMBERS],
)
def test_the_spawner_has_every_member_a_handler_may_ask_for(seam, name):
    cls = ColocatingKubeSpawner
    assert hasattr(cls, name) or _set_in_init(name), (
        f"ColocatingKubeSpawner has no {name} (seam.{seam.__name__})"
    )
    declared = vars(seam).get(name)
    if inspect.iscoroutinefunction(declared):
        assert inspect.iscoroutinefunction(getattr(cls, name)), name
