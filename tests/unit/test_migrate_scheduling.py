"""The copy pod of a move is placed as the user's pods are: the scheduler and priority class the
namespace's server pods agree on (z2jh's user-scheduler, its podPriority).  No cluster."""

from __future__ import annotations

import pytest

from nebari_colocate import migrate
from tests.support.builders import pod, running
from tests.unit.test_migrate import home


def server(name: str, **spec) -> dict:
    made = running(name, "cpu-1", user=name.removeprefix("jupyter-"), claims=[f"claim-{name}"])
    made["spec"].update(spec)
    return made


Z2JH = {"schedulerName": "jhub-user-scheduler", "priorityClassName": "jhub-default-priority"}


@pytest.mark.parametrize(
    "test_variation_id, pods, expect",
    [
        ("z2jh servers", [server("jupyter-bob", **Z2JH), server("jupyter-eve", **Z2JH)], Z2JH),
        ("no server", [], {}),
        ("servers with neither field", [server("jupyter-bob")], {}),
        (
            "servers that disagree on the scheduler",
            [
                server("jupyter-bob", **Z2JH),
                server("jupyter-eve", **{**Z2JH, "schedulerName": "default-scheduler"}),
            ],
            {"priorityClassName": "jhub-default-priority"},
        ),
        (
            "a server without a priority class beside one with it",
            [
                server("jupyter-bob", **Z2JH),
                server("jupyter-eve", schedulerName=Z2JH["schedulerName"]),
            ],
            {"schedulerName": "jhub-user-scheduler"},
        ),
        (
            "pods that are not servers do not count",
            [
                server("jupyter-bob", **Z2JH),
                {**pod("backup", claims=["claim-bob"]), "spec": {"schedulerName": "other"}},
            ],
            Z2JH,
        ),
    ],
)
def test_the_copy_pod_is_scheduled_as_the_namespaces_servers_agree(test_variation_id, pods, expect):
    assert migrate.servers_scheduling(pods) == expect
    spec = migrate.copy_pod_manifest(home(), "python:3.12-slim", None, scheduling=expect)["spec"]
    assert {k: spec[k] for k in migrate.SCHEDULING_FIELDS if k in spec} == expect


def test_without_scheduling_the_copy_pod_names_no_scheduler_nor_priority_class():
    spec = migrate.copy_pod_manifest(home(), "python:3.12-slim", "cpu-7")["spec"]
    assert "schedulerName" not in spec and "priorityClassName" not in spec
