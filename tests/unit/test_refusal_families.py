"""A refusal's family: the ``reason`` JupyterHub 6 records for a refused spawn, and the label of
the library's own refusal counter (docs/metrics.md, "Alert on real failures only").  One row per
reason code; JupyterHub itself, on each line, is in tests/e2e/test_failure_accounting.py."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from prometheus_client import REGISTRY

from nebari_colocate import jupyterhub as jh
from nebari_colocate import refusal_families as rf
from nebari_colocate.event_verdict import EVENT_REASON_CODES, FAIL, EventVerdict
from nebari_colocate.placement import REASON_CODES, Decision

CODE_TO_FAMILY = [
    ("node-selector", "colocate-volume-pinned"),
    ("taint", "colocate-volume-pinned"),
    ("node-unschedulable", "colocate-volume-pinned"),
    ("unschedulable-pinned", "colocate-volume-pinned"),
    ("insufficient:cpu", "colocate-no-room"),
    ("insufficient:nvidia.com/gpu", "colocate-no-room"),
    ("too-many-pods", "colocate-no-room"),
    ("preemption-stalled", "colocate-no-room"),
    ("premium-node", "colocate-premium-node"),
    ("claim-in-use", "colocate-storage-unavailable"),
    ("split-attachment", "colocate-storage-unavailable"),
    ("node-not-found", "colocate-storage-unavailable"),
    ("volume-node-affinity", "colocate-storage-unavailable"),
    ("home-being-moved", "colocate-storage-unavailable"),
    ("multi-attach", "colocate-storage-unavailable"),
    ("no-scheduler", "colocate-no-scheduler"),
    ("no-scale-up", "colocate-no-node"),
    ("unschedulable", "colocate-no-node"),
    ("image-invalid", "colocate-image"),
    ("image-pull", "colocate-image"),
]


@pytest.mark.parametrize("code, family", CODE_TO_FAMILY)
def test_each_reason_code_names_its_family(code, family):
    assert rf.family_of([code]) == family


def test_the_table_holds_every_reason_code_of_the_check_and_of_the_events():
    codes = {rf._as_listed(c) for c, _ in CODE_TO_FAMILY}
    listed = {code.replace("<resource>", "cpu") for code in REASON_CODES}
    every = {rf._as_listed(c) for c in listed} | set(EVENT_REASON_CODES)
    assert codes == every
    assert all(rf.family_of([code]) != rf.OTHER for code in every)


@pytest.mark.parametrize(
    "test_variation_id, codes, family",
    [
        # a GPU lab behind an app on a CPU node: the kind of node first, not the missing GPU
        (
            "gpu-lab-on-the-apps-cpu-node",
            ["insufficient:nvidia.com/gpu", "node-selector"],
            "colocate-volume-pinned",
        ),
        ("an-administrator-must-look-first", ["split-attachment", "taint"], rf.STORAGE_UNAVAILABLE),
        ("premium-before-room", ["insufficient:cpu", "premium-node"], "colocate-premium-node"),
        ("a-code-nobody-knows", ["something-new"], "colocate-other"),
        ("no-code", [], "colocate-other"),
    ],
)
def test_a_refusal_with_codes_of_several_families_is_named_by_the_first(
    test_variation_id, codes, family
):
    assert rf.family_of(codes) == family


def test_every_family_name_selects_with_one_regex_and_is_a_short_label_value():
    assert all(name.startswith(rf.PREFIX) for name in rf.FAMILY_NAMES)
    assert len(set(rf.FAMILY_NAMES)) == len(rf.FAMILY_NAMES)
    assert all(len(name) <= 40 and name.replace("-", "").isalpha() for name in rf.FAMILY_NAMES)


@pytest.mark.parametrize(
    "decision, verdict, family",
    [
        (Decision("refuse", node="cpu-1", reasons=["node-selector"]), None, rf.VOLUME_PINNED),
        (None, EventVerdict(FAIL, "no-scheduler"), rf.FAMILY_NO_SCHEDULER),
        (None, EventVerdict(FAIL, "multi-attach"), rf.STORAGE_UNAVAILABLE),
    ],
)
def test_the_refusal_carries_its_family_as_jupyterhub6_reason(decision, verdict, family):
    refused = jh.ColocationRefused(
        "words", "<p>words</p>", "op", decision=decision, event_verdict=verdict
    )
    assert refused.family == family
    if jh.JUPYTERHUB_MAJOR >= 6:
        from jupyterhub.spawner import SpawnException

        # what JupyterHub 6 files as status="failure", reason=<family>, outside the limit
        assert isinstance(refused, SpawnException)
        assert (refused.reason, refused.status_code) == (family, 400)
    else:  # JupyterHub 5 overwrites an HTTPError's reason with "error": left as it was
        assert refused.reason == "colocation"


def _counted(family: str) -> float:
    return REGISTRY.get_sample_value("nebari_colocate_refusals_total", {"family": family}) or 0.0


@pytest.mark.parametrize(
    "test_variation_id, pending, expect_counted",
    [
        ("a-spawn-jupyterhub-tracks-is-counted", True, 1),
        ("a-spawn-it-does-not-track-is-not", False, 0),
    ],
)
def test_the_library_counts_the_refusals_jupyterhub_counts_as_failed_spawns(
    test_variation_id, pending, expect_counted
):
    loop = asyncio.new_event_loop()
    future = loop.create_future()
    spawner = SimpleNamespace(_spawn_future=future if pending else None, handler=None)
    refused = jh.ColocationRefused(
        "w", "w", "op", decision=Decision("refuse", reasons=["insufficient:cpu"])
    )
    before = _counted("colocate-no-room")
    jh.before_raising(spawner, refused)
    loop.close()
    assert _counted("colocate-no-room") == before + expect_counted
