"""Every word a person reads and every field a tool reads stay byte for byte as recorded:
``simulate`` (JSON and text) over every example scenario, a refusal's words for every reason
code, every event verdict, the way out's outcomes and form, the hub log's and the command's
lines, the public words tables and the metrics' names.

The recorded files are tests/unit/golden/ (tests/support/golden.py renders them). A change of
words on purpose regenerates them, from the repository root, and commits the diff beside it:

    python -m tests.support.golden
"""

from __future__ import annotations

import difflib

import pytest

from tests.support import golden

RENDERED = golden.render_all()
RECORDED = sorted(
    path.relative_to(golden.GOLDEN).as_posix()
    for path in golden.GOLDEN.rglob("*")
    if path.is_file()
)


def test_every_rendered_words_file_is_recorded_and_nothing_else_is():
    assert sorted(RENDERED) == RECORDED, "regenerate: python -m tests.support.golden"


@pytest.mark.parametrize("name", sorted(RENDERED))
def test_the_words_are_byte_for_byte_as_recorded(name):
    recorded = (golden.GOLDEN / name).read_text()
    rendered = RENDERED[name]
    if rendered != recorded:
        diff = difflib.unified_diff(
            recorded.splitlines(), rendered.splitlines(), "recorded", "now", lineterm="", n=1
        )
        pytest.fail(
            f"{name} changed (on purpose? python -m tests.support.golden):\n"
            + "\n".join(list(diff)[:40])
        )


def test_the_golden_covers_every_example_scenario():
    scenarios = {p.name for p in golden.SCENARIOS.iterdir() if p.is_dir()}
    covered = {
        name.split("/")[1].split(".")[0] for name in RENDERED if name.startswith("simulate/")
    }
    assert covered == scenarios
