"""What differs between JupyterHub 5 and 6: failure accounting and display names (plain objects).

The real hubs are in tests/e2e/test_failure_accounting.py; these rows pin the bookkeeping.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from nebari_colocate import jupyterhub as jh
from nebari_colocate import messages
from nebari_colocate.spawner import ColocatingKubeSpawner


def spawning(count, *, future_done=False, has_future=True, has_handler=True):
    loop = asyncio.new_event_loop()
    future = loop.create_future()
    if future_done:
        future.set_result(None)
    settings = {} if count is None else {"failure_count": count}
    handler = SimpleNamespace(settings=settings) if has_handler else None
    spawner = SimpleNamespace(_spawn_future=future if has_future else None, handler=handler)
    loop.close()
    return spawner, settings


def jupyterhub5_callback(settings):
    """What JupyterHub 5.5's _track_failure_count does with a failed spawn."""
    settings.setdefault("failure_count", 0)
    settings["failure_count"] += 1
    return settings["failure_count"]


@pytest.mark.parametrize(
    "test_variation_id, count, kwargs, expect_acted, expect_after_callback",
    [
        ("first-refusal-counts-nothing", None, {}, True, 0),
        ("after-four-real-failures-the-count-stays-four", 4, {}, True, 4),
        ("not-started-by-spawn-single-user", 2, {"has_future": False}, False, 3),
        ("spawn-future-already-done", 2, {"future_done": True}, False, 3),
        ("no-handler", 2, {"has_handler": False}, False, 3),
    ],
)
def test_jupyterhub5_leaves_refusals_out_of_the_failure_count(
    test_variation_id, count, kwargs, expect_acted, expect_after_callback, monkeypatch
):
    monkeypatch.setattr(jh, "COUNTS_ONLY_SERVER_ERRORS", False)
    spawner, settings = spawning(count, **kwargs)
    assert jh.uncount_refusal(spawner) is expect_acted
    assert jupyterhub5_callback(settings) == expect_after_callback


def test_six_refusals_never_reach_a_limit_of_five(monkeypatch):
    monkeypatch.setattr(jh, "COUNTS_ONLY_SERVER_ERRORS", False)
    spawner, settings = spawning(None)
    counts = []
    for _ in range(6):
        jh.uncount_refusal(spawner)
        counts.append(jupyterhub5_callback(settings))
    assert counts == [0] * 6
    assert [jupyterhub5_callback(settings) for _ in range(5)] == [1, 2, 3, 4, 5]


def test_jupyterhub6_counts_nothing_itself_so_nothing_is_taken_off(monkeypatch):
    monkeypatch.setattr(jh, "COUNTS_ONLY_SERVER_ERRORS", True)
    spawner, settings = spawning(3)
    assert jh.uncount_refusal(spawner) is False
    assert settings == {"failure_count": 3}


def fake_spawner(name, options=None, stored=(), default=None, display_name=None):
    orm_spawners = {n: SimpleNamespace(user_options=o, display_name=d) for n, o, d in stored}
    return SimpleNamespace(
        name=name,
        user_options=options or {},
        display_name=display_name,
        default_server_display_name=default,
        user=SimpleNamespace(orm_user=SimpleNamespace(orm_spawners=orm_spawners)),
    )


@pytest.mark.parametrize(
    "test_variation_id, spawner, expect",
    [
        (
            "jupyterhub5-jhub-apps-user-options",
            fake_spawner(
                "my-dashboard",
                {"display_name": "My Dashboard"},
                stored=[("pandas-app", {"display_name": "Pandas App"}, None), ("", {}, None)],
            ),
            {"my-dashboard": "My Dashboard", "pandas-app": "Pandas App"},
        ),
        (
            "jupyterhub6-display-name-wins",
            fake_spawner(
                "app",
                {"display_name": "old"},
                stored=[("other", {}, "Other App")],
                display_name="New Name",
            ),
            {"app": "New Name", "other": "Other App"},
        ),
        (
            "configured-default-server-name",
            fake_spawner("x", stored=[("", {}, None)], default="My Lab"),
            {"": "My Lab"},
        ),
        (
            "non-string-display-names-are-ignored",
            fake_spawner("x", {"display_name": ["not", "a", "name"]}, stored=[("y", None, 7)]),
            {},
        ),
    ],
)
def test_server_display_names(test_variation_id, spawner, expect):
    assert ColocatingKubeSpawner.server_display_names(spawner) == expect


def _refusal():
    return jh.ColocationRefused("Your server 'x' cannot start: ...", "<div>...</div>", "operator")


def holding_spawner(hold: float, through_api: bool):
    from jupyterhub.apihandlers.base import APIHandler
    from jupyterhub.handlers.pages import SpawnHandler

    handler_class = APIHandler if through_api else SpawnHandler
    spawner = SimpleNamespace(
        refusal_hold_seconds=hold,
        handler=handler_class.__new__(handler_class),
        _held_refusal=None,
        colocation_failure=None,
        user=SimpleNamespace(name="alice"),
        name="x",
    )
    spawner._remember = lambda r: ColocatingKubeSpawner._remember(spawner, r)
    return spawner


