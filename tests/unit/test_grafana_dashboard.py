"""examples/grafana-dashboard.json against the metrics the code registers (docs/metrics.md).

Every series a PromQL expression of the dashboard names must be one that
``nebari_colocate.metrics`` registers (with prometheus_client's sample suffixes: ``_total`` and
``_created`` of a counter, ``_bucket``, ``_count``, ``_sum`` and ``_created`` of a histogram), and
every registered metric must be shown by some panel: a renamed or added metric fails here until
the dashboard follows.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from nebari_colocate import metrics

DASHBOARD = Path(__file__).resolve().parents[2] / "examples" / "grafana-dashboard.json"

#: the names prometheus_client exposes for a family of each type
SAMPLE_SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("", "_count", "_sum", "_created"),
}

#: PromQL words that look like names but are not series
PROMQL_KEYWORDS = frozenset(
    {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or"}
    | {"unless", "offset", "atan2", "inf", "nan"}
)


def registered_families() -> dict[str, tuple[str, ...]]:
    """Family name -> the sample names it exposes, for every metric the library registers."""
    families: dict[str, tuple[str, ...]] = {}
    for collector in [*metrics.collectors().values(), *metrics.view_collectors().values()]:
        for family in collector.describe():
            suffixes = SAMPLE_SUFFIXES[family.type]
            families[family.name] = tuple(family.name + suffix for suffix in suffixes)
    return families


def series_names(expr: str) -> set[str]:
    """The series an expression selects: names that are neither functions, keywords, label
    names, label values, durations nor Grafana variables."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # label values and other strings
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # ranges: [5m], [$__rate_interval]
    # grouping label lists: by (verdict, reason), on(le), group_left(x)
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    expr = re.sub(r"\$\{?\w+\}?", " ", expr)  # $__range, ${job}
    names = set()
    for match in re.finditer(r"(?<![\w.])([A-Za-z_:][\w:]*)\s*(\()?", expr):
        name, call = match.groups()
        if call or name in PROMQL_KEYWORDS:
            continue
        names.add(name)
    return names


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def panels(board: dict) -> list[dict]:
    found = []
    for panel in board["panels"]:
        found.append(panel)
        found += panel.get("panels", [])  # a collapsed row keeps its panels inside
    return found


def panel_expressions(board: dict) -> list[tuple[str, str]]:
    """(panel title, expr) of every query target of every panel."""
    return [
        (panel["title"], target["expr"])
        for panel in panels(board)
        for target in panel.get("targets", [])
        if "expr" in target
    ]


def variable_expressions(board: dict) -> list[tuple[str, str]]:
    """(variable name, query) of the dashboard's query variables, e.g. label_values(series, job)."""
    found = []
    for variable in board["templating"]["list"]:
        if variable["type"] != "query":
            continue
        query = variable["query"]
        query = query["query"] if isinstance(query, dict) else query
        match = re.fullmatch(r"\s*label_values\((.*),\s*\w+\)\s*", query)
        found.append((variable["name"], match.group(1) if match else query))
    return found


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("rate(a_total[5m])", {"a_total"}),
        (
            'sum by (reason) (increase(a_total{kind="reason", job=~"$job"}[$__rate_interval]))',
            {"a_total"},
        ),
        ("histogram_quantile(0.99, sum by (le) (rate(b_bucket[5m])))", {"b_bucket"}),
        ("sum(rate(c_sum[1m])) / sum(rate(c_count[1m]))", {"c_sum", "c_count"}),
        ("min(d) == 0 and on(job) e > bool 1", {"d", "e"}),
        ('label_values(f_total{x="sum(g)"}, job)', {"f_total"}),
    ],
)
def test_series_names_are_read_from_promql_as_prometheus_would(expr, expected):
    if expr.startswith("label_values"):
        expr = expr[len("label_values(") : expr.rindex(",")]
    assert series_names(expr) == expected


def jupyterhub_families() -> set[str]:
    """The samples of JupyterHub's spawn histogram, which the panel of spawns that broke reads
    beside the library's refusals (docs/metrics.md, "Alert on real failures only")."""
    from jupyterhub.metrics import SERVER_SPAWN_DURATION_SECONDS

    (family,) = SERVER_SPAWN_DURATION_SECONDS.describe()
    return {family.name + suffix for suffix in SAMPLE_SUFFIXES["histogram"]}


def test_every_series_the_dashboard_queries_is_registered_by_the_code():
    known = {name for samples in registered_families().values() for name in samples}
    known |= jupyterhub_families()
    board = dashboard()
    unknown = [
        (where, name)
        for where, expr in panel_expressions(board) + variable_expressions(board)
        for name in sorted(series_names(expr))
        if name not in known
    ]
    assert unknown == [], f"not registered by nebari_colocate.metrics: {unknown}"


def test_every_registered_metric_is_shown_by_some_panel():
    used = {name for _, expr in panel_expressions(dashboard()) for name in series_names(expr)}
    missing = [
        family for family, samples in registered_families().items() if used.isdisjoint(samples)
    ]
    assert missing == [], f"metrics no panel shows: {missing}"


def test_every_panel_queries_the_datasource_variable():
    board = dashboard()
    (variable,) = [v for v in board["templating"]["list"] if v["name"] == "datasource"]
    assert (variable["type"], variable["query"]) == ("datasource", "prometheus")
    for panel in panels(board):
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]


def test_dashboard_is_a_grafana_dashboard_model_with_unique_panel_ids():
    board = dashboard()
    assert board["schemaVersion"] >= 36
    assert board["uid"] == "nebari-colocate"
    ids = [panel["id"] for panel in panels(board)]
    assert len(ids) == len(set(ids))
    for panel in panels(board):
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        refids = [target["refId"] for target in panel.get("targets", [])]
        assert len(refids) == len(set(refids)), panel["title"]


def test_every_query_of_a_series_with_a_mode_label_follows_the_mode_variable():
    """``colocation_mode`` (docs/rollout.md): a panel of a week of observing must not mix what
    the library did with what it would have done, unless the mode variable says so."""
    moded = [
        collector._name
        for collector in metrics.collectors().values()
        if "mode" in collector._labelnames
    ]
    assert len(moded) == 4, moded
    board = dashboard()
    assert "mode" in [variable["name"] for variable in board["templating"]["list"]]
    checked = 0
    for title, expr in panel_expressions(board):
        for selector in re.findall(r"(\w+)\{([^}]*)\}", expr):
            if selector[0].removesuffix("_total") in moded:
                assert 'mode=~"$mode"' in selector[1], (title, expr)
                checked += 1
    assert checked >= 8, checked


def test_every_expression_of_the_dashboard_parses_as_promql():
    import promql_parser

    for title, expr in panel_expressions(dashboard()):
        # Grafana's variables as Prometheus would get them once Grafana substituted them
        substituted = expr.replace("$__rate_interval", "1m").replace("$__range", "1h")
        promql_parser.parse(substituted.replace("$job", ".*").replace("$mode", ".*"))
        assert "$" not in substituted.replace("$job", "").replace("$mode", ""), title
