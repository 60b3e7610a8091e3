"""Nebari's own hub, with the documented switch: a real JupyterHub runs Nebari 2025.10.1's four
``hub.extraConfig`` files (read from the installed ``nebari`` package, tests/e2e/nebari/
release.py) with the values Nebari passes, then the ``jupyterhub.overrides`` of
docs/quickstart-nebari.md (read from that page), on the test control plane.

Nebari's storage: one ReadWriteMany claim for every home (``subPath home/<user>``) and one for
conda-store; its node groups labelled ``dedicated=<group>``, every one tainted
``dedicated=nebari:NoSchedule`` and tolerated by every profile.  A per-user ReadWriteOnce claim
comes from a profile that mounts one (docs/quickstart-nebari.md, "When it matters on Nebari").

Run by scripts/test-e2e's ``nebari`` leg (NEBARI_COLOCATE_E2E_LINES=nebari), which installs
``nebari==2025.10.1`` without its dependencies (its files are data here) beside the hub image's
JupyterHub 5.3.0, oauthenticator 16.3.0, kubernetes_asyncio 29.0.0 and nebari-jupyterhub-theme.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from playwright.async_api import expect

from ..browser import log_in, request_from_spawn_page, screenshot, wait_for_verdict
from ..test_success_path import user_pods
from . import release

QUICKSTART = Path(__file__).resolve().parents[3] / "docs" / "quickstart-nebari.md"
LABEL_KEY = "nebari.dev/colocate-user"
GPU = {"nvidia.com/gpu": 1}
GPU_GROUP = {release.GROUP_KEY: "gpu-1x-t4"}


def documented_overrides() -> dict:
    """``jupyterhub.overrides`` of the nebari-config.yaml in docs/quickstart-nebari.md."""
    text = QUICKSTART.read_text()
    section = text.split("## 3. nebari-config.yaml", 1)[1]
    block = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert block is not None, "no yaml block in section 3 of docs/quickstart-nebari.md"
    return yaml.safe_load(block.group(1))["jupyterhub"]["overrides"]


def workspace(user: str) -> dict:
    """What a profile adds to Nebari's mounts for a per-user ReadWriteOnce claim."""
    return {
        "extra_pod_config": {
            "volumes": [
                {"name": "workspace", "persistentVolumeClaim": {"claimName": f"workspace-{user}"}}
            ]
        },
        "extra_container_config": {
            "volumeMounts": [{"name": "workspace", "mountPath": "/home/workspace"}]
        },
    }


#: nebari-config.yaml's profiles.jupyterlab (Nebari renders them per user, 03-profiles.py)
PROFILES = [
    {
        "display_name": "Small Instance",
        "slug": "small",
        "default": True,
        "kubespawner_override": {"cpu_limit": 1, "mem_limit": "1G"},
    },
    {
        "display_name": "GPU Instance",
        "slug": "gpu",
        "kubespawner_override": {"extra_resource_limits": GPU, "node_selector": GPU_GROUP},
    },
    {
        "display_name": "Small Instance with a workspace",
        "slug": "small-ws",
        "kubespawner_override": {"cpu_limit": 1, **workspace("bob")},
    },
    {
        "display_name": "GPU Instance with a workspace",
        "slug": "gpu-ws",
        "kubespawner_override": {
            "extra_resource_limits": GPU,
            "node_selector": GPU_GROUP,
            **workspace("bob"),
        },
    },
]


async def nebari_cluster(kube) -> None:
    """Nebari's user and GPU node groups (AWS labels), tainted as Nebari taints them, and its
    two ReadWriteMany claims."""
    await kube.create_node(
        "user-1", labels={release.GROUP_KEY: "user"}, taints=[release.NEBARI_TAINT], cpu="16"
    )
    await kube.create_node(
        "gpu-1", labels=GPU_GROUP, taints=[release.NEBARI_TAINT], cpu="8", extra=GPU
    )
    for claim in (f"jupyterhub-{kube.namespace}-share", f"conda-store-{kube.namespace}-share"):
        await kube.create_bound_claim(claim, access_modes=("ReadWriteMany",))