@pytest.mark.parametrize(
    "test_variation_id, hold, through_api, expect_held",
    [
        ("rest-api-spawn-is-held", 0.2, True, True),
        ("spawn-form-is-never-held", 0.2, False, False),
        ("hold-off", 0, True, False),
    ],
)
async def test_a_refusal_requested_through_the_rest_api_is_held_pending(
    test_variation_id, hold, through_api, expect_held
):
    spawner = holding_spawner(hold, through_api)
    refusal = _refusal()
    task = asyncio.ensure_future(ColocatingKubeSpawner._hold(spawner, refusal))
    await asyncio.sleep(0.05)
    # While held, the progress stream has the reason; afterwards it is gone, the failure kept.
    assert (spawner._held_refusal is not None) is expect_held
    assert task.done() is not expect_held
    await task
    assert spawner._held_refusal is None
    kept = spawner.colocation_failure
    assert (kept.message, kept.html) == (
        refusal.jupyterhub_message,
        refusal.jupyterhub_html_message,
    )


# --------------------------------------------------------------------------------------------------
# the way out in the progress stream (docs/decisions.md, "The way out")


def way_out_refusal(way_out):
    from nebari_colocate.placement import Decision
    from nebari_colocate.wayout import WayOut

    decision = Decision(verdict="refuse", reasons=["node-selector"])
    decision.way_out = WayOut(tuple(way_out["stop"]), way_out["start"]) if way_out else None
    return jh.ColocationRefused("words", "<div>words</div>", "operator", decision=decision)


async def held_progress_events(refusal):
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    done.set_result(None)

    async def no_watch():
        return None

    spawner = SimpleNamespace(
        events_enabled=True,
        colocation_mode="enforce",
        _start_watching_events=no_watch,
        _start_future=done,
        _held_refusal=refusal,
        _colocation_decision=None,
        events=[],
        _pod_names_for_browser=lambda: (set(), set()),
    )
    return [event async for event in ColocatingKubeSpawner.progress(spawner)]


@pytest.mark.parametrize(
    "test_variation_id, way_out",
    [
        ("stop-the-app-start-the-lab", {"stop": ["pandas-app"], "start": ""}),
        ("no-way-out-is-null", None),
    ],
)
async def test_the_refusal_event_of_the_progress_stream_carries_the_way_out(
    test_variation_id, way_out
):
    refusal = way_out_refusal(way_out)
    assert refusal.way_out == way_out
    events = await held_progress_events(refusal)
    refused = [e for e in events if e.get("message") == "words"]
    assert len(refused) == 1 and "way_out" in refused[0]
    assert refused[0]["way_out"] == way_out


def test_the_remembered_failure_keeps_the_way_out_for_the_handler():
    spawner = SimpleNamespace(colocation_failure=None, user=SimpleNamespace(name="alice"), name="b")
    ColocatingKubeSpawner._remember(spawner, way_out_refusal({"stop": ["a"], "start": "b"}))
    assert spawner.colocation_failure.way_out_json() == {"stop": ["a"], "start": "b"}


def test_the_remembered_failure_is_recorded_for_the_operators_page():
    from nebari_colocate.history import the_history

    spawner = SimpleNamespace(colocation_failure=None, user=SimpleNamespace(name="alice"), name="b")
    before = len(the_history().refusals)
    ColocatingKubeSpawner._remember(spawner, way_out_refusal({"stop": ["a"], "start": "b"}))
    kept = the_history().refusals[-1]
    assert len(the_history().refusals) == before + 1
    assert (kept.user, kept.server, kept.way_out, kept.mode) == ("alice", "b", True, "enforce")


async def test_from_the_refusal_on_every_progress_event_carries_the_way_out_and_it_is_said_once():
    refusal = way_out_refusal({"stop": ["pandas-app"], "start": ""})
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    loop.call_later(1.2, done.set_result, None)  # a second turn of the stream, then the end

    async def no_watch():
        return None

    spawner = SimpleNamespace(
        events_enabled=True,
        _start_watching_events=no_watch,
        _start_future=done,
        _held_refusal=refusal,
        _colocation_decision=None,
        events=[],
        _pod_names_for_browser=lambda: (set(), set()),
        colocation_mode="enforce",
        slow_spawn_message_threshold=0.001,
        slow_spawn_message_frequency=0.0,
        slow_spawn_message="still waiting ({seconds} s)",
    )
    events = [event async for event in ColocatingKubeSpawner.progress(spawner)]
    assert [e["message"] for e in events].count("words") == 1  # the refusal, said once
    after = events[[e["message"] for e in events].index("words") :]
    assert len(after) >= 2, events  # the refusal, then a later event (the patience message)
    assert all(e["way_out"] == {"stop": ["pandas-app"], "start": ""} for e in after), after


async def test_a_spawn_ended_by_its_pods_events_says_it_once_with_the_refusals_html_and_way_out():
    from nebari_colocate import events as ev
    from nebari_colocate.wayout import WayOut

    verdict = ev.EventVerdict(
        ev.FAIL, ev.MULTI_ATTACH, servers=("Pandas App",), way_out=WayOut(("pandas-app",), "")
    )
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    done.set_result(None)

    async def no_watch():
        return None

    names = {"": "JupyterLab", "pandas-app": "Pandas App"}
    spawner = SimpleNamespace(
        events_enabled=True,
        _start_watching_events=no_watch,
        _start_future=done,
        _held_refusal=None,
        colocation_failure=None,
        _colocation_decision=object(),
        classify_events=lambda: verdict,
        events=[],
        _pod_names_for_browser=lambda: (set(), set()),
        colocation_mode="enforce",
        name="",
        server_display_names=lambda: names,
        way_out_url=lambda: "/hub/colocate/way-out/alice/",
    )
    events = [event async for event in ColocatingKubeSpawner.progress(spawner)]
    text, shown = messages.event_refusal(verdict, "", names, action="/hub/colocate/way-out/alice/")
    assert events == [
        {
            "progress": 0,
            "message": text,
            "html_message": shown,
            "way_out": verdict.way_out.as_json(),
        }
    ]
