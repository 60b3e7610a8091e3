"""The words a person reads, checked against the events the real components write.

The pure tables (tests/unit/test_messages.py) hold event texts as the upstream sources print
them; here the same words are checked on what kube-scheduler and kube-controller-manager really
emit for two failures, consuming the real spawner's ``start()`` and ``progress()`` as JupyterHub
does:

- a home claim whose StorageClass does not exist: the scheduler's FailedScheduling (the only
  event KubeSpawner's event reflector sees: it watches ``involvedObject.kind=Pod``, so the PV
  controller's ProvisioningFailed on the claim never reaches the spawner) must be told as storage
  an administrator must fix, never as "choose a smaller profile";
- a Multi-Attach caused by another user's server: the progress stream, whose every field
  JupyterHub sends to the browser, must never carry that user's pod name or username.

Nothing here writes an event.
"""

from __future__ import annotations

import asyncio
import json
import time

from nebari_colocate.spawner import ColocationRefused
from tests.support.waiting import wait_until

from .test_real_attach import home_pv

MISSING_CLASS = "no-such-class"
ATTACH_FAILED = "FailedAttachVolume"
STORAGE_WORDS = "the storage it asks for is not available"
WAITING_WORDS = "Waiting for the storage of this server"


async def _events_of(kube, kind: str, name: str) -> list:
    selector = f"involvedObject.kind={kind},involvedObject.name={name}"
    return (await kube.core.list_namespaced_event(kube.namespace, field_selector=selector)).items


async def _wait_for_event(kube, kind: str, name: str, reason: str, timeout: float = 30) -> list:
    async def read() -> list:
        return await _events_of(kube, kind, name)

    events = await wait_until(
        read,
        until=lambda events: any(e.reason == reason for e in events),
        timeout=timeout,
        what=f"a {reason} event for {kind} {name}",
        seen=lambda events: sorted({e.reason for e in events}),
        interval=0.1,
    )
    return [e for e in events if e.reason == reason]


async def _start_and_follow(spawners, spawner) -> tuple[Exception | None, list[dict]]:
    """Start ``spawner`` and consume its ``progress()`` alongside, as JupyterHub's progress
    handler does; return (the exception the start ended with, every event progress yielded)."""
    start = asyncio.ensure_future(spawners.start(spawner))
    # JupyterHub opens the progress stream once the spawn is pending: after start() began.
    await asyncio.sleep(0)
    yielded: list[dict] = []

    async def follow() -> None:
        async for event in spawner.progress():
            yielded.append(event)

    follower = asyncio.ensure_future(follow())
    try:
        await start
        error: Exception | None = None
    except Exception as e:  # returned for the test to judge
        error = e
    # progress() ends by itself once the start future is done.
    await asyncio.wait_for(follower, timeout=30)
    return error, yielded


