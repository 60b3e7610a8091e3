"""The pod ``get_pod_manifest`` returns: KubeSpawner's own V1Pod given the co-location labels and
affinity in place (``ColocatingKubeSpawner._placed``), which must serialise to exactly the
manifest ``apply_decision`` (and ``avoid_nodes``) made of it, as the whole-pod JSON round trip it
replaces did (that one gave a ``modify_pod_hook`` a V1Pod of deserialised models; now it gets
KubeSpawner's own, as with KubeSpawner).  A table of profiles and decisions; KubeSpawner builds
the V1Pod, no API server."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from kubespawner import KubeSpawner

from nebari_colocate.affinity import apply_decision, avoid_nodes, colocation_term
from nebari_colocate.placement import Decision

from .test_spawner_config import make, offline_kubeconfig  # noqa: F401 (the fixture)

KEY = "nebari.dev/colocate-user"
GPU_AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["gpu"]}]}
            ]
        }
    }
}
HAND_WRITTEN = {
    "podAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [colocation_term(KEY, "alice")]
    }
}
SPREAD = {
    "podAntiAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {
                "weight": 10,
                "podAffinityTerm": {
                    "topologyKey": "kubernetes.io/hostname",
                    "labelSelector": {"matchLabels": {"app": "jupyterhub"}},
                },
            }
        ]
    }
}
MOVE_OFF = [("gpu-1", "gpu-1", None), ("kp-1", "kp-1", "gpu-pool")]


@pytest.mark.parametrize(
    "name, traits, decision, move_off",
    [
        ("no exclusive claim: the label only", {}, Decision("skip"), None),
        ("co-located, not pinned", {}, Decision("colocate"), None),
        ("pinned to the node", {}, Decision("colocate", node="cpu-1"), None),
        (
            "a profile's node affinity, pinned",
            {
                "node_affinity_required": GPU_AFFINITY["nodeAffinity"][
                    "requiredDuringSchedulingIgnoredDuringExecution"
                ]["nodeSelectorTerms"]
            },
            Decision("colocate", node="gpu-1"),
            None,
        ),
        (
            "a hand-written co-location term is dropped, a skip removes the affinity",
            {
                "pod_affinity_required": HAND_WRITTEN["podAffinity"][
                    "requiredDuringSchedulingIgnoredDuringExecution"
                ]
            },
            Decision("skip"),
            None,
        ),
        (
            "another affinity is kept beside ours",
            {
                "pod_anti_affinity_preferred": SPREAD["podAntiAffinity"][
                    "preferredDuringSchedulingIgnoredDuringExecution"
                ]
            },
            Decision("colocate", node="cpu-1"),
            None,
        ),
        (
            "labels of the profile are kept",
            {"extra_labels": {"team": "data", "hub.jupyter.org/network-access-hub": "true"}},
            Decision("colocate"),
            None,
        ),
        ("the move off a premium node", {}, Decision("colocate"), MOVE_OFF),
    ],
)
async def test_the_placed_pod_is_the_manifest_as_the_round_trip_made_it(
    name, traits, decision, move_off
):
    spawner = make(**traits)
    written = await KubeSpawner.get_pod_manifest(spawner)
    client = spawner.api.api_client
    pod = client.sanitize_for_serialization(written)
    manifest = apply_decision(pod, decision, KEY, "alice")
    if move_off:
        manifest = avoid_nodes(manifest, move_off)
    round_trip = client.deserialize(SimpleNamespace(data=json.dumps(manifest)), "V1Pod")
    placed = spawner._placed(written, manifest)
    assert placed is written, "KubeSpawner's own V1Pod, changed in place"
    assert client.sanitize_for_serialization(placed) == manifest, name
    # what the API server is sent is what the round trip sent; a modify_pod_hook gets
    # KubeSpawner's own V1Pod, as with KubeSpawner
    assert client.sanitize_for_serialization(round_trip) == manifest, name
