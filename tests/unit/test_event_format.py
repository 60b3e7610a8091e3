"""An operator's KubeSpawner event formatter still formats the events the library does not tell in
its words (docs/surfaces.md, "KubeSpawner's own message formatting").  The progress stream of
``fail_fast.progress`` on a stand-in spawner (the parts the stream reads), and the installed
KubeSpawner's own hook where it has one."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from kubespawner import KubeSpawner

from nebari_colocate import event_format, fail_fast
from nebari_colocate.events import EventVerdict

from .test_spawner_config import make, offline_kubeconfig  # noqa: F401 (the fixture)

#: KubeSpawner's event reflector's events are whole Event objects: its formatter reads
#: ``involvedObject`` (kubespawner#910's RuleEventFormatter fails without it)
POD = {"kind": "Pod", "name": "jupyter-alice", "namespace": "jhub", "fieldPath": ""}
PULLED = {
    "metadata": {"uid": "u-1"},
    "involvedObject": POD,
    "type": "Normal",
    "reason": "Pulled",
    "message": 'Successfully pulled image "quay.io/jupyter/base-notebook"',
    "lastTimestamp": "2026-12-05T01:00:00Z",
    "eventTime": None,
}
UNSCHEDULABLE = {
    "metadata": {"uid": "u-2"},
    "involvedObject": POD,
    "type": "Warning",
    "reason": "FailedScheduling",
    "message": "0/2 nodes are available: 2 Insufficient cpu.",
    "lastTimestamp": "2026-12-05T01:00:01Z",
    "eventTime": None,
}
OUR_WORDS = "Waiting for a node with room for your server."


class Formatter:
    """An operator's formatter, as ``event_formatter_class`` makes one."""

    def format_event(self, event: dict) -> str:
        return f"{event['reason']}: {event['message']}"


def decorate(spawner: Any, event: dict, message: str) -> dict:
    return {"message": f"[ops] {message}", "html_message": f"<b>{message}</b>"}


async def _stream(**hook: Any) -> list[dict]:
    done = asyncio.get_running_loop().create_future()
    done.set_result(None)

    async def no_watch() -> None:
        return None

    spawner = SimpleNamespace(
        events_enabled=True,
        _start_watching_events=no_watch,
        _start_future=done,
        _held_refusal=None,
        _colocation_decision=object(),
        events=[PULLED, UNSCHEDULABLE],
        classify_events=lambda: EventVerdict("wait", "no-node-yet"),
        _pod_names_for_browser=lambda: (set(), set()),
        log=SimpleNamespace(exception=lambda *a: None, warning=lambda *a: None),
        **hook,
    )
    original = fail_fast.messages.event_text
    fail_fast.messages.event_text = lambda verdict: OUR_WORDS  # type: ignore[assignment]
    try:
        return [event async for event in fail_fast.progress(spawner)]
    finally:
        fail_fast.messages.event_text = original  # type: ignore[assignment]


async def test_the_operators_formatter_formats_what_the_library_leaves_and_not_its_words():
    pulled, scheduling, *_ = await _stream(
        event_formatter=Formatter(), decorate_progress_message=decorate
    )
    assert pulled["message"] == f"[ops] Pulled: {PULLED['message']}"
    assert pulled["html_message"] == f"<b>Pulled: {PULLED['message']}</b>"
    assert pulled["raw_event"]["reason"] == "Pulled"
    # FailedScheduling is told in the library's words: they win, the formatter is not asked
    assert scheduling["message"] == OUR_WORDS
    assert scheduling["html_message"].startswith('<div class="colocate-progress">')  # ours


async def test_without_a_formatter_the_library_shows_the_event_as_kubernetes_wrote_it():
    pulled, scheduling, *_ = await _stream()
    assert pulled["message"] == f"[Normal] {PULLED['message']}"
    assert "html_message" not in pulled
    assert scheduling["message"] == OUR_WORDS


async def test_a_formatter_that_fails_never_ends_the_stream():
    class Broken:
        def format_event(self, event: dict) -> str:
            raise KeyError("involvedObject")

    pulled, scheduling, *_ = await _stream(event_formatter=Broken())
    assert pulled["message"] == f"[Normal] {PULLED['message']}"
    assert scheduling["message"] == OUR_WORDS


async def test_an_async_decorator_is_awaited_as_kubespawner_awaits_it():
    async def later(spawner: Any, event: dict, message: str) -> dict:
        return {"message": message.upper()}

    pulled, *_ = await _stream(event_formatter=Formatter(), decorate_progress_message=later)
    assert pulled["message"] == f"PULLED: {PULLED['message'].upper()}"


@pytest.mark.skipif(
    "decorate_progress_message" not in KubeSpawner.class_traits(),
    reason=(
        "the installed KubeSpawner has no event formatter hook (decorate_progress_message and "
        "event_formatter_class came after kubespawner 7.1, jupyterhub/kubespawner#910); the "
        "stand-in tests above cover the library's side"
    ),
)
async def test_the_installed_kubespawners_own_hook_formats_an_event_the_library_leaves():
    spawner = make(decorate_progress_message=decorate)
    assert event_format.has_formatter(spawner)
    bundle = await event_format.formatted(spawner, PULLED)
    assert bundle is not None
    # the operator's decorator around KubeSpawner's own formatter (its default rules)
    assert bundle["message"] == "[ops] " + spawner.event_formatter.format_event(PULLED)
    assert bundle["html_message"].startswith("<b>")
    # and KubeSpawner's default decorator, when the operator sets none
    stock = await event_format.formatted(make(), PULLED)
    assert stock is not None and stock["message"] and "html_message" in stock
