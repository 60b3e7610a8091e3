"""One numbered list of a move's steps: ``migrate.MOVE_STEPS`` (the table the mover runs and
``CHECKPOINTS`` is derived from), the package's docstring, docs/migrate.md's "What a move does,
step by step" and the step methods' docstrings say the same steps in the same order."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from nebari_colocate import migrate

DOC = Path(__file__).parents[2] / "docs" / "migrate.md"


def _numbered(text: str) -> list[tuple[int, str]]:
    """The items of a numbered list whose items start with a checkpoint in backticks."""
    return [
        (int(number), checkpoint)
        for number, checkpoint in re.findall(r"(?m)^(\d+)\. `{1,2}([a-z-]+)`{1,2}:", text)
    ]


def _expected() -> list[tuple[int, str]]:
    return list(enumerate(migrate.CHECKPOINTS, start=1))


def test_checkpoints_are_the_steps_table_in_order():
    assert tuple(checkpoint for checkpoint, _ in migrate.MOVE_STEPS) == migrate.CHECKPOINTS
    assert len(set(migrate.CHECKPOINTS)) == len(migrate.CHECKPOINTS) == 12


def test_the_package_docstring_numbers_the_steps_as_the_table_does():
    assert _numbered(migrate.__doc__ or "") == _expected()


def test_docs_migrate_numbers_the_steps_as_the_table_does():
    section = DOC.read_text().split("## What a move does, step by step", 1)[1].split("\n## ", 1)[0]
    assert _numbered(section) == _expected()


def test_each_step_method_exists_and_its_docstring_starts_with_its_number():
    for number, (_, method) in enumerate(migrate.MOVE_STEPS, start=1):
        step = getattr(migrate.Mover, method)
        assert inspect.iscoroutinefunction(step), method
        assert (step.__doc__ or "").startswith(f"{number}. "), method


def test_the_mover_runs_the_table():
    mover = migrate.Mover.__new__(migrate.Mover)
    steps = mover._steps()
    assert [name for name, _ in steps] == list(migrate.CHECKPOINTS)
    assert [step.__name__ for _, step in steps] == [method for _, method in migrate.MOVE_STEPS]
