"""The history the operator's page reads (nebari_colocate.history): a bounded ring per kind,
records with their mode, and what the spawner and the handlers write into it."""

from __future__ import annotations

import pytest

from nebari_colocate import history
from nebari_colocate.history import (
    EVENTS,
    MOVE_OFF_PREMIUM,
    MOVE_SET,
    OBSERVE,
    WAY_OUT,
    premium_pod_ended,
    record_refusal,
    record_refused,
    record_way_out,
    the_history,
)
from nebari_colocate.placement import REFUSE, Decision
from nebari_colocate.refusal import Refusal


@pytest.fixture(autouse=True)
def _fresh_history():
    the_history().clear()
    yield
    the_history().clear()


def test_a_refusal_is_recorded_in_enforce_mode_unless_told_otherwise():
    found = record_refusal("alice", "gpu-lab", reasons=["insufficient:cpu"], message="no room")
    observed = record_refusal("bob", "", reasons=["taint"], message="would", mode=OBSERVE)
    assert (found.mode, observed.mode) == ("enforce", "observe")
    assert [r.user for r in the_history().recent_refusals(now=found.at + 1)] == ["bob", "alice"]


def test_an_unknown_mode_or_kind_is_refused_with_its_name():
    with pytest.raises(ValueError, match="'audit'"):
        record_refusal("alice", "", reasons=[], message="", mode="audit")
    with pytest.raises(ValueError, match="'teleport'"):
        record_way_out("alice", "teleport", "started")


def test_the_rings_are_bounded_and_drop_the_oldest_first(monkeypatch):
    h = history.History()
    monkeypatch.setattr(history, "_HISTORY", h)
    for i in range(history.REFUSALS_KEPT + 5):
        record_refusal(f"u{i}", "", reasons=["taint"], message="", at=float(i))
    for i in range(history.WAYS_OUT_KEPT + 3):
        record_way_out(f"u{i}", WAY_OUT, "started", at=float(i))
    for i in range(history.PREMIUM_NODES_KEPT + 2):
        premium_pod_ended(f"n{i}", at=float(i))
    assert len(h.refusals) == history.REFUSALS_KEPT and h.refusals[0].user == "u5"
    assert len(h.ways_out) == history.WAYS_OUT_KEPT and h.ways_out[0].user == "u3"
    assert len(h.premium_ended) == history.PREMIUM_NODES_KEPT and "n0" not in h.premium_ended


def test_only_the_last_24_hours_of_refusals_are_recent():
    day = 24 * 3600
    record_refusal("old", "", reasons=["taint"], message="", at=1000.0)
    record_refusal("new", "", reasons=["taint"], message="", at=1000.0 + day)
    recent = the_history().recent_refusals(now=1000.0 + day + 1)
    assert [r.user for r in recent] == ["new"]


def test_a_premium_node_seen_again_moves_to_the_newest_end():
    premium_pod_ended("gpu-1", at=1.0)
    premium_pod_ended("gpu-2", at=2.0)
    premium_pod_ended("gpu-1", at=3.0)
    assert list(the_history().premium_ended) == ["gpu-2", "gpu-1"]
    assert the_history().premium_idle_since("gpu-1") == 3.0
    assert the_history().premium_idle_since("cpu-1") is None


def test_a_refusal_record_keeps_the_decisions_codes_node_and_way_out():
    decision = Decision(REFUSE, node="cpu-1", reasons=["insufficient:nvidia.com/gpu"])
    found = record_refused("alice", "gpu-lab", Refusal("words", "<b>words</b>", "line", decision))
    assert (found.reasons, found.node, found.message, found.source, found.way_out) == (
        ("insufficient:nvidia.com/gpu",),
        "cpu-1",
        "words",
        "check",
        False,
    )


def test_a_spawn_ended_by_its_events_is_recorded_with_the_verdicts_code():
    from nebari_colocate.event_verdict import MULTI_ATTACH, EventVerdict

    verdict = EventVerdict(action="fail", code=MULTI_ATTACH, node="cpu-2")
    found = record_refused("alice", "app", Refusal("w", "w", "l", event_verdict=verdict))
    assert (found.reasons, found.node, found.source) == (("multi-attach",), "cpu-2", EVENTS)


def test_every_kind_of_way_out_is_recorded_with_its_outcome():
    for kind in (WAY_OUT, MOVE_OFF_PREMIUM, MOVE_SET):
        record_way_out("alice", kind, "started", server="gpu-lab", servers=["app"])
    kept = the_history().recent_ways_out()
    assert [(r.kind, r.outcome, r.servers) for r in kept] == [
        (MOVE_SET, "started", ("app",)),
        (MOVE_OFF_PREMIUM, "started", ("app",)),
        (WAY_OUT, "started", ("app",)),
    ]
