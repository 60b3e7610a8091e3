"""classify() with the rest of what a scheduler does: preemption, and a scheduler nobody runs.

One table per rule, each row a sentence (``tests/unit/test_events.py``'s ``Case``).  The messages
are kube-scheduler v1.37's (``framework/preemption`` and ``plugins/defaultpreemption``): a pod
that fits nowhere gets a FailedScheduling whose PostFilter part says a placement was found by
preemption ("preempting K victims", the pod nominated to the node); while the victims terminate,
the next attempts say it is "not eligible due to a terminating pod on the nominated node".
"""

from __future__ import annotations

import pytest

from nebari_colocate import messages
from nebari_colocate.config import PREEMPTION_GRACE_SECONDS
from nebari_colocate.events import (
    NO_NODE_YET,
    NO_SCHEDULER,
    PREEMPTING,
    PREEMPTION_STALLED,
    PROGRESS,
    UNSCHEDULABLE,
    UNSCHEDULABLE_PINNED,
    EventVerdict,
    classify,
)
from nebari_colocate.pod_scheduling import confirmed
from nebari_colocate.slim import slim_pod
from tests.unit.test_events import (
    CPU_FULL,
    SCHEDULED,
    T0,
    Case,
    check,
    core,
    named,
    scheduler,
    series,
)

# kube-scheduler v1.37.2: alice's app pinned to cpu-1, full of placeholders at priority -10.
PREEMPTING_ON_CPU1 = (
    "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) didn't satisfy plugin(s) "
    "[NodeAffinity]. preemption: found a potential placement for pod on node cpu-1, preempting "
    "1 victims"
)
PREEMPTING_TWO_ON_CPU1 = PREEMPTING_ON_CPU1.replace("preempting 1 victims", "preempting 2 victims")
VICTIMS_TERMINATING = (
    "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) didn't satisfy plugin(s) "
    "[NodeAffinity]. preemption: not eligible due to a terminating pod on the nominated node."
)
NO_VICTIMS = (
    "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) didn't satisfy plugin(s) "
    "[NodeAffinity]. preemption: 0/2 nodes are available: 1 No preemption victims found for "
    "incoming pod, 1 Preemption is not helpful for scheduling."
)
NEVER_PREEMPTS = (
    "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) didn't satisfy plugin(s) "
    "[NodeAffinity]. preemption: not eligible due to preemptionPolicy=Never."
)
# A first server, not pinned: every node full of placeholders.
PREEMPTING_ON_CPU2 = (
    "0/2 nodes are available: 2 Insufficient cpu. preemption: found a potential placement for "
    "pod on node cpu-2, preempting 3 victims"
)


def user_scheduler(message, at, **kw):
    """A FailedScheduling of z2jh's user-scheduler, an events.k8s.io/v1 event."""
    return series("FailedScheduling", message, at, component="jhub-user-scheduler", **kw)


def nominated(node: str | None) -> dict:
    """The pod as the pod reflector holds it, nominated to ``node`` (None: not nominated)."""
    status = {"phase": "Pending"}
    if node:
        status["nominatedNodeName"] = node
    return {"metadata": {"name": "jupyter-alice"}, "spec": {}, "status": status}


