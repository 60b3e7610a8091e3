"""Rooms small enough to live in: no module of the package over 950 lines and no function over
100 lines (docs/architecture.md says where a growing module splits)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "nebari_colocate"
MODULE_LINES = 950
FUNCTION_LINES = 100


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_no_module_of_the_package_is_over_950_lines():
    big = {
        str(p.relative_to(PACKAGE)): n
        for p in modules()
        if (n := len(p.read_text().splitlines())) > MODULE_LINES
    }
    assert not big, f"modules over {MODULE_LINES} lines (split them by job): {big}"


def test_no_function_of_the_package_is_over_100_lines():
    long = {}
    for p in modules():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > FUNCTION_LINES:
                    long[f"{p.relative_to(PACKAGE)}:{node.name}"] = lines
    assert not long, f"functions over {FUNCTION_LINES} lines: {long}"
