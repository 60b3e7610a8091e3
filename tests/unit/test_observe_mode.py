"""Observe mode (``colocation_mode = "observe"``, docs/rollout.md): the spawner decides every
spawn as enforce does and changes nothing.  One table of decisions, each row spawned by two
ColocatingKubeSpawners, one per mode, on the same state (KubeSpawner builds the pod; the decision
is ``placement.decide``'s on the table's objects; no API server): enforce acts, observe returns
KubeSpawner's own manifest, byte for byte, and records and counts what enforce did."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace
from typing import Any, NamedTuple

import pytest
from kubespawner import KubeSpawner
from prometheus_client import REGISTRY

from nebari_colocate import helm, messages, observe_mode
from nebari_colocate.config import check_config
from nebari_colocate.event_verdict import EventVerdict
from nebari_colocate.history import the_history
from nebari_colocate.jupyterhub import ColocationRefused
from nebari_colocate.placement import Decision, decide
from nebari_colocate.spawner import ColocatingKubeSpawner
from tests.support.builders import (
    NAMESPACE,
    gpu_node,
    node,
    pod,
    pvc,
    taint,
    volume_attachment,
)
from tests.support.builders import state as state_of

from .test_spawner_config import make, offline_kubeconfig  # noqa: F401 (the fixture)

HOME = "claim-alice"
USER = "mock@name"  # KubeSpawner's mock user
KEY = "nebari.dev/colocate-user"
HOME_VOLUME = {"volumes": [{"name": "home", "persistentVolumeClaim": {"claimName": HOME}}]}
GPU = {"extra_resource_limits": {"nvidia.com/gpu": "1"}, "node_selector": {"pool": "gpu"}}
#: data-science-pack's 01-spawner.py: every pod labelled, a hard pod affinity on that label
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


def lab(node_name: str = "cpu-1", name: str = "jupyter-mock-lab", **kwargs: Any) -> dict:
    """The user's running server ``name``, holding the home on ``node_name``."""
    return pod(name, node_name=node_name, phase="Running", claims=[HOME], **kwargs)


class Row(NamedTuple):
    name: str
    traits: dict[str, Any]
    objects: list[dict]
    expect_would: str
    expect_codes: tuple[str, ...] = ()  # reasons of a refusal, warnings of a placement


ROWS = [
    Row("ReadWriteMany home: skip", HOME_VOLUME, [pvc(HOME, modes=["ReadWriteMany"])], "skip"),
    Row("nothing holds the home: co-locate anywhere", HOME_VOLUME, [node(), pvc(HOME)], "colocate"),
    Row("the lab holds it: pin to its node", HOME_VOLUME, [node(), pvc(HOME), lab()], "pin"),
    Row(
        "a detach under way pins to the attached node",
        HOME_VOLUME,
        [node(), pvc(HOME), volume_attachment(f"pv-{HOME}", "cpu-1")],
        "pin",
    ),
    Row(
        "a GPU profile on the lab's CPU node: refuse",
        {**HOME_VOLUME, **GPU},
        [node(), pvc(HOME), lab()],
        "refuse",
        ("insufficient:nvidia.com/gpu", "node-selector"),
    ),
    Row(
        "a tainted pinned node: refuse",
        HOME_VOLUME,
        [node("ml-1", taints=[taint("dedicated", "ml")]), pvc(HOME), lab("ml-1")],
        "refuse",
        ("taint",),
    ),
    Row(
        "a CPU app on the GPU lab's node, policy warn: pin, with the warning",
        HOME_VOLUME,
        [gpu_node(), pvc(HOME), lab("gpu-1", limits={"nvidia.com/gpu": "1"})],
        "pin",
        ("premium-node",),
    ),
    Row(
        "a CPU app on the GPU lab's node, policy refuse: refuse",
        {**HOME_VOLUME, "premium_node_policy": "refuse"},
        [gpu_node(), pvc(HOME), lab("gpu-1", limits={"nvidia.com/gpu": "1"})],
        "refuse",
        ("premium-node",),
    ),
    Row(
        "a ReadWriteOncePod home in use: refuse",
        HOME_VOLUME,
        [node(), pvc(HOME, modes=["ReadWriteOncePod"]), lab()],
        "refuse",
        ("claim-in-use",),
    ),
    Row(
        "the home on two nodes already: refuse",
        HOME_VOLUME,
        [node(), node("cpu-2"), pvc(HOME), lab(), lab("cpu-2", name="jupyter-mock-app")],
        "refuse",
        ("split-attachment",),
    ),
    Row(
        "data-science-pack's hand-written affinity, pinned",
        {**HOME_VOLUME, **DSP_AFFINITY},
        [node(), pvc(HOME), lab()],
        "pin",
    ),
    Row(
        "data-science-pack's hand-written affinity, refused",
        {**HOME_VOLUME, **DSP_AFFINITY, **GPU},
        [node(), pvc(HOME), lab()],
        "refuse",
        ("insufficient:nvidia.com/gpu", "node-selector"),
    ),
]


