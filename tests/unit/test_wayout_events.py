"""The way out of a spawn ended by its pod's events (docs/failure-modes.md, "The way out"): a
Multi-Attach whose holders are all the user's own servers, or a pinned pod the pinned node cannot
take while only the user's own servers pin it, carries the servers to stop (``wayout``); any
other pod among the holders, or a reason stopping cannot change, leaves none.  Then the words
and the button (``messages.event_refusal``), every name escaped."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, NamedTuple

import pytest

from nebari_colocate import messages
from nebari_colocate.events import FAIL, MULTI_ATTACH, UNSCHEDULABLE_PINNED, classify
from nebari_colocate.wayout import WayOut, stop_every_holder

from .test_events import (
    MULTI_ATTACH_EXCLUSIVE,
    MULTI_ATTACH_MIXED,
    MULTI_ATTACH_OTHER_NAMESPACES,
    PINNED_NODE_CORDONED,
    PINNED_NODE_FULL,
    PINNED_NODE_TAINTED,
    PINNED_NODE_VOLUME_AFFINITY,
    T0,
    WAITING_FOR_DETACH_USED,
    attach,
    scheduler,
)

OWN = {"jupyter-alice--pandas-app": "pandas-app", "jupyter-alice--dash": "dash"}
TWO_OF_HERS = (
    'Waiting for detach for volume "pv-t-1-claim-alice" Volume is already used by pod(s) '
    "jupyter-alice--pandas-app, jupyter-alice--dash"
)


class Row(NamedTuple):
    events: list[dict[str, Any]]
    code: str
    want: WayOut | None
    start: str = ""
    own: dict[str, str] = OWN
    pinned_holders: tuple[str, ...] = ()


ROWS = [
    pytest.param(
        Row(
            [attach("FailedAttachVolume", WAITING_FOR_DETACH_USED, 0)],
            MULTI_ATTACH,
            WayOut(("pandas-app",), ""),
        ),
        id="multi_attach_by_her_app_stop_it",
    ),
    pytest.param(
        Row(
            [attach("FailedAttachVolume", TWO_OF_HERS, 0)],
            MULTI_ATTACH,
            WayOut(("dash", "pandas-app"), "gpu-lab"),
            start="gpu-lab",
        ),
        id="multi_attach_by_two_of_hers_stop_both_sorted",
    ),
    pytest.param(
        Row(
            [attach("FailedAttachVolume", MULTI_ATTACH_MIXED, 0)],
            MULTI_ATTACH,
            None,
            own={"jupyter-alice--app": "app"},
        ),
        id="multi_attach_with_another_users_pod_no_way_out",
    ),
    pytest.param(
        Row(
            [attach("FailedAttachVolume", MULTI_ATTACH_OTHER_NAMESPACES, 0)],
            MULTI_ATTACH,
            None,
            own={"jupyter-alice": ""},
            start="lab",
        ),
        id="multi_attach_with_a_pod_in_another_namespace_no_way_out",
    ),
    pytest.param(
        Row([attach("FailedAttachVolume", MULTI_ATTACH_EXCLUSIVE, 0)], MULTI_ATTACH, None),
        id="multi_attach_naming_no_pod_no_way_out",
    ),
    pytest.param(
        Row(
            [attach("FailedAttachVolume", WAITING_FOR_DETACH_USED, 0)],
            MULTI_ATTACH,
            None,
            start="pandas-app",
        ),
        id="the_holder_is_the_server_to_start_no_way_out",
    ),
    pytest.param(
        Row(
            [scheduler(PINNED_NODE_TAINTED, 0)],
            UNSCHEDULABLE_PINNED,
            WayOut(("pandas-app",), ""),
            pinned_holders=("jupyter-alice--pandas-app",),
        ),
        id="pinned_to_a_node_whose_taint_she_lacks_stop_the_app",
    ),
    pytest.param(
        Row(
            [scheduler(PINNED_NODE_FULL, 0)],
            UNSCHEDULABLE_PINNED,
            WayOut(("dash", "pandas-app"), ""),
            pinned_holders=("jupyter-alice--pandas-app", "jupyter-alice--dash"),
        ),
        id="pinned_to_a_full_node_stop_every_holder",
    ),
    pytest.param(
        Row(
            [scheduler(PINNED_NODE_CORDONED, 0)],
            UNSCHEDULABLE_PINNED,
            None,
            pinned_holders=("jupyter-alice--pandas-app", "backup-alice-29123-x7k2p"),
        ),
        id="pinned_by_a_job_too_no_way_out",
    ),
    pytest.param(
        Row(
            [scheduler(PINNED_NODE_VOLUME_AFFINITY, 0)],
            UNSCHEDULABLE_PINNED,
            None,
            pinned_holders=("jupyter-alice--pandas-app",),
        ),
        id="the_volumes_own_node_affinity_no_way_out",
    ),
    pytest.param(
        Row([scheduler(PINNED_NODE_TAINTED, 0)], UNSCHEDULABLE_PINNED, None),
        id="pinned_by_an_attachment_only_no_way_out",
    ),
]


@pytest.mark.parametrize("row", ROWS)
def test_an_event_verdict_carries_the_way_out_when_only_her_servers_hold_the_home(row: Row):
    verdict = classify(
        row.events,
        pinned_node="cpu-1",
        # past the detach grace: a volume no pod holds fails only then
        now=T0 + timedelta(seconds=61),
        own_servers=dict(row.own),
        server_name=row.start,
        own_server_names=row.own,
        pinned_holders=row.pinned_holders,
    )
    assert (verdict.action, verdict.code) == (FAIL, row.code)
    assert verdict.way_out == row.want


def test_without_the_server_name_no_way_out_is_computed():
    verdict = classify(
        [attach("FailedAttachVolume", WAITING_FOR_DETACH_USED, 0)],
        pinned_node=None,
        now=T0,
        own_server_names=OWN,
    )
    assert verdict.code == MULTI_ATTACH and verdict.way_out is None


@pytest.mark.parametrize(
    ("holders", "own", "others", "want"),
    [
        ((), OWN, 0, None),
        (("jupyter-alice--dash",), OWN, 0, WayOut(("dash",), "")),
        (("jupyter-alice--dash", "jupyter-alice--dash"), OWN, 0, WayOut(("dash",), "")),
        (("jupyter-alice--dash",), OWN, 1, None),
        (("jupyter-alice--dash", "jupyter-bob"), OWN, 0, None),
        (("jupyter-alice",), {"jupyter-alice": ""}, 0, WayOut(("",), "lab")),
    ],
)
def test_stop_every_holder(holders, own, others, want):
    start = "lab" if want is not None and want.start == "lab" else ""
    assert stop_every_holder(holders, own, start=start, others=others) == want


def test_the_words_and_the_button_of_an_event_way_out_escape_every_name():
    hostile = "<img src=x onerror=alert(1)>"
    own = {"jupyter-alice--x": "x"}
    verdict = classify(
        [
            attach(
                "FailedAttachVolume",
                'Waiting for detach for volume "pv" Volume is already '
                "used by pod(s) jupyter-alice--x",
                0,
            )
        ],
        pinned_node=None,
        now=T0,
        own_servers={"jupyter-alice--x": hostile},
        server_name="",
        own_server_names=own,
    )
    assert verdict.way_out == WayOut(("x",), "")
    names = {"x": hostile, "": "JupyterLab"}
    text, shown = messages.event_refusal(
        verdict, "", names, action='/hub/colocate/way-out/alice/"><script>'
    )
    assert f"still in use by '{hostile}' on another machine. Stop it," in text
    assert "<img" not in shown and "<script>" not in shown
    assert "&lt;img src=x onerror=alert(1)&gt;" in shown
    assert 'action="/hub/colocate/way-out/alice/&quot;&gt;&lt;script&gt;"' in shown
    assert '<input type="hidden" name="stop" value="x">' in shown
    assert (
        ">Stop &#x27;&lt;img src=x onerror=alert(1)&gt;&#x27; and start &#x27;JupyterLab" in shown
    )
    # no way out: the words of event_failure, unchanged
    plain = classify(
        [attach("FailedAttachVolume", MULTI_ATTACH_MIXED, 0)],
        pinned_node=None,
        now=T0,
        server_name="",
        own_server_names={},
    )
    assert messages.event_refusal(plain, "", action="/x") == messages.event_failure(plain, "")


def test_the_way_out_form_says_what_it_stops_and_stays_hidden_until_a_page_shows_it():
    way_out = WayOut(("", "my-app"), "gpu")
    shown = messages.way_out_form_html(
        way_out,
        action="/hub/colocate/way-out/alice/gpu",
        display_names={"my-app": "My <b>App</b>", "gpu": "GPU Lab"},
    )
    assert shown.startswith(
        '<form class="colocate-way-out-form" method="post" action="/hub/colocate/way-out/alice/gpu"'
    )
    assert " hidden " in shown
    assert "colocate-way-out-stops" not in shown  # the button says it, once
    assert shown.count('name="stop"') == 2 and 'name="stop" value=""' in shown
    label = "Stop your default server and &#x27;My &lt;b&gt;App&lt;/b&gt;&#x27; and start"
    assert label in shown
    assert messages.way_out_button_label(WayOut(("a",), ""), {"": "JupyterLab"}) == (
        "Stop 'a' and start 'JupyterLab'"
    )
