"""What a person does in jhub-apps' own pages (Playwright): log in, create an app, start one.

Selectors are jhub-apps' own (its React UI: ids ``display_name``, ``framework``, ``submit-btn``,
``context-menu-button-card-menu-<server>``, role names "Deploy App", "Start"), read from the
jhub-apps versions this suite installs (2026.7.1 and 2026.9.1).
"""

from __future__ import annotations

from playwright.async_api import Page, expect

from .browser import log_in
from .harness import Hub

UI_TIMEOUT_MS = 30_000

#: user_options jhub-apps' "Create app" sends (JupyterHub 5 stores them with the server), for
#: apps a test starts through the REST API as jhub-apps' service does
APP_OPTIONS = {
    "jhub_app": True,
    "description": "",
    "framework": "panel",
    "thumbnail": "",
    "filepath": "",
    "conda_env": "",
    "env": {},
    "custom_command": "",
    "profile_image": "",
    "public": False,
    "share_with": {"users": [], "groups": []},
    "keep_alive": False,
}


def app_options(server_name: str, display_name: str, profile: str) -> dict:
    """The body jhub-apps' service POSTs to start an app: ``name`` is the server name (jhub-apps'
    home page takes the app's id from the stored options, not from the server model)."""
    return {
        **APP_OPTIONS,
        "name": server_name,
        "display_name": display_name,
        "profile": profile,
    }


async def open_jhub_apps(page: Page, hub: Hub, username: str) -> None:
    """Log in to the hub, open its home page (jhub-apps' launcher) and grant jhub-apps access
    (JupyterHub's OAuth "Authorize access" page, shown once)."""
    await log_in(page, hub, username)
    await page.goto(f"{hub.url}/hub/home")
    authorize = page.get_by_role("button", name="Authorize")
    try:
        await authorize.wait_for(timeout=10_000)
        await authorize.click()
    except Exception:  # already authorized
        pass
    await page.wait_for_url(lambda url: "/hub/home" in url, timeout=UI_TIMEOUT_MS)
    await expect(page.locator("#root")).not_to_be_empty(timeout=UI_TIMEOUT_MS)


async def create_app(
    page: Page, hub: Hub, display_name: str, profile_name: str, framework: str = "Panel"
) -> None:
    """jhub-apps' "Create app": the form, then the server-type (profile) page, then Submit."""
    await page.goto(f"{hub.url}/services/japps/create-app")
    await page.locator("#display_name").fill(display_name, timeout=UI_TIMEOUT_MS)
    await page.locator("#framework").click()
    await page.get_by_role("option", name=framework, exact=True).click()
    # With a profile_list the form's button is "Next" (instead of "Deploy App") and jhub-apps
    # asks for the server type on a page of its own.
    await page.locator("#submit-btn").click()
    await page.wait_for_url(lambda url: "server-types" in url, timeout=UI_TIMEOUT_MS)
    await page.get_by_text(profile_name, exact=True).first.click(timeout=UI_TIMEOUT_MS)
    await page.locator("#submit-btn").click()


def card(page: Page, display_name: str):
    """The app card jhub-apps' home page shows for an app (by the name on it: jhub-apps
    2026.7.1 gives app cards no id)."""
    return page.locator("div.card", has_text=display_name).filter(
        has=page.get_by_label("Menu options")
    )


async def wait_for_card(page: Page, display_name: str) -> None:
    """jhub-apps' home page has loaded the app's card."""
    try:
        await card(page, display_name).first.wait_for(timeout=UI_TIMEOUT_MS)
    except Exception as exc:
        body = (await page.locator("body").inner_text())[:1000]
        raise AssertionError(f"no card for {display_name!r} on {page.url}:\n{body}") from exc


async def start_app_from_home(page: Page, hub: Hub, display_name: str) -> None:
    """jhub-apps' home page: the app card's menu, "Start", and "Start" in the dialog."""
    await page.goto(f"{hub.url}/hub/home")
    await wait_for_card(page, display_name)
    await card(page, display_name).first.get_by_label("Menu options").click()
    await page.get_by_role("menuitem", name="Start").click()
    dialog = page.get_by_role("dialog")
    await dialog.get_by_role("button", name="Start").click()
