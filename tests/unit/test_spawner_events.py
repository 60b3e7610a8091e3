"""ColocatingKubeSpawner.events gives exactly KubeSpawner's own ``events`` (the reference: its
property, called on the same spawner), for less work: a table of event sets.

KubeSpawner's EventReflector is the real class; only its store (``resources``, what its watch
fills) is set by the test, so no API server is needed."""

from __future__ import annotations

from typing import Any, NamedTuple

import pytest
from kubespawner import KubeSpawner
from kubespawner.spawner import EventReflector

from .test_spawner_config import make, offline_kubeconfig  # noqa: F401 (the fixture)


def event(uid: str, pod: str, last: str | None, event_time: str | None = None) -> dict[str, Any]:
    return {
        "metadata": {"uid": uid, "name": f"{pod}.{uid}"},
        "involvedObject": {"kind": "Pod", "name": pod},
        "lastTimestamp": last,
        "eventTime": event_time,
        "reason": "Scheduled",
        "message": uid,
    }


class Row(NamedTuple):
    name: str
    events: list[dict[str, Any]]
    last_event: str | None = None


T = "2026-12-02T07:00:0{}Z"
ROWS = [
    Row("no_events", []),
    Row(
        "other_pods_events_are_left_out_and_the_rest_sorted",
        [
            event("c", "jupyter-alice", T.format(3)),
            event("x", "jupyter-bob", T.format(1)),
            event("a", "jupyter-alice", T.format(1)),
            event("b", "jupyter-alice", T.format(2)),
        ],
    ),
    Row(
        "equal_timestamps_keep_the_store_order",
        [
            event("b", "jupyter-alice", T.format(1)),
            event("y", "jupyter-bob", T.format(1)),
            event("a", "jupyter-alice", T.format(1)),
        ],
    ),
    Row(
        "event_time_stands_in_for_a_missing_last_timestamp",
        [
            event("b", "jupyter-alice", None, "2026-12-02T07:00:02.000000Z"),
            event("a", "jupyter-alice", T.format(1)),
        ],
    ),
    Row(
        "only_the_events_after_the_marker_of_the_spawns_start",
        [
            event("old-1", "jupyter-alice", T.format(1)),
            event("old-2", "jupyter-alice", T.format(2)),
            event("new-1", "jupyter-alice", T.format(3)),
            event("bob", "jupyter-bob", T.format(4)),
            event("new-2", "jupyter-alice", T.format(5)),
        ],
        last_event="old-2",
    ),
    Row(
        "a_marker_no_longer_in_the_store_keeps_every_event",
        [event("a", "jupyter-alice", T.format(1)), event("b", "jupyter-alice", T.format(2))],
        last_event="gone",
    ),
    Row(
        "a_marker_of_another_pod_keeps_every_event",
        [event("bob", "jupyter-bob", T.format(2)), event("a", "jupyter-alice", T.format(3))],
        last_event="bob",
    ),
]


@pytest.mark.parametrize("row", ROWS, ids=lambda row: row.name)
async def test_the_pods_events_are_kubespawners_own(row: Row) -> None:
    spawner = make()
    spawner.pod_name = "jupyter-alice"
    spawner._last_event = row.last_event
    reflector = EventReflector.__new__(EventReflector)
    reflector.resources = {e["metadata"]["uid"]: e for e in row.events}
    key = spawner._get_reflector_key("events")
    saved = KubeSpawner.reflectors.get(key)
    KubeSpawner.reflectors[key] = reflector
    try:
        assert spawner.event_reflector is reflector
        reference = KubeSpawner.events.fget(spawner)
        assert spawner.events == reference
        assert [e["metadata"]["uid"] for e in spawner.events] == [
            e["metadata"]["uid"] for e in reference
        ]
    finally:
        if saved is None:
            KubeSpawner.reflectors.pop(key, None)
        else:
            KubeSpawner.reflectors[key] = saved


async def test_no_event_reflector_no_events() -> None:
    spawner = make(events_enabled=False)
    assert spawner.events == [] == KubeSpawner.events.fget(spawner)
