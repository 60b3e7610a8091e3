"""The advice of a refusal follows the one table of what can help (placement.STOPPING_HELPS):
no "stop X first" where stopping cannot help, no "choose a profile" for a reason no profile
changes; the same for a pinned pod's scheduler events."""

from __future__ import annotations

import pytest

from nebari_colocate import events, fit, messages
from nebari_colocate.events import FAIL, UNSCHEDULABLE_PINNED, EventVerdict, Fragment
from nebari_colocate.placement import REASON_CODES, Decision, stopping_helps
from nebari_colocate.wayout import UNRESOLVABLE

APP = {
    "metadata": {
        "name": "jupyter-alice--pandas-app",
        "annotations": {
            "hub.jupyter.org/username": "alice",
            "hub.jupyter.org/servername": "pandas-app",
        },
    }
}
CODES = [fit.insufficient("cpu") if c == fit.INSUFFICIENT_ANY else c for c in REASON_CODES]
#: the reason codes whose words a profile can change (a request, a selector, a toleration, a GPU)
PROFILE_CODES = {fit.NODE_SELECTOR, fit.TAINT, "insufficient:cpu", "premium-node"}
STOPS = ("Stop it", "Stop them", "stop your other servers", "Stop your other servers")


def _advice(reasons: list[str]) -> str:
    decision = Decision(
        "refuse",
        node="cpu-1",
        reasons=reasons,
        holder_pods=[APP],
        claims=["claim-alice"],
        pinned_by="holders",
    )
    return messages.refusal_headline(
        decision, username="alice", server_name="", has_profiles=True
    ).do


@pytest.mark.parametrize("code", CODES)
def test_every_reason_codes_advice_is_consistent_with_whether_stopping_can_help(code):
    advice = _advice([code])
    if stopping_helps(code) == UNRESOLVABLE:
        assert not any(stop in advice for stop in STOPS), advice
    else:
        assert advice.startswith("Stop it"), advice
    if code in PROFILE_CODES:
        assert "choose" in advice, advice
    else:
        assert "choose" not in advice, advice


def test_every_unresolvable_code_is_one_the_guard_covers():
    assert {c for c in CODES if stopping_helps(c) == UNRESOLVABLE} >= {fit.VOLUME_NODE_AFFINITY}


@pytest.mark.parametrize(
    "test_variation_id, reasons, expect",
    [
        (
            "a-volume-bound-elsewhere-asks-the-administrator",
            [fit.VOLUME_NODE_AFFINITY],
            "Please ask your administrator.",
        ),
        (
            "a-volume-bound-elsewhere-beside-a-short-resource-still-asks-the-administrator",
            ["insufficient:cpu", fit.VOLUME_NODE_AFFINITY],
            "Please ask your administrator.",
        ),
        (
            "a-short-resource-beside-a-full-node-offers-no-profile",
            ["insufficient:cpu", fit.TOO_MANY_PODS],
            "Stop it first.",
        ),
        (
            "a-short-resource-alone-offers-a-profile",
            ["insufficient:cpu"],
            "Stop it, or choose a smaller profile.",
        ),
    ],
)
def test_the_advice_of_several_reasons_is_what_helps_every_one(test_variation_id, reasons, expect):
    assert _advice(reasons) == expect


def _pinned_words(cause: str) -> str:
    fragment = Fragment(1, cause, f"a fragment read as {cause}")
    verdict = EventVerdict(FAIL, UNSCHEDULABLE_PINNED, node="node-a", fragments=(fragment,))
    return messages.event_text(verdict)


@pytest.mark.parametrize(
    "test_variation_id, cause, expect_present, expect_absent",
    [
        (
            "a-volume-bound-elsewhere",
            events.FRAGMENT_VOLUME_NODE_AFFINITY,
            ["Please ask your administrator."],
            ["Stop your other servers", "choose"],
        ),
        (
            "a-node-full-of-pods",
            events.FRAGMENT_TOO_MANY_PODS,
            ["Stop your other servers."],
            ["choose"],
        ),
        (
            "a-node-selector",
            events.FRAGMENT_NODE_SELECTOR,
            ["Stop your other servers, or choose another profile."],
            ["administrator"],
        ),
        (
            "a-short-resource",
            events.FRAGMENT_INSUFFICIENT,
            ["Stop your other servers, or choose another profile."],
            ["administrator"],
        ),
    ],
)
def test_a_pinned_pods_event_advice_follows_whether_stopping_or_a_profile_can_help(
    test_variation_id, cause, expect_present, expect_absent
):
    words = _pinned_words(cause)
    for fragment in expect_present:
        assert fragment in words, words
    for fragment in expect_absent:
        assert fragment not in words, words