PREEMPTION = [
    Case(
        "pinned_pod_whose_scheduler_found_a_placement_by_preemption_waits",
        [scheduler(PREEMPTING_ON_CPU1, 0)],
        PREEMPTING,
        want_words=("Making room for this server on node cpu-1", "1 lower-priority pod "),
        want_facts={"node": "cpu-1", "victims": 1, "scheduler": "default-scheduler"},
        pinned_node="cpu-1",
    ),
    Case(
        "pinned_pod_whose_victims_are_still_terminating_waits",
        [scheduler(PREEMPTING_TWO_ON_CPU1, 0), scheduler(VICTIMS_TERMINATING, 2)],
        PREEMPTING,
        want_words=("2 lower-priority pods",),
        want_facts={"node": "cpu-1", "victims": 2},
        pinned_node="cpu-1",
        now=3,
        options={"pod": nominated("cpu-1")},
    ),
    Case(
        "pinned_pod_nominated_to_its_node_waits_whatever_its_latest_event_says",
        [scheduler(VICTIMS_TERMINATING, 0)],
        PREEMPTING,
        want_facts={"node": "cpu-1", "victims": 0},
        pinned_node="cpu-1",
        options={"pod": nominated("cpu-1")},
    ),
    Case(
        "pinned_pod_preempting_on_the_user_scheduler_waits_and_names_it",
        [user_scheduler(PREEMPTING_ON_CPU1, 0)],
        PREEMPTING,
        want_facts={"scheduler": "jhub-user-scheduler"},
        pinned_node="cpu-1",
    ),
    Case(
        "pinned_pod_preempting_waits_even_past_the_unschedulable_grace",
        [scheduler(PREEMPTING_ON_CPU1, 0)],
        PREEMPTING,
        pinned_node="cpu-1",
        now=61,
        options={"unschedulable_grace_seconds": 60},
    ),
    Case(
        "pinned_pod_bound_once_its_victims_are_gone_waits_on_progress",
        [scheduler(PREEMPTING_ON_CPU1, 0), core("Scheduled", SCHEDULED, 3)],
        PROGRESS,
        want_facts={"event": "Scheduled"},
        pinned_node="cpu-1",
        now=4,
    ),
    Case(
        "first_server_preempting_placeholders_on_any_node_waits",
        [scheduler(PREEMPTING_ON_CPU2, 0)],
        PREEMPTING,
        want_words=("node cpu-2", "3 lower-priority pods"),
        want_facts={"node": "cpu-2", "victims": 3},
        now=61,
    ),
    Case(
        "preemption_whose_victims_are_not_gone_within_the_bound_ends_the_spawn",
        [scheduler(PREEMPTING_ON_CPU1, 0), scheduler(VICTIMS_TERMINATING, 2)],
        PREEMPTION_STALLED,
        want_words=("making room for it on node cpu-1", "after 120 seconds", "administrator"),
        want_facts={"node": "cpu-1", "grace": PREEMPTION_GRACE_SECONDS},
        pinned_node="cpu-1",
        now=PREEMPTION_GRACE_SECONDS,
        options={"pod": nominated("cpu-1")},
    ),
    Case(
        "preemption_bound_counts_from_the_latest_run_of_preempting_words",
        [
            scheduler(PREEMPTING_ON_CPU1, 0),
            scheduler(NO_VICTIMS, 10, last=10),
            scheduler(PREEMPTING_TWO_ON_CPU1, 100),
        ],
        PREEMPTING,
        pinned_node="cpu-1",
        now=150,
    ),
    Case(
        "preemption_bound_of_zero_waits_for_start_timeout",
        [scheduler(PREEMPTING_ON_CPU1, 0)],
        PREEMPTING,
        pinned_node="cpu-1",
        now=1000,
        options={"preemption_grace_seconds": 0},
    ),
    Case(
        "pinned_pod_whose_nomination_was_dropped_fails_at_once_and_says_so",
        [scheduler(PREEMPTING_ON_CPU1, 0), scheduler(NO_VICTIMS, 2)],
        UNSCHEDULABLE_PINNED,
        want_words=("node cpu-1", "not enough free CPU", "gave that up"),
        want_facts={"victims": 1},
        pinned_node="cpu-1",
        now=3,
        options={"pod": nominated(None)},
    ),
    Case(
        "pinned_pod_that_may_not_preempt_fails_at_once",
        [scheduler(NEVER_PREEMPTS, 0)],
        UNSCHEDULABLE_PINNED,
        want_words=("not enough free CPU",),
        want_absent=("gave that up",),
        pinned_node="cpu-1",
    ),
    Case(
        "pinned_pod_without_preemption_victims_fails_at_once_as_before",
        [scheduler(CPU_FULL, 0)],
        UNSCHEDULABLE_PINNED,
        want_facts={"victims": 0, "scheduler": "default-scheduler"},
        pinned_node="cpu-1",
    ),
    Case(
        "pinned_pod_nominated_to_another_node_is_not_waiting_on_its_own_node",
        [scheduler(CPU_FULL, 0)],
        UNSCHEDULABLE_PINNED,
        pinned_node="cpu-1",
        options={"pod": nominated("cpu-2")},
    ),
    Case(
        "first_server_whose_preemption_was_dropped_is_judged_by_the_grace",
        [scheduler(PREEMPTING_ON_CPU2, 0), scheduler(CPU_FULL, 2)],
        NO_NODE_YET,
        now=3,
    ),
    Case(
        "first_server_whose_preemption_was_dropped_fails_after_the_grace",
        [scheduler(PREEMPTING_ON_CPU2, 0), scheduler(CPU_FULL, 2)],
        UNSCHEDULABLE,
        now=61,
    ),
]


