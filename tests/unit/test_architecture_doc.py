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


def _modules() -> set[str]:
    """The package's modules: its files, and its subpackages (a folder with __init__.py)."""
    files = {path.stem for path in PACKAGE.glob("*.py")}
    packages = {path.parent.name for path in PACKAGE.glob("*/__init__.py")}
    return (files | packages) - {"__init__"}


def _package_imports(module: str) -> set[str]:
    """The package's modules ``module`` imports, at the top or inside a function; for a
    subpackage, what any of its files imports from outside it."""
    folder = PACKAGE / module
    files = sorted(folder.glob("*.py")) if folder.is_dir() else [PACKAGE / f"{module}.py"]
    # relative imports of the package's own modules: one dot in a module, two in a subpackage
    level = 2 if folder.is_dir() else 1
    modules = _modules()
    found: set[str] = set()
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == level:
                if node.module:
                    found.add(node.module.split(".")[0])
                else:
                    found |= {alias.name for alias in node.names if alias.name in modules}
    return found - {"__init__", module}


def test_every_module_of_the_package_is_on_the_map_once():
    listed = _map()
    assert sorted(listed) == sorted(_modules())


def test_every_module_imports_only_modules_below_it_on_the_map():
    listed = _map()
    for floor, module in enumerate(listed):
        above = _package_imports(module) - set(listed[:floor])
        assert not above, f"{module} imports {sorted(above)}, listed after it in architecture.md"


# --------------------------------------------------------------------------------------------------
# the recipes and the module -> tests map name only what exists

MAP_ROW = re.compile(r"^\| `nebari_colocate\.([a-z_]+)` \| (.*) \|$")
CITED = re.compile(r"`([^`\s]+)`")


def _section(title: str) -> str:
    text = (ROOT / "docs" / "architecture.md").read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def test_every_module_has_its_tests_on_the_map_and_every_test_file_named_exists():
    rows = {}
    for line in _section("Module -> tests").splitlines():
        if match := MAP_ROW.match(line):
            rows[match.group(1)] = CITED.findall(match.group(2))
    assert sorted(rows) == sorted(_map())
    for module, files in rows.items():
        assert files, module
        missing = [f for f in files if not (ROOT / f).is_file()]
        assert not missing, f"{module}: {missing} named in docs/architecture.md do not exist"


def _resolves(dotted: str) -> bool:
    import importlib

    first, *rest = dotted.split(".")
    target: object = importlib.import_module(f"nebari_colocate.{first}")
    for name in rest:
        if not hasattr(target, name):
            return False
        target = getattr(target, name)
    return True


def test_every_name_and_file_the_recipes_cite_exists():
    modules = set(_map())
    cited = CITED.findall(_section("Recipes"))
    checked = 0
    for item in cited:
        path, _, test = item.partition("::")
        if path.startswith(("tests/", "docs/", "nebari_colocate/", "scripts/")):
            assert (ROOT / path).exists(), f"{path} cited in the recipes does not exist"
            if test:
                assert f"def {test}(" in (ROOT / path).read_text(), item
            checked += 1
        elif item.endswith(".py") and "/" not in item:  # a module by its file name
            stem = item.removesuffix(".py")
            assert (PACKAGE / item).is_file() or (PACKAGE / stem).is_dir(), item
            checked += 1
        elif "." in item and item.split(".")[0] in modules and item.replace(".", "").isidentifier():
            assert _resolves(item), f"{item} cited in the recipes does not exist"
            checked += 1
    assert checked > 40, checked  # the recipes cite the code they describe