def colocation(pod: dict) -> tuple[list, list]:
    """The pod's required co-location terms on our label, and its required node pins."""
    affinity = pod["spec"].get("affinity") or {}
    terms = (affinity.get("podAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or []
    ours = [t for t in terms if LABEL_KEY in (t.get("labelSelector") or {}).get("matchLabels", {})]
    selector = (affinity.get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    pins = [f for t in selector.get("nodeSelectorTerms") or [] for f in t.get("matchFields") or []]
    return ours, pins


def claims_of(pod: dict) -> set[str]:
    return {
        v["persistentVolumeClaim"]["claimName"]
        for v in pod["spec"]["volumes"]
        if v.get("persistentVolumeClaim")
    }


async def test_nebaris_hub_starts_with_the_switch_and_places_shared_and_exclusive_homes(
    kube, start_hub, browser_page, artifacts
):
    await nebari_cluster(kube)
    await kube.create_bound_claim("workspace-bob")  # ReadWriteOnce
    overrides = release.merged(
        documented_overrides(),
        # Nebari allows named servers only with jhub-apps; an operator's override here
        {"hub": {"extraConfig": {"80-named-servers": "c.JupyterHub.allow_named_servers = True"}}},
    )
    values = release.values(kube.namespace, PROFILES, overrides)
    # (the e2e's stand-in for Keycloak manages no roles: a role of load_roles grants carol the
    # page's custom scope, as Keycloak's client role does on Nebari, docs/rbac.md)
    readers = {"name": "colocate-readers", "scopes": ["custom:colocate:read"], "users": ["carol"]}
    hub = await start_hub(
        nebari=True,
        helm_values=values,
        start_timeout=60,
        admin_users=["root"],
        roles=[readers],
    )

    # The hub started on Nebari's files and the switch; Nebari's theme handler (01-theme.py's
    # extra_handlers.extend) is served beside the way out's.
    log = hub.log()
    for name in (*release.FILES, "80-named-servers", "90-nebari-colocate"):
        assert f"Loading extra config: {name}" in log
    status, _ = await hub.proxied("/hub/custom/images/Nebari-logo-square.svg")
    assert status == 200

    # A shared (ReadWriteMany) home: alice's app on the user group, her GPU lab on the GPU
    # node, neither co-located nor pinned.
    await hub.create_user("alice")
    await hub.start_server("alice", "app", {"profile": "small"})
    await hub.start_server("alice", "", {"profile": "gpu"})
    pods = await user_pods(kube, "alice")
    assert {s: p["spec"]["nodeName"] for s, p in pods.items()} == {"app": "user-1", "": "gpu-1"}
    for pod in pods.values():
        share = f"jupyterhub-{kube.namespace}-share"
        assert share in claims_of(pod)
        assert colocation(pod) == ([], [])

    # A per-user ReadWriteOnce claim: bob's lab joins his app on its node.
    await hub.create_user("bob")
    await hub.start_server("bob", "app", {"profile": "small-ws"})
    await hub.start_server("bob", "", {"profile": "small-ws"})
    pods = await user_pods(kube, "bob")
    assert {p["spec"]["nodeName"] for p in pods.values()} == {"user-1"}
    terms, pins = colocation(pods[""])
    assert len(terms) == 1 and pins == [
        {"key": "metadata.name", "operator": "In", "values": ["user-1"]}
    ]

    # ... and a GPU server that would need another node is refused, and the page says why.
    page = browser_page
    await log_in(page, hub, "bob")
    await request_from_spawn_page(page, hub, "bob", "gpu", "gpu-ws")
    verdict = await wait_for_verdict(page)
    await screenshot(page, artifacts / f"nebari-gpu-refused-{verdict.page}.png")
    assert "Your server 'gpu' cannot start" in verdict.text
    assert "'app'" in verdict.text
    await expect(page.locator("body")).not_to_contain_text("Traceback")
    assert not page.dialogs
    assert set(await user_pods(kube, "bob")) == {"", "app"}
    log = hub.log()
    assert "colocate verdict=skip user='alice'" in log
    assert "colocate verdict=colocate user='bob'" in log and "node=user-1" in log
    assert "colocate verdict=refuse user='bob' server='gpu'" in log

    # The operator's page, linked in the navbar of Nebari's hub for an admin only
    await page.goto(f"{hub.url}/hub/token")
    assert await page.locator("#colocate-status-link").count() == 0
    response = await page.goto(f"{hub.url}/hub/colocate/status")
    assert response is not None and response.status == 403
    await page.goto(f"{hub.url}/hub/logout")
    await log_in(page, hub, "root")
    await page.goto(f"{hub.url}/hub/token")
    # (01-theme.py's template_paths.extend puts Nebari's theme after JupyterHub's own templates,
    # JupyterHub's default: its page.html is the one served, as on a stock Nebari hub)
    link = page.locator("#colocate-status-link")
    await expect(link).to_be_visible()
    await link.click()
    await page.wait_for_url(f"{hub.url}/hub/colocate/status")
    await expect(page.locator("#colocate-pinned")).to_contain_text("workspace-bob")
    await expect(page.locator("#colocate-pinned")).to_contain_text("user-1")
    await expect(page.locator("#colocate-refusals")).to_contain_text("gpu")
    await screenshot(page, artifacts / "nebari-status-page.png")
    # JupyterHub 5.3.0 takes the custom scope: carol, no admin, reads the page
    await page.goto(f"{hub.url}/hub/logout")
    await log_in(page, hub, "carol")
    response = await page.goto(f"{hub.url}/hub/colocate/status")
    assert response is not None and response.status == 200
    await expect(page.locator("#colocate-pinned")).to_contain_text("workspace-bob")
    assert hub.hub.alive()
