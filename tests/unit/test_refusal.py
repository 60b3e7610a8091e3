"""Whether a kept refusal still holds, from the user's servers running now: what the jhub-apps
home page reads to keep a refusal's notice or let it go (docs/surfaces.md)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from nebari_colocate.refusal import Refusal
from nebari_colocate.wayout import WayOut


def refusal(stop: tuple[str, ...] | None) -> Refusal:
    decision = SimpleNamespace(way_out=WayOut(stop, "gpu-dashboard") if stop is not None else None)
    return Refusal("text", "<div>html</div>", "log", decision=decision)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "test_variation_id, stop, running, expect_holds",
    [
        ("the-one-blocker-still-runs", ("pandas-app",), {"pandas-app", ""}, True),
        ("the-one-blocker-stopped", ("pandas-app",), {""}, False),
        ("the-default-server-blocks-and-runs", ("",), {""}, True),
        ("the-default-server-blocked-and-stopped", ("",), set(), False),
        ("one-of-two-blockers-still-runs", ("a", "b"), {"b"}, True),
        ("both-blockers-stopped", ("a", "b"), {"c"}, False),
        ("no-way-out-holds-until-started-again", None, set(), True),
        ("an-empty-way-out-holds-as-none", (), set(), True),
    ],
)
def test_a_refusal_holds_while_a_server_its_way_out_stops_still_runs(
    test_variation_id, stop, running, expect_holds
):
    assert refusal(stop).still_holds(running) is expect_holds


@pytest.mark.parametrize(
    "stop, expect", [(("pandas-app", ""), ["pandas-app", ""]), (None, []), ((), [])]
)
def test_the_way_out_stop_list_for_the_page(stop, expect):
    assert refusal(stop).way_out_stop() == expect
