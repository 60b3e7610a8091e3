"""docs/architecture.md stays true: every module of the package is on its map, and each module
imports only modules listed before it (the map is read from the ground up)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "nebari_colocate"
ROW = re.compile(r"^\| `([a-z_]+)` \|")


def _map() -> list[str]:
    return [
        match.group(1)
        for line in (ROOT / "docs" / "architecture.md").read_text().splitlines()
        if (match := ROW.match(line))
    ]


def _package_imports(module: str) -> set[str]:
    """The package's modules ``module`` imports, at the top or inside a function."""
    tree = ast.parse((PACKAGE / f"{module}.py").read_text())
    modules = {path.stem for path in PACKAGE.glob("*.py")}
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                found.add(node.module.split(".")[0])
            else:
                found |= {alias.name for alias in node.names if alias.name in modules}
    return found - {"__init__"}


def test_every_module_of_the_package_is_on_the_map_once():
    listed = _map()
    modules = {path.stem for path in PACKAGE.glob("*.py")} - {"__init__"}
    assert sorted(listed) == sorted(modules)


def test_every_module_imports_only_modules_below_it_on_the_map():
    listed = _map()
    for floor, module in enumerate(listed):
        above = _package_imports(module) - set(listed[:floor])
        assert not above, f"{module} imports {sorted(above)}, listed after it in architecture.md"