@pytest.mark.parametrize("case", PREEMPTION, ids=named)
def test_a_pod_the_scheduler_makes_room_for_by_preemption_waits_within_a_bound(case: Case) -> None:
    verdict = check(case)
    # Preemption words count pods, they never name them.
    assert "placeholder" not in messages.event_words(verdict)


CREATED = T0


def unscheduled(**status_and_spec) -> dict:
    """A pod no scheduler has touched, with ``spec`` / ``status`` fields added."""
    pod = {
        "metadata": {"name": "jupyter-alice"},
        "spec": {"schedulerName": "jhub-user-scheduler"},
        "status": {"phase": "Pending"},
    }
    for key, value in status_and_spec.items():
        part = "spec" if key in ("nodeName", "schedulerName") else "status"
        pod[part][key] = value
    return pod


NO_SCHEDULER_ROWS = [
    Case(
        "pod_no_scheduler_looked_at_ends_after_the_bound_naming_the_scheduler",
        [],
        NO_SCHEDULER,
        want_words=(
            "No scheduler has picked up your server",
            "'jhub-user-scheduler' may not be running",
            "Trying again will not help until it is fixed",
        ),
        want_facts={"scheduler": "jhub-user-scheduler", "grace": 30.0},
        now=30,
        options={"pod": unscheduled(), "created": CREATED},
    ),
    Case(
        "pod_without_a_scheduler_name_names_the_default_scheduler",
        [],
        NO_SCHEDULER,
        want_words=("'default-scheduler'",),
        now=31,
        options={
            "pod": {"spec": {}, "status": {"phase": "Pending"}},
            "created": CREATED,
            "unscheduled_timeout_seconds": 30,
        },
    ),
    Case(
        "pod_unscheduled_within_the_bound_waits",
        [],
        PROGRESS,
        now=29,
        options={"pod": unscheduled(), "created": CREATED},
    ),
    Case(
        "pod_with_a_pod_scheduled_condition_was_seen_by_a_scheduler_and_waits",
        [],
        PROGRESS,
        now=300,
        options={
            "pod": unscheduled(conditions=[{"type": "PodScheduled", "status": "False"}]),
            "created": CREATED,
        },
    ),
    Case(
        "bound_pod_waits",
        [],
        PROGRESS,
        now=300,
        options={"pod": unscheduled(nodeName="cpu-1"), "created": CREATED},
    ),
    Case(
        "nominated_pod_waits",
        [],
        PROGRESS,
        now=300,
        options={"pod": unscheduled(nominatedNodeName="cpu-1"), "created": CREATED},
    ),
    Case(
        "pod_with_any_event_waits_on_that_event",
        [scheduler(CPU_FULL, 0)],
        NO_NODE_YET,
        now=30,
        options={"pod": unscheduled(), "created": CREATED, "unschedulable_grace_seconds": 0},
    ),
    Case(
        "pod_not_yet_in_the_reflector_waits",
        [],
        PROGRESS,
        now=300,
        options={"pod": None, "created": CREATED},
    ),
    Case(
        "pod_whose_creation_time_is_unknown_waits",
        [],
        PROGRESS,
        now=300,
        options={"pod": unscheduled(), "created": None},
    ),
    Case(
        "the_rule_turned_off_waits",
        [],
        PROGRESS,
        now=300,
        options={"pod": unscheduled(), "created": CREATED, "unscheduled_timeout_seconds": 0},
    ),
    Case(
        "pod_being_deleted_waits",
        [],
        PROGRESS,
        now=300,
        options={
            "pod": {**unscheduled(), "metadata": {"deletionTimestamp": "2024-05-01T12:00:00Z"}},
            "created": CREATED,
        },
    ),
]