async def test_a_home_of_a_storage_class_that_does_not_exist_is_told_as_storage_to_fix(
    kube, spawners
):
    await kube.create_node("node-a", cpu="4")
    await kube.create_node("node-b", cpu="4")
    # KubeSpawner creates claim-alice with this class; no such StorageClass exists.
    lab = spawners.make(
        "alice", storage_class=MISSING_CLASS, unschedulable_grace_seconds=10, start_timeout=120
    )
    started = time.perf_counter()
    error, yielded = await _start_and_follow(spawners, lab)
    elapsed = time.perf_counter() - started

    # Ended by the verdict on the scheduler's event, not by start_timeout.
    assert isinstance(error, ColocationRefused), error
    verdict = error.event_verdict
    assert verdict is not None
    assert verdict.reason == "unschedulable"
    text = error.jupyterhub_message
    assert STORAGE_WORDS in text
    assert "Please tell your administrator." in text
    assert "smaller profile" not in text.lower()
    for event in yielded:
        shown = json.dumps(event).lower()
        assert "smaller profile" not in shown, event
        # While it waited, it waited for storage, not for a node.
        assert "waiting for a node" not in shown, event
    assert any(e.get("message") == WAITING_WORDS for e in yielded), yielded
    # The spawn page got the same words.
    told = [e for e in yielded if STORAGE_WORDS in (e.get("message") or "")]
    assert told, yielded

    # The real texts: the scheduler's, on the pod ...
    failed = await _wait_for_event(kube, "Pod", lab.pod_name, "FailedScheduling")
    scheduler_texts = sorted({e.message for e in failed})
    assert verdict.raw in scheduler_texts
    assert all("pod has unbound immediate PersistentVolumeClaims" in m for m in scheduler_texts)
    # ... and the PV controller's, on the claim: a missing class is provisioned at once (it is
    # not WaitForFirstConsumer), which fails.
    provisioning = await _wait_for_event(
        kube, "PersistentVolumeClaim", "claim-alice", "ProvisioningFailed"
    )
    claim_texts = sorted({e.message for e in provisioning})
    assert claim_texts == [f'storageclass.storage.k8s.io "{MISSING_CLASS}" not found']
    # KubeSpawner's event reflector never saw the claim's event.
    seen_kinds = {e["involvedObject"]["kind"] for e in lab.event_reflector.events}
    assert seen_kinds == {"Pod"}
    print(f"\nmissing class: refused {elapsed:.1f} s after the spawn request (grace 10 s)")
    print(f"real FailedScheduling: {scheduler_texts}")
    print(f"real ProvisioningFailed: {claim_texts}")
    print(f"words: {text}")


async def test_the_progress_stream_never_names_another_users_server_holding_the_volume(
    kube, spawners
):
    """bob's server (started by a hub not yet switched over) mounts alice's home on node-b after
    alice's decision and before her pod: the real attach/detach controller's event on alice's
    pod names bob's pod; neither the words nor any field of any event alice's progress stream
    yields may carry it."""
    from kubespawner import KubeSpawner

    await kube.create_node("node-a", cpu="4")
    await kube.create_node("node-b", cpu="4")
    await kube.create_bound_claim("claim-alice")
    bob = spawners.make(
        "bob",
        cls=KubeSpawner,
        storage_pvc_ensure=False,
        volumes=[{"name": "home", "persistentVolumeClaim": {"claimName": "claim-alice"}}],
        node_selector={"kubernetes.io/hostname": "node-b"},
        cpu_guarantee=3.5,
    )

    async def start_bobs_server_after_the_decision(spawner, pod):
        await spawners.start(bob)
        return pod

    # 1 CPU: node-b, with 0.5 left, cannot take alice's server, so it lands on node-a.
    lab = spawners.make(
        "alice", cpu_guarantee=1, modify_pod_hook=start_bobs_server_after_the_decision
    )
    error, yielded = await _start_and_follow(spawners, lab)

    assert isinstance(error, ColocationRefused), error
    verdict = error.event_verdict
    assert verdict is not None and verdict.reason == "multi-attach"
    # The real event names bob's pod ...
    assert verdict.raw == (
        f'Waiting for detach for volume "{home_pv(kube)}" Volume is already used by pod(s) '
        f"{bob.pod_name}"
    )
    assert verdict.other_servers == 1
    # ... and the stream carried that event, redacted.
    attach = [
        e for e in yielded if (e.get("raw_event") or {}).get("reason") == "FailedAttachVolume"
    ]
    assert attach, yielded
    assert "(another pod)" in attach[0]["raw_event"]["message"]
    for event in yielded:
        shown = json.dumps(event)  # what JupyterHub sends to the browser
        assert bob.pod_name not in shown, event
        assert "bob" not in shown, event
    for words in (error.jupyterhub_message, error.jupyterhub_html_message):
        assert "bob" not in words
    assert "1 server(s) of other users" in error.jupyterhub_message
    print(f"\nreal FailedAttachVolume on alice's pod: {verdict.raw}")
    print(f"as the browser gets it: {json.dumps(attach[0]['raw_event'])}")
    print(f"words: {error.jupyterhub_message}")
