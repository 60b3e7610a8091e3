"""Observe mode on the real kube-apiserver and kube-scheduler: a hub that keeps data-science-pack's
hand-written hard pod affinity and runs ColocatingKubeSpawner with ``colocation_mode =
"observe"`` spawns exactly as stock KubeSpawner does (the same pod, the same wait until
``start_timeout``), while its metrics and its hub log say what enforce would have done (refuse
the GPU lab at once, and end it on the scheduler's first word).

The ``kube`` fixture's teardown checks the invariant: no two pods that mount the same exclusive
claim are bound to different nodes.
"""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from kubespawner import KubeSpawner

from nebari_colocate import observe_mode

from .test_spawner_cluster import GPU_PROFILE, cpu_and_gpu_nodes, metric, pod_of

KEY = "nebari.dev/colocate-user"
#: data-science-pack's 01-spawner.py, as it writes it: the label and the hard pod affinity
DSP_AFFINITY = {
    "extra_labels": {KEY: "{username}"},
    "extra_pod_config": {
        "affinity": {
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {
                            "matchExpressions": [
                                {"key": KEY, "operator": "In", "values": ["{username}"]}
                            ]
                        },
                        "topologyKey": "kubernetes.io/hostname",
                    }
                ]
            }
        }
    },
}
PLACEMENT = ("affinity", "nodeSelector", "tolerations")


#: what kube-apiserver's DefaultTolerationSeconds admission adds to every pod it creates
ADMITTED = {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}


def _placement(pod: dict) -> dict:
    """What decides where a pod goes, and the labels its peers' affinity reads (without what
    admission added to the pod the API server holds)."""
    spec = pod["spec"]
    placement = {key: spec.get(key) for key in PLACEMENT}
    placement["tolerations"] = [
        t for t in spec.get("tolerations") or [] if t.get("key") not in ADMITTED
    ]
    return {"labels": pod["metadata"].get("labels"), **placement}


def _observe_lines(records: list[logging.LogRecord]) -> list[str]:
    return [r.getMessage() for r in records if r.getMessage().startswith("observe: ")]


async def test_observe_mode_spawns_as_stock_and_says_what_enforce_would_have_done(
    kube, spawners, caplog
):
    await cpu_and_gpu_nodes(kube)
    await kube.create_bound_claim("claim-alice")
    observe_mode.clear()
    refused_before = metric("nebari_colocate_decisions_total", verdict="refuse", mode="observe")
    enforced_before = metric("nebari_colocate_decisions_total", verdict="refuse", mode="enforce")
    gpu_before = metric(
        "nebari_colocate_decision_reasons_total",
        verdict="refuse",
        kind="reason",
        reason="insufficient:nvidia.com/gpu",
        mode="observe",
    )

    app = spawners.make("alice", "app", colocation_mode="observe", **DSP_AFFINITY)
    with caplog.at_level(logging.INFO):
        await spawners.start(app)
        app_pod = await pod_of(kube, app)
        assert app_pod["spec"]["nodeName"] == "cpu-1"

        # the GPU lab: stock KubeSpawner's pod, pinned to cpu-1 by the hand-written affinity,
        # waits out start_timeout; enforce would have refused it before creating anything
        lab = spawners.make(
            "alice",
            "gpu-lab",
            colocation_mode="observe",
            start_timeout=8,
            **DSP_AFFINITY,
            **GPU_PROFILE,
        )
        began = time.time()
        with pytest.raises(asyncio.TimeoutError):  # not ColocationRefused: nothing refused
            await spawners.start(lab)
        waited = time.time() - began
    lab_pod = await pod_of(kube, lab)

    # exactly the pod stock KubeSpawner sends: the hand-written affinity kept, nothing of ours
    stock = spawners.make("alice", "gpu-lab", cls=KubeSpawner, **DSP_AFFINITY, **GPU_PROFILE)
    stock_pod = kube.api_client.sanitize_for_serialization(await stock.get_pod_manifest())
    assert _placement(lab_pod) == _placement(stock_pod)
    hand_written = [
        {
            "labelSelector": {
                "matchExpressions": [{"key": KEY, "operator": "In", "values": ["alice"]}]
            },
            "topologyKey": "kubernetes.io/hostname",
        }
    ]  # KubeSpawner expanded {username}
    assert lab_pod["spec"]["affinity"] == {
        "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": hand_written}
    }
    assert lab_pod["spec"].get("nodeName") is None, "Pending, as with stock KubeSpawner"
    stock_app = spawners.make("alice", "app", cls=KubeSpawner, **DSP_AFFINITY)
    stock_app_pod = kube.api_client.sanitize_for_serialization(await stock_app.get_pod_manifest())
    assert _placement(app_pod) == _placement(stock_app_pod)

    # what enforce would have done: counted with mode="observe", said in the hub log, recorded
    assert metric("nebari_colocate_decisions_total", verdict="refuse", mode="observe") == (
        refused_before + 1
    )
    assert metric(
        "nebari_colocate_decision_reasons_total",
        verdict="refuse",
        kind="reason",
        reason="insufficient:nvidia.com/gpu",
        mode="observe",
    ) == (gpu_before + 1)
    assert metric("nebari_colocate_decisions_total", verdict="refuse", mode="enforce") == (
        enforced_before
    )
    said = _observe_lines(caplog.records)
    assert any(line.startswith("observe: would co-locate alice's 'app'") for line in said), said
    refusal = [line for line in said if line.startswith("observe: would refuse alice's 'gpu-lab'")]
    assert len(refusal) == 1, said
    assert "node-selector" in refusal[0] and "cpu-1" in refusal[0]
    ended = [line for line in said if line.startswith("observe: would end alice's 'gpu-lab' now")]
    assert len(ended) == 1, said
    would = {(o.server_name, o.would) for o in observe_mode.observed()}
    assert would == {("app", "colocate"), ("gpu-lab", "refuse"), ("gpu-lab", "end")}
    (refused,) = [o for o in observe_mode.observed() if o.would == "refuse"]
    (end,) = [o for o in observe_mode.observed() if o.would == "end"]
    print(
        f"observe: the GPU lab waited {waited:.1f} s as stock (start_timeout 8 s); enforce would "
        f"have refused it after {refused.at - began:.2f} s, and fail fast would have ended it "
        f"after {end.at - began:.2f} s"
    )
    assert refused.node == "cpu-1" and "insufficient:nvidia.com/gpu" in refused.reasons
    assert "JupyterLab" in refused.message or "app" in refused.message  # what blocks it
