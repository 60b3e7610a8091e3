"""End-to-end fixtures: a real JupyterHub per test, and headless Chromium driven by Playwright.

Run with ``scripts/test-e2e`` (a virtualenv per JupyterHub line) or, in an environment that has
playwright and configurable-http-proxy, ``python -m pytest tests/e2e``. The main suite never
collects this directory (pyproject's ``norecursedirs``); naming it on the command line always
does.

- ``start_hub(**settings)``: starts a ``harness.Hub`` in this test's namespace (``kube``) and stops
  it at the end of the test; its logs are copied to ``test-artifacts/e2e/<jupyterhub>/<test>/``.
  With ``z2jh_scheduling=True``, or for every hub of a leg run with
  ``NEBARI_COLOCATE_E2E_Z2JH_SCHEDULING=1`` (scripts/test-e2e sets it for the dsp leg), the hub runs
  as zero-to-jupyterhub with ``scheduling.podPriority.enabled`` and user placeholders: the chart's
  PriorityClasses on the control plane, ``priority_class_name`` on the user pods, and
  ``Z2JH_PLACEHOLDERS`` placeholder pods at -10 sized as the user pods (``tests/support/z2jh.py``).
- ``browser_page``: a fresh Chromium page (Debian's /usr/bin/chromium, or $NEBARI_COLOCATE_CHROMIUM)
  that may only reach 127.0.0.0/8 and records every JavaScript dialog in ``page.dialogs``; a test
  ends with ``assert not page.dialogs``.
- ``artifacts``: the directory for this JupyterHub line's screenshots.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
from pathlib import Path
from urllib.parse import urlsplit

import jupyterhub
import pytest

from tests.support.controlplane import tail
from tests.support.z2jh import DEFAULT_PRIORITY, create_placeholders, ensure_priority_classes

from .harness import Hub

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts" / "e2e" / f"jupyterhub-{jupyterhub.__version__}"
CHROMIUM = os.environ.get("NEBARI_COLOCATE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",  # root in CI
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--no-first-run",
]
JUPYTERHUB_MAJOR = int(jupyterhub.__version__.split(".")[0])
#: tests/e2e/nebari needs the nebari package: scripts/test-e2e's nebari leg installs it and sets
#: NEBARI_COLOCATE_E2E_NEBARI; the other legs do not collect it
collect_ignore = [] if os.environ.get("NEBARI_COLOCATE_E2E_NEBARI") else ["nebari"]
#: every hub of this run with zero-to-jupyterhub's podPriority and user placeholders
Z2JH_SCHEDULING = os.environ.get("NEBARI_COLOCATE_E2E_Z2JH_SCHEDULING", "") == "1"
#: ``scheduling.userPlaceholder.replicas`` of those hubs
Z2JH_PLACEHOLDERS = 2


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.e2e)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """On a failure, attach the tails of the hub's and the single-user stub's logs."""
    report = yield
    if report.failed:
        for hub in getattr(item, "_e2e_hubs", ()):
            report.sections.append((f"jupyterhub log ({hub.log_path})", tail(hub.log_path, 80)))
            report.sections.append(("single-user stub log", tail(hub.stub_log_path, 20)))
    return report


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


def _test_dir_name(nodeid: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", nodeid.split("::", 1)[-1]).strip("-")


@pytest.fixture
async def start_hub(kube, tmp_path, request, artifacts):
    """``await start_hub(**settings)`` -> a started Hub in this test's namespace."""
    hubs: list[Hub] = []
    request.node._e2e_hubs = hubs

    async def start(**settings) -> Hub:
        if settings.pop("z2jh_scheduling", Z2JH_SCHEDULING):
            # as the chart renders podPriority and userPlaceholder (placeholders sized as
            # jupyterhub_config.py sizes the user pods: 0.1 CPU, 128M)
            await ensure_priority_classes(kube.api_client)
            await create_placeholders(
                kube.api_client, kube.namespace, Z2JH_PLACEHOLDERS, cpu="100m", memory="128M"
            )
            settings.setdefault("z2jh_pod_priority", DEFAULT_PRIORITY)
        hub = Hub(
            tmp_path / f"hub-{len(hubs)}",
            kubeconfig=kube.kubeconfig,
            namespace=kube.namespace,
            **settings,
        )
        hubs.append(hub)
        await hub.start()
        return hub

    yield start
    logs = artifacts / _test_dir_name(request.node.nodeid)
    for i, hub in enumerate(hubs):
        await hub.stop()
        logs.mkdir(parents=True, exist_ok=True)
        for path in (hub.log_path, hub.stub_log_path):
            if path.exists():
                shutil.copy(path, logs / f"{i}-{path.name}")


def _loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host) in ipaddress.ip_network("127.0.0.0/8")
    except ValueError:
        return False


@pytest.fixture
async def browser_page():
    from playwright.async_api import async_playwright

    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(
            f"{CHROMIUM} is missing: install Debian's chromium (scripts/test-e2e does)",
            pytrace=False,
        )
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = await browser.new_context(viewport={"width": 1280, "height": 900})

        async def only_loopback(route):
            if _loopback(route.request.url) or route.request.url.startswith(("data:", "blob:")):
                await route.continue_()
            else:
                page.blocked.append(route.request.url)
                await route.abort()

        await context.route("**/*", only_loopback)
        page = await context.new_page()
        page.dialogs = []
        page.blocked = []
        page.page_errors = []

        async def on_dialog(dialog):
            page.dialogs.append(f"{dialog.type}: {dialog.message}")
            await dialog.dismiss()

        page.on("dialog", on_dialog)
        page.on("pageerror", lambda e: page.page_errors.append(str(e)))
        try:
            yield page
        finally:
            await context.close()
            await browser.close()
