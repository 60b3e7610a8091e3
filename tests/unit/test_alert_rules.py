"""examples/prometheus-alerts.yaml is a Prometheus rule file Prometheus would load: its shape is
Prometheus's rule-file format, every expression parses with a PromQL parser (promql-parser, a
port of Prometheus's own grammar: promtool is a Go build of all of Prometheus, too heavy for a
unit test), and every series it reads is one the library or JupyterHub registers, with labels
they carry (docs/metrics.md, "Alert on real failures only")."""

from __future__ import annotations

import re
from pathlib import Path

import promql_parser
import pytest
import yaml

from nebari_colocate import metrics

RULES = Path(__file__).resolve().parents[2] / "examples" / "prometheus-alerts.yaml"
METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
GROUP_KEYS = {"name", "interval", "limit", "rules", "query_offset", "labels"}
RULE_KEYS = {"record", "alert", "expr", "for", "keep_firing_for", "labels", "annotations"}


def rule_file() -> dict:
    return yaml.safe_load(RULES.read_text())


def rules() -> list[dict]:
    return [rule for group in rule_file()["groups"] for rule in group["rules"]]


def series_labels() -> dict[str, set[str]]:
    """Sample name -> its label names, for the library's metrics and JupyterHub's spawn
    histogram (whose ``reason`` label exists on JupyterHub 6 only)."""
    from jupyterhub.metrics import SERVER_SPAWN_DURATION_SECONDS

    known: dict[str, set[str]] = {}
    collectors = [
        *metrics.collectors().values(),
        *metrics.view_collectors().values(),
        SERVER_SPAWN_DURATION_SECONDS,
    ]
    for collector in collectors:
        labels = set(collector._labelnames)
        for family in collector.describe():
            suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum")}
            for suffix in suffixes.get(family.type, ("",)):
                known[family.name + suffix] = labels | ({"le"} if suffix == "_bucket" else set())
    return known


def selectors(expr: str) -> list[tuple[str, list[str]]]:
    found: list[tuple[str, list[str]]] = []

    def visit(node: object) -> bool:
        if isinstance(node, promql_parser.VectorSelector):
            found.append((node.name, [m.name for m in node.matchers.matchers]))
        return True

    promql_parser.walk(promql_parser.parse(expr), visit)
    return found


def test_the_file_has_prometheus_rule_file_shape():
    top = rule_file()
    assert set(top) == {"groups"}
    names = [group["name"] for group in top["groups"]]
    assert len(names) == len(set(names))
    for group in top["groups"]:
        assert set(group) <= GROUP_KEYS, group["name"]
        assert group["rules"], group["name"]
        for rule in group["rules"]:
            assert set(rule) <= RULE_KEYS, rule
            assert ("record" in rule) != ("alert" in rule), rule
            if "record" in rule:
                assert METRIC_NAME.match(rule["record"]), rule["record"]
                assert not {"for", "annotations"} & set(rule), "only alerts have these"
            for key in ("labels", "annotations"):
                for name, value in (rule.get(key) or {}).items():
                    assert LABEL_NAME.match(name) and isinstance(value, str), (name, value)
                    assert value.count("{{") == value.count("}}"), value
            if "for" in rule:
                assert promql_parser.parse_duration(rule["for"]).total_seconds() > 0


@pytest.mark.parametrize("rule", rules(), ids=lambda r: r.get("record") or r.get("alert"))
def test_every_expression_parses_as_promql(rule):
    promql_parser.parse(rule["expr"])


def test_a_broken_expression_would_fail_this_check():
    with pytest.raises(ValueError):
        promql_parser.parse("sum by (job (increase(x_total[15m]))")


def test_every_series_read_is_registered_with_the_labels_matched():
    known = series_labels()
    recorded = {rule["record"] for rule in rules() if "record" in rule}
    read = 0
    for rule in rules():
        for name, labels in selectors(rule["expr"]):
            if name in recorded:
                continue
            assert name in known, f"{name}: registered by neither nebari-colocate nor JupyterHub"
            assert set(labels) <= known[name] | {"job", "instance"}, (name, labels)
            read += 1
    assert read >= 4


def test_real_failures_are_jupyterhub6_errors_else_jupyterhub5_failures_less_refusals():
    (real,) = [
        r for r in rules() if r.get("record") == "jupyterhub:spawn_real_failures:increase15m"
    ]
    read = selectors(real["expr"])
    spawn = "jupyterhub_server_spawn_duration_seconds_count"
    assert read[0] == (spawn, ["status"]) and 'status="error"' in real["expr"]
    assert (spawn, ["status"]) in read[1:] and 'status="failure"' in real["expr"]
    assert ("nebari_colocate_refusals_total", []) in read
    # the page reads it, and never the refusals
    pages = [r for r in rules() if (r.get("labels") or {}).get("severity") == "page"]
    assert pages and all("jupyterhub:spawn_real_failures" in r["expr"] for r in pages)