@pytest.mark.parametrize("case", NO_SCHEDULER_ROWS, ids=named)
def test_a_pod_no_scheduler_looks_at_ends_after_the_bound(case: Case) -> None:
    check(case)


def test_the_operator_line_names_the_scheduler_nobody_runs() -> None:
    verdict = classify(
        [], pinned_node=None, now=T0.replace(second=40), pod=unscheduled(), created=CREATED
    )
    line = messages.event_operator_line(
        verdict, username="alice", server_name="", pod_name="jupyter-alice"
    )
    assert "reason=no-scheduler" in line
    assert "scheduler='jhub-user-scheduler'" in line


def test_the_words_escape_nothing_a_user_controls() -> None:
    # The scheduler's name is the operator's; the words are text, escaped by event_failure.
    verdict = EventVerdict("fail", NO_SCHEDULER, scheduler="<b>x</b>")
    _, html = messages.event_failure(verdict, "my-app")
    assert "<b>x</b>" not in html


def test_the_slim_pod_keeps_what_these_rules_read() -> None:
    full = unscheduled(
        nominatedNodeName="cpu-1",
        conditions=[
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "x"}
        ],
    )
    status = slim_pod(full)["status"]
    assert status["nominatedNodeName"] == "cpu-1"
    assert status["conditions"] == [{"type": "PodScheduled"}]
    assert "conditions" not in slim_pod(unscheduled())["status"]


# confirmed(): a verdict drawn from the pod's silence holds only on the pod read again by name.
SILENT = {**unscheduled(), "metadata": {"name": "jupyter-alice"}}
CONFIRMATIONS = [
    # (what the read gives, or the exception it raises; whether the spawn ends)
    pytest.param(SILENT, True, id="a_pod_still_silent_when_read_again_ends_the_spawn"),
    pytest.param(unscheduled(nodeName="cpu-1"), False, id="a_pod_bound_meanwhile_waits"),
    pytest.param(
        unscheduled(conditions=[{"type": "PodScheduled"}]),
        False,
        id="a_pod_a_scheduler_marked_meanwhile_waits",
    ),
    pytest.param(None, False, id="a_pod_gone_confirms_nothing"),
    pytest.param(TimeoutError("API"), False, id="a_read_that_fails_confirms_nothing"),
]


@pytest.mark.parametrize("read, ends", CONFIRMATIONS)
async def test_a_spawn_ended_on_the_pods_silence_is_confirmed_by_a_read(read, ends) -> None:
    def judge(pod):
        return classify([], pinned_node=None, now=T0.replace(second=40), pod=pod, created=CREATED)

    async def reread():
        if isinstance(read, Exception):
            raise read
        return read

    verdict = judge(SILENT)
    assert verdict.code == NO_SCHEDULER
    found = await confirmed(verdict, reread, judge)
    assert (found is not None) == ends


async def test_other_failures_need_no_confirmation() -> None:
    verdict = classify([scheduler(CPU_FULL, 0)], pinned_node="cpu-1", now=T0)

    async def reread():
        raise AssertionError("no read for an event that decided")

    assert await confirmed(verdict, reread, lambda pod: verdict) is verdict
