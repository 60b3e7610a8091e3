"""The spawn's check without KubeSpawner (docs/architecture.md: ``nebari_colocate.check``):
what it confirms, what it keeps a decision for, and the safe side it takes when the state
cannot be gathered, from a :class:`SpawnCheck` built from a view, a namespace, the settings and
a logger only.  Its reads and dry runs against the API are tested on the real control plane
(tests/cluster/test_view.py, test_no_stale_decision.py)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from nebari_colocate.check import (
    CheckSettings,
    SpawnCheck,
    needs_confirmation,
    placement_fingerprint,
)
from nebari_colocate.known_modes import KnownModes
from nebari_colocate.placement import Decision, Policy
from nebari_colocate.view import ClusterView
from tests.support.builders import NAMESPACE, pod, pvc, state

HOME = "claim-alice"


def lab(node_name: str = "cpu-1", **kwargs) -> dict:
    """Alice's running lab, holding her home on ``node_name``."""
    return pod(
        "jupyter-alice",
        node_name=node_name,
        user="alice",
        server="",
        claims=[HOME],
        phase="Running",
        **kwargs,
    )


def app(**kwargs) -> dict:
    """Alice's new app, as the spawner would create it."""
    return pod("jupyter-alice--app", user="alice", server="app", claims=[HOME], **kwargs)


@pytest.mark.parametrize(
    "test_variation_id, decision, expect_confirmed",
    [
        ("unpinned-colocate-is-confirmed", Decision(verdict="colocate"), True),
        ("pinned-colocate-is-not", Decision(verdict="colocate", node="cpu-1"), False),
        ("skip-is-not", Decision(verdict="skip"), False),
        ("refusal-is-not", Decision(verdict="refuse", node="cpu-1"), False),
    ],
)
def test_only_an_unpinned_colocation_is_confirmed_by_the_api(
    test_variation_id, decision, expect_confirmed
):
    assert needs_confirmation(decision) is expect_confirmed


@pytest.mark.parametrize(
    "test_variation_id, change, expect_same",
    [
        ("a-label-keeps-the-decision", lambda p: p["metadata"].update(labels={"x": "y"}), True),
        (
            "a-node-selector-changes-it",
            lambda p: p["spec"].update(nodeSelector={"gpu": "yes"}),
            False,
        ),
        ("another-volume-changes-it", lambda p: p["spec"].update(volumes=[]), False),
        (
            "another-runtime-class-changes-its-admission-shape",
            lambda p: p["spec"].update(runtimeClassName="gvisor"),
            False,
        ),
    ],
)
def test_a_decision_is_kept_only_for_a_manifest_with_the_same_fingerprint(
    test_variation_id, change, expect_same
):
    before, after = app(), app()
    change(after)
    same = placement_fingerprint(before) == placement_fingerprint(after)
    assert same is expect_same


def check_of(view: ClusterView, known: KnownModes, reflected: list[dict]) -> SpawnCheck:
    return SpawnCheck(
        view,
        view.api_client,
        NAMESPACE,
        "jupyter-alice--app",
        policy=Policy(),
        settings=CheckSettings(check_timeout=5.0, dry_run_reuse_seconds=0),
        known_modes=known,
        log=logging.getLogger("test_check"),
        reflector_pods=lambda: reflected,
    )


@pytest.mark.parametrize(
    "test_variation_id, error, reflected, modes, expect_result",
    [
        (
            "timeout-pins-to-the-holder-the-reflector-knows",
            asyncio.TimeoutError(),
            [lab("cpu-2")],
            "ReadWriteOnce",
            ("colocate", "cpu-2", "state not gathered within 5.0s (colocation_check_timeout)"),
        ),
        (
            "an-error-is-named-and-nothing-known-pins-nothing",
            RuntimeError("boom"),
            [],
            "ReadWriteOnce",
            ("colocate", None, "state not gathered: RuntimeError: boom"),
        ),
        (
            "a-claim-an-earlier-check-read-as-shared-constrains-nothing",
            asyncio.TimeoutError(),
            [lab("cpu-2")],
            "ReadWriteMany",
            ("skip", None, "state not gathered within 5.0s (colocation_check_timeout)"),
        ),
    ],
)
async def test_the_safe_side_uses_what_the_reflector_and_earlier_checks_know(
    test_variation_id, error, reflected, modes, expect_result
):
    view = ClusterView(None, NAMESPACE)  # never started: it knows nothing
    known = KnownModes()
    known.learn(NAMESPACE, [HOME], state(pvc(HOME, modes=[modes])))
    decision = check_of(view, known, reflected).safe_side(app(), error)
    assert (decision.verdict, decision.node, decision.notes[0]) == expect_result
    assert decision.verified is False
