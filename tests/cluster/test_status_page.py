"""The operator's page against the real control plane (nebari_colocate.status_page): what it
shows comes from the hub's watches and the library's records, and a page view makes no
Kubernetes API request (every request of the process counted around 20 views).

alice's lab pins claim-alice to a node; her big app is refused (insufficient:cpu, recorded with
the words she read); a home marked as being moved, its old volume at step ``copying`` and the
move's Lease (held by a run) are seen through the watches, the Lease by the namespace's lease
watch."""

from __future__ import annotations

import contextlib

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client import rest

from nebari_colocate.history import the_history
from nebari_colocate.informer import HubWatches
from nebari_colocate.spawner import ColocationRefused
from nebari_colocate.status_page import page
from tests.support.waiting import wait_until

from .test_spawner_cluster import pod_of


@contextlib.contextmanager
def counted_requests():
    """Every request any kubernetes_asyncio client of this process sends, counted."""
    seen: list[str] = []
    original = rest.RESTClientObject.request

    async def request(self, method, url, *args, **kwargs):
        seen.append(f"{method} {url}")
        return await original(self, method, url, *args, **kwargs)

    rest.RESTClientObject.request = request
    try:
        yield seen
    finally:
        rest.RESTClientObject.request = original


async def test_the_page_shows_pins_refusals_and_moves_from_memory_without_one_request(
    kube, spawners
):
    the_history().clear()
    await kube.create_node("cpu-1", cpu="4")
    await kube.create_node("cpu-2", cpu="4")
    await kube.create_bound_claim("claim-alice")
    await kube.create_bound_claim("claim-bob")
    lab = spawners.make("alice", cpu_guarantee=3)
    await spawners.start(lab)
    pinned = (await pod_of(kube, lab))["spec"]["nodeName"]
    app = spawners.make("alice", "big-app", cpu_guarantee=2)
    with pytest.raises(ColocationRefused) as refused:
        await spawners.start(app)

    # bob's home is being moved: the claim's mark, the old volume's step, the run's Lease
    await kube.core.patch_namespaced_persistent_volume_claim(
        "claim-bob",
        kube.namespace,
        {
            "metadata": {
                "annotations": {
                    "nebari.dev/migration": "moving",
                    "nebari.dev/migration-started": "2026-12-05T01:00:00Z",
                }
            }
        },
    )
    bob_pv = (
        await kube.core.read_namespaced_persistent_volume_claim("claim-bob", kube.namespace)
    ).spec.volume_name
    await kube.core.patch_persistent_volume(
        bob_pv,
        {
            "metadata": {
                "annotations": {
                    "nebari.dev/migrate-claim": f"{kube.namespace}/claim-bob",
                    "nebari.dev/migrate-step": "copying",
                }
            }
        },
    )
    lease = {
        "metadata": {
            "name": "migrate-claim-bob",
            "labels": {"app.kubernetes.io/component": "nebari-colocate-migrate"},
            "annotations": {
                "nebari.dev/migration-of": "claim-bob",
                "nebari.dev/migrate-host": "ops-1",
            },
        },
        "spec": {"holderIdentity": "root@ops-1 pid 42 a1b2c3", "leaseDurationSeconds": 60},
    }
    await client.CoordinationV1Api(kube.api_client).create_namespaced_lease(kube.namespace, lease)

    def moving(found):
        rows = found["migrations"]
        return rows and rows[0]["step"] == "copying" and rows[0]["holder"]

    found = await wait_until(
        lambda: page(HubWatches.running()),
        until=lambda p: p["view"]["live"] and moving(p) and p["pinned"],
        timeout=20,
        what="the page with the view live, alice pinned and bob's move",
    )

    with counted_requests() as probe:  # the counter sees a request when one is made
        await kube.core.read_namespace(kube.namespace)
    assert len(probe) == 1
    with counted_requests() as seen:
        for _ in range(20):
            found = page()
    assert seen == []

    assert [(p["user"], p["claim"], p["node"], p["servers"]) for p in found["pinned"]] == [
        ("alice", "claim-alice", pinned, [""])
    ]
    (headroom,) = found["nodes"]
    cpu = next(r for r in headroom["resources"] if r["resource"] == "cpu")
    assert (headroom["node"], cpu["free"]) == (pinned, 1000)
    (refusal,) = found["refusals"]["items"]
    assert (refusal["user"], refusal["server"], refusal["reasons"], refusal["node"]) == (
        "alice",
        "big-app",
        ["insufficient:cpu"],
        pinned,
    )
    assert refusal["message"] == refused.value.jupyterhub_message
    (move,) = found["migrations"]
    assert (move["claim"], move["since"], move["step"], move["holder"], move["holder_host"]) == (
        "claim-bob",
        "2026-12-05T01:00:00Z",
        "copying",
        "root@ops-1 pid 42 a1b2c3",
        "ops-1",
    )