def _decisions(spawner: ColocatingKubeSpawner, objects: list[dict]) -> list[Decision]:
    """Make ``spawner`` decide on ``objects`` (its pod in the table's namespace); returns the list
    its decisions go into."""
    taken: list[Decision] = []
    cluster = state_of(*objects)

    async def colocation_decide(pod: dict, *, admit_later: bool = False) -> Decision:
        placed = {**pod, "metadata": {**pod["metadata"], "namespace": NAMESPACE}}
        decision = decide(placed, cluster, spawner.colocation_policy())
        taken.append(decision)
        return spawner._decided(decision, 0.001, 0.0, 0.0, safe=False)

    spawner.colocation_decide = colocation_decide  # type: ignore[method-assign]
    return taken


async def _manifest(spawner: ColocatingKubeSpawner) -> tuple[dict | None, Exception | None]:
    try:
        placed = await spawner.get_pod_manifest()
    except ColocationRefused as refused:
        return None, refused
    finally:
        task = spawner._colocation_release_task
        if task is not None:
            task.cancel()
        spawner._release_colocation_lock()
    return spawner.api.api_client.sanitize_for_serialization(placed), None


def _count(verdict: str, mode: str) -> float:
    labels = {"verdict": verdict, "mode": mode}
    return REGISTRY.get_sample_value("nebari_colocate_decisions_total", labels) or 0.0


def test_the_table_has_every_verdict_and_both_ways_of_refusing():
    assert {row.expect_would for row in ROWS} == {"skip", "colocate", "pin", "refuse"}


@pytest.mark.parametrize("row", ROWS, ids=[row.name for row in ROWS])
async def test_observe_decides_as_enforce_and_changes_nothing_in_the_manifest(row, caplog):
    enforce = make(**row.traits)
    enforced = _decisions(enforce, row.objects)
    enforce_manifest, refused = await _manifest(enforce)

    observe = make(**row.traits, colocation_mode="observe")
    observed = _decisions(observe, row.objects)
    stock = observe.api.api_client.sanitize_for_serialization(
        await KubeSpawner.get_pod_manifest(observe)
    )
    observe_mode.clear()
    before = _count(enforced[0].verdict, "observe")
    before_history = len([r for r in the_history().refusals if r.mode == "observe"])
    observe.log = logging.getLogger("test_observe_mode")
    with caplog.at_level(logging.INFO, logger="test_observe_mode"):
        observe_manifest, observe_refused = await _manifest(observe)

    # enforce acted on its decision: it refused, or it changed the manifest
    assert (refused is not None) == (row.expect_would == "refuse"), row.name
    assert refused is not None or enforce_manifest != stock
    # observe took the same decision, refused nothing and sent KubeSpawner's manifest as it is
    assert observed == enforced
    assert observe_refused is None
    assert observe_manifest == stock, "observe changes nothing in the manifest"
    # ... and said what enforce did: the record, the metric and the hub log
    (record,) = observe_mode.observed()
    decision = enforced[0]
    assert record.would == row.expect_would
    assert (record.verdict, record.node) == (decision.verdict, decision.node)
    codes = record.reasons if row.expect_would == "refuse" else record.warnings
    assert codes == tuple(sorted(row.expect_codes))
    assert record.mode == "observe" and record.username == USER
    assert _count(decision.verdict, "observe") == before + 1
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("observe: ")]
    assert len(said) == 1, said
    would_refuse = [r for r in the_history().refusals if r.mode == "observe"]
    assert len(would_refuse) == before_history + (refused is not None)
    if refused is not None:
        assert would_refuse[-1].message == refused.jupyterhub_message
        assert would_refuse[-1].reasons == tuple(decision.reasons)
        assert record.message == refused.jupyterhub_message
        assert said[0].startswith(f"observe: would refuse {USER}'s default server: ")
        assert refused.jupyterhub_message in said[0]
    if row.expect_would == "pin":
        assert f"would pin {USER}'s default server to node {decision.node}" in said[0]


def test_a_record_is_plain_json_and_the_ring_is_bounded():
    observe_mode.clear()
    base = observe_mode.Observation(
        at=1.0,
        username="alice",
        server_name="gpu-lab",
        would="refuse",
        verdict="refuse",
        node="cpu-1",
        reasons=("node-selector",),
        warnings=(),
        message="words",
        operator_line="colocate verdict=refuse",
    )
    for i in range(observe_mode.OBSERVATION_RING + 5):
        observe_mode.record(_at(base, float(i)))
    kept = observe_mode.observed()
    assert len(kept) == observe_mode.OBSERVATION_RING
    assert kept[0].at == 5.0 and kept[-1].at == observe_mode.OBSERVATION_RING + 4
    assert len(observe_mode.observed(since=observe_mode.OBSERVATION_RING + 3)) == 2
    assert kept[0].as_json()["reasons"] == ["node-selector"]
    assert kept[0].as_json()["mode"] == "observe"
    observe_mode.clear()


