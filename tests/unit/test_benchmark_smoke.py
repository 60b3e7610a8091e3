"""Every benchmark runs in CI at a smoke size (scripts/bench-smoke), so that none rots."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SMOKE_SCRIPT = ROOT / "scripts" / "bench-smoke"


def smoke_entries() -> dict[str, str]:
    """name -> arguments, as scripts/bench-smoke lists them."""
    text = SMOKE_SCRIPT.read_text()
    block = re.search(r"^SMOKE=\(\n(.*?)^\)", text, re.S | re.M)
    assert block, "scripts/bench-smoke has no SMOKE=( ... ) list"
    entries = {}
    for line in block.group(1).splitlines():
        line = line.strip()
        if line.startswith('"'):
            name, args, summary = line.strip('"').split("|")
            assert summary, f"bench-smoke entry {name!r} names no summary line"
            entries[name] = args
    return entries


def benchmark_names() -> set[str]:
    names = {
        p.stem
        for p in (ROOT / "benchmarks").glob("*.py")
        if not p.name.startswith("_") and p.name != "__init__.py"
    }
    names |= {p.parent.name for p in (ROOT / "benchmarks").glob("*/__main__.py")}
    return names


def test_every_benchmark_has_a_smoke_run_or_a_full_run_in_ci():
    # agreement runs at full size in scripts/test; every other benchmark runs at a smoke size
    missing = benchmark_names() - set(smoke_entries()) - {"agreement"}
    assert not missing, f"benchmarks with no smoke run in scripts/bench-smoke: {sorted(missing)}"


def test_every_smoke_entry_names_a_benchmark_that_exists():
    unknown = set(smoke_entries()) - benchmark_names()
    assert not unknown, f"scripts/bench-smoke names benchmarks that do not exist: {sorted(unknown)}"


def test_the_test_command_runs_the_smoke_benchmarks_and_the_agreement():
    text = (ROOT / "scripts" / "test").read_text()
    assert "scripts/bench-smoke" in text
    assert "benchmarks.agreement" in text
