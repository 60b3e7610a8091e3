"""The templates nebari-colocate ships for JupyterHub's own pages (nebari_colocate/templates/hub):
where ``install_templates`` puts them in ``c.JupyterHub.template_paths`` (after the operator's
own, before JupyterHub's defaults, jhub-apps' page templates first), and what they render with
the installed JupyterHub's templates and its loader (``templates/<name>`` is JupyterHub's own):
the blocks they override exist there, the spawn page shows a refusal's HTML (JupyterHub passes
``html_error_message`` while its template reads ``error_html_message``) and every page includes
the way out's script with the session's token."""

from __future__ import annotations

from pathlib import Path

import pytest
from jinja2 import ChoiceLoader, Environment, FileSystemLoader, PrefixLoader, nodes
from jupyterhub._data import DATA_FILES_PATH
from traitlets.config import Config

from nebari_colocate.helm import HUB_TEMPLATES, JHUB_APPS_TEMPLATES, install_templates

JUPYTERHUB_TEMPLATES = str(Path(DATA_FILES_PATH) / "templates")
HUB, JHUB = str(HUB_TEMPLATES), str(JHUB_APPS_TEMPLATES)
JHUB_APPS_OWN = "/opt/conda/lib/python3.10/site-packages/jhub_apps/templates"


@pytest.mark.parametrize(
    ("before", "after", "with_jhub_apps"),
    [
        pytest.param(None, [HUB], False, id="nothing_set_ours_then_jupyterhubs_appended"),
        pytest.param(["/srv/mine"], ["/srv/mine", HUB], False, id="the_operators_first"),
        pytest.param(
            ["/srv/mine", JUPYTERHUB_TEMPLATES],
            ["/srv/mine", HUB, JUPYTERHUB_TEMPLATES],
            False,
            id="before_jupyterhubs_when_listed",
        ),
        pytest.param([JHUB_APPS_OWN], [JHUB, JHUB_APPS_OWN, HUB], True, id="jhub_apps_pages_first"),
        pytest.param(
            [JHUB, JHUB_APPS_OWN, HUB, "/srv/mine"],
            [JHUB, JHUB_APPS_OWN, "/srv/mine", HUB],
            True,
            id="again_nothing_doubled",
        ),
    ],
)
def test_install_templates_keeps_every_path_and_puts_ours_after_the_operators(
    before, after, with_jhub_apps
):
    c = Config()
    if before is not None:
        c.JupyterHub.template_paths = before
    assert install_templates(c) is with_jhub_apps
    assert c.JupyterHub.template_paths == after
    assert install_templates(c) is with_jhub_apps
    assert c.JupyterHub.template_paths == after


def environment(paths: list[str]) -> Environment:
    """JupyterHub's loader (jupyterhub/app.py): its own templates under ``templates/``, then
    ``template_paths`` with its defaults appended."""
    loader = ChoiceLoader(
        [
            PrefixLoader({"templates": FileSystemLoader([JUPYTERHUB_TEMPLATES])}, "/"),
            FileSystemLoader([*paths, JUPYTERHUB_TEMPLATES]),
        ]
    )
    return Environment(loader=loader, autoescape=True)


def blocks(env: Environment, name: str) -> set[str]:
    source = env.loader.get_source(env, name)[0]  # type: ignore[union-attr]
    return {b.name for b in env.parse(source).find_all(nodes.Block)}


@pytest.mark.parametrize(
    ("page", "overridden"),
    [
        ("spawn.html", {"heading", "script"}),
        ("spawn_pending.html", {"message", "script"}),
        ("not_running.html", {"script"}),
    ],
)
def test_the_blocks_ours_override_are_in_the_installed_jupyterhubs_page(page, overridden):
    env = environment([HUB])
    assert overridden <= blocks(env, f"templates/{page}")
    assert overridden <= blocks(env, page)  # ours
    assert env.get_template(page).filename.startswith(HUB)


NS = {
    "static_url": lambda *a, **k: "/hub/static/x",
    "base_url": "/hub/",
    "prefix": "/",
    "user": None,
    "xsrf": "the-sessions-token",
    "parsed_scopes": set(),
    "version_hash": "",
}
REFUSAL = '<div class="colocate-message" style="text-align: left">refused &lt;b&gt;</div>'


def test_the_spawn_page_shows_a_refusals_html_and_the_way_outs_script():
    env = environment([HUB])
    page = env.get_template("spawn.html").render(
        **NS,
        error_message="refused <b> (text)",
        html_error_message=REFUSAL,
        url="/hub/spawn/alice",
        spawner_options_form="",
    )
    # a <div>, not JupyterHub's <p>: a <p> ends at the message's first <div>
    assert f'<div class="spawn-error-msg alert alert-danger">{REFUSAL}</div>' in page
    assert "(text)" not in page and '<p class="spawn-error-msg' not in page
    assert "window.colocateWayOut" in page and '"the-sessions-token"' in page


def test_the_spawn_page_leaves_other_errors_as_jupyterhub_shows_them():
    env = environment([HUB])
    page = env.get_template("spawn.html").render(
        **NS,
        error_message="quota <b>",
        html_error_message="<i>not ours</i>",
        url="/u",
        spawner_options_form="",
    )
    assert "Error: quota &lt;b&gt;" in page and "<i>not ours</i>" not in page


def test_spawn_pending_wraps_the_starting_words_and_tidies_after_a_refusal():
    env = environment([HUB])
    page = env.get_template("spawn_pending.html").render(**NS, progress_url="/p")
    start = page.index('<div id="colocate-starting">')
    assert "Your server is starting up." in page[start : page.index("progress-bar")]
    assert "new EventSource" in page  # JupyterHub's own script, unchanged
    assert "window.colocateWayOut" in page and "if (told) entry.remove()" in page


def test_the_failed_page_includes_the_way_outs_script():
    env = environment([HUB])
    page = env.get_template("not_running.html").render(
        **NS, failed=True, failed_html_message=REFUSAL, spawn_url="/hub/spawn/alice"
    )
    assert REFUSAL in page and "window.colocateWayOut" in page


async def test_a_click_while_the_refusal_is_held_waits_for_the_hold_to_end():
    """The spawn-pending page shows the button as soon as the held refusal's event arrives;
    the handler then waits for the refused spawn to end before it judges the way out."""
    import asyncio
    import time
    from types import SimpleNamespace

    from nebari_colocate.spawner import ColocatingKubeSpawner

    loop = asyncio.get_running_loop()
    future: asyncio.Future[None] = loop.create_future()
    held = SimpleNamespace(_held_refusal=object(), _spawn_future=future, refusal_hold_seconds=2)
    loop.call_later(0.3, future.set_exception, RuntimeError("refused"))
    started = time.monotonic()
    await ColocatingKubeSpawner.refusal_hold_ended(held)
    assert future.done() and 0.25 < time.monotonic() - started < 2
    future.exception()  # retrieved

    # not held: no wait at all
    idle = SimpleNamespace(_held_refusal=None, _spawn_future=loop.create_future())
    started = time.monotonic()
    await ColocatingKubeSpawner.refusal_hold_ended(idle)
    assert time.monotonic() - started < 0.1