def _at(observation: observe_mode.Observation, at: float) -> observe_mode.Observation:
    from dataclasses import replace

    return replace(observation, at=at)


async def test_observe_lets_a_hopeless_spawn_wait_and_records_what_enforce_would_end(
    monkeypatch, caplog
):
    spawner = make(colocation_mode="observe")
    spawner.log = logging.getLogger("test_observe_mode")
    spawner._colocation_decision = Decision("colocate", node="cpu-1")
    verdict = EventVerdict("fail", "unschedulable-pinned", raw="0/3 nodes are available")
    watched = []

    async def watch_events(spawner: Any, start: asyncio.Future) -> EventVerdict:
        watched.append(spawner)
        return verdict

    monkeypatch.setattr(observe_mode, "watch_events", watch_events)
    observe_mode.clear()
    release = asyncio.Event()

    async def kubespawner_start() -> str:
        await release.wait()  # still waiting when the verdict comes
        return "http://127.0.0.1:8888"

    with caplog.at_level(logging.INFO, logger="test_observe_mode"):
        started = asyncio.ensure_future(observe_mode.start(spawner, kubespawner_start()))
        await asyncio.sleep(0.05)
        assert not started.done(), "observe ends nothing"
        release.set()
        assert await started == "http://127.0.0.1:8888"
    assert watched == [spawner]
    (record,) = observe_mode.observed()
    assert (record.would, record.verdict, record.node) == ("end", "unschedulable-pinned", "cpu-1")
    latest = the_history().refusals[-1]
    assert (latest.mode, latest.source, latest.reasons) == ("observe", "events", record.reasons)
    assert record.message
    said = [r.getMessage() for r in caplog.records]
    assert any(s.startswith(f"observe: would end {USER}'s default server now") for s in said)


@pytest.mark.parametrize("value", ["dryrun", "Audit", "", 1])
def test_a_bad_colocation_mode_stops_the_hub_naming_the_setting_and_the_choices(value):
    with pytest.raises(Exception, match=r"colocation_mode .* choose one of enforce, observe"):
        check_config({"ColocatingKubeSpawner": {"colocation_mode": value}})


def test_the_mode_is_caseless_and_enforce_by_default():
    assert ColocatingKubeSpawner.class_traits()["colocation_mode"].default() == "enforce"
    check_config({"ColocatingKubeSpawner": {"colocation_mode": "OBSERVE"}})


def _dsp_config(mode: str | None) -> Any:
    from traitlets.config import Config

    c = Config()
    c.KubeSpawner.extra_pod_config = DSP_AFFINITY["extra_pod_config"]
    custom = {} if mode is None else {"colocate-mode": mode}
    helm.configure(c, get_config=lambda key, default=None: custom if key == "custom" else default)
    return c


def test_configure_in_observe_mode_leaves_the_hand_written_affinity_in_place():
    observed = _dsp_config("observe")
    assert observed.KubeSpawner.extra_pod_config == DSP_AFFINITY["extra_pod_config"]
    assert observed.ColocatingKubeSpawner.colocation_mode == "observe"
    enforced = _dsp_config(None)
    assert "affinity" not in enforced.KubeSpawner.extra_pod_config


def test_a_bad_helm_mode_names_the_setting():
    with pytest.raises(Exception, match="colocation_mode 'audit' is not valid"):
        _dsp_config("audit")


def test_the_hub_log_words_name_what_enforce_would_do():
    pinned = Decision("colocate", node="cpu-1")
    line = messages.observed_decision_line(
        pinned, username="alice", server_name="gpu-lab", message="", operator_line="op"
    )
    assert line == "observe: would pin alice's 'gpu-lab' to node cpu-1 [op]"
    refused = Decision("refuse", node="cpu-1", reasons=["node-selector"])
    line = messages.observed_decision_line(
        refused, username="alice", server_name="gpu-lab", message="Words.", operator_line="op"
    )
    assert line == "observe: would refuse alice's 'gpu-lab': Words. [op]"


@pytest.mark.parametrize("mode, expect_rides", [("enforce", 1), ("observe", 0)])
async def test_observe_offers_no_move_off_a_premium_node(mode, expect_rides):
    """The home page's notice and the move off a premium node read ``premium_rides``: an
    action the user would take on the library's word, which observe mode does not offer."""
    spawner = make(colocation_mode=mode)
    app = pod(
        "jupyter-mock-app",
        node_name="gpu-1",
        phase="Running",
        claims=[HOME],
        user=USER,
        server="app",
        labels={KEY: spawner.colocation_label_value},
    )
    view = SimpleNamespace(
        nodes_by_name=lambda: {"gpu-1": gpu_node()}, namespace_pods=lambda: [app]
    )
    spawner._live_view = lambda: view  # type: ignore[method-assign]
    assert len(spawner.premium_rides()) == expect_rides
