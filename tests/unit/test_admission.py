"""A pinned pod's dry run reused for pods of the same shape (nebari_colocate.admission): which pods
share a shape, what is taken from the admitted pod, and the dry runs in flight and kept.  Plain
dicts; the dry run against the real kube-apiserver is in tests/cluster/test_spawner_cluster.py."""

from __future__ import annotations

import asyncio
import copy
import time

import pytest

from nebari_colocate.admission import (
    FIELDS,
    AdmissionModels,
    as_admitted,
    model_from_created,
    model_of,
    shape_key,
)
from nebari_colocate.affinity import apply_decision
from nebari_colocate.placement import COLOCATE, Decision, Policy, decide
from nebari_colocate.slim import slim_pod
from tests.support import builders


def server(user: str, **spec) -> dict:
    """A user's server pod as KubeSpawner writes it: per-user name, labels, env and claim."""
    pod = builders.pod(
        f"jupyter-{user}", claims=[f"claim-{user}"], user=user, requests={"cpu": "2"}
    )
    pod["spec"]["containers"][0]["env"] = [{"name": "JUPYTERHUB_USER", "value": user}]
    pod["spec"].update(spec)
    return pod


def with_container(pod: dict, **fields) -> dict:
    out = copy.deepcopy(pod)
    out["spec"]["containers"][0].update(fields)
    return out


@pytest.mark.parametrize(
    "name, a, b, same",
    [
        ("two users of one profile", server("alice"), server("bob"), True),
        (
            "another namespace",
            server("alice"),
            {**server("bob"), "metadata": {"namespace": "x"}},
            False,
        ),
        (
            "another image",
            server("alice"),
            with_container(server("bob"), image="quay.io/jupyter/scipy-notebook"),
            False,
        ),
        (
            "other resources",
            server("alice"),
            with_container(server("bob"), resources={"requests": {"cpu": "3"}}),
            False,
        ),
        ("a node selector", server("alice"), server("bob", nodeSelector={"gpu": "yes"}), False),
        ("a RuntimeClass", server("alice"), server("bob", runtimeClassName="gvisor"), False),
        ("a priority class", server("alice"), server("bob", priorityClassName="hi"), False),
        ("a service account", server("alice"), server("bob", serviceAccountName="sa"), False),
        (
            "tolerations",
            server("alice"),
            server("bob", tolerations=[{"key": "gpu", "operator": "Exists"}]),
            False,
        ),
        (
            "labels, annotations, env and claims do not count",
            server("alice"),
            with_container(server("carol"), env=[{"name": "X", "value": "y"}]),
            True,
        ),
    ],
)
def test_pods_share_a_shape_when_all_that_admission_may_read_for_the_fit_is_the_same(
    name, a, b, same
):
    assert (shape_key(a) == shape_key(b)) is same, name


def admitted_of(pod: dict) -> dict:
    """What a LimitRange, a RuntimeClass and DefaultTolerationSeconds make of ``pod``."""
    out = copy.deepcopy(pod)
    spec = out["spec"]
    spec["containers"][0]["resources"] = {
        "requests": {"cpu": "2", "memory": "4Gi"},
        "limits": {"cpu": "2", "memory": "4Gi"},
    }
    spec["overhead"] = {"cpu": "250m", "memory": "120Mi"}
    spec["tolerations"] = [
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}
    ]
    spec["priority"] = 0
    spec["schedulerName"] = "default-scheduler"
    return out


def test_another_pods_admitted_fields_are_put_on_this_pod_and_its_own_stay():
    alice, bob = server("alice"), server("bob")
    model = model_of(admitted_of(alice))
    got = as_admitted(bob, model)
    assert got["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "2", "memory": "4Gi"}
    assert got["spec"]["overhead"] == {"cpu": "250m", "memory": "120Mi"}
    assert got["spec"]["priority"] == 0
    # bob's own: name, labels, env, claims
    assert got["metadata"] == bob["metadata"]
    assert got["spec"]["volumes"] == bob["spec"]["volumes"]
    assert got["spec"]["containers"][0]["env"] == bob["spec"]["containers"][0]["env"]
    assert bob["spec"].get("overhead") is None  # the pod given is not changed
    assert got == {**admitted_of(bob)}  # as bob's own dry run would have admitted it


def test_a_field_admission_removed_is_removed():
    alice = server("alice", nodeSelector={"old": "x"})
    admitted = copy.deepcopy(alice)
    del admitted["spec"]["nodeSelector"]
    got = as_admitted(server("bob", nodeSelector={"old": "x"}), model_of(admitted))
    assert "nodeSelector" not in got["spec"]


def test_the_decision_on_the_reused_model_is_the_decision_on_the_pods_own_admission():
    """A pinned check on bob's pod: the fit with another user's admitted fields is the fit of
    bob's own admitted pod (the node has room for the pod, not for its RuntimeClass overhead)."""
    node = builders.node("n1", allocatable={"cpu": "4100m", "memory": "8Gi"})
    app = builders.pod(
        "jupyter-bob-app", node_name="n1", claims=["claim-bob"], user="bob", requests={"cpu": "2"}
    )
    app["status"] = {"phase": "Running"}
    state = builders.state(node, app, builders.pvc("claim-bob"), builders.pv("pv-bob"))
    bob = server("bob")
    own = decide(admitted_of(bob), state, Policy())
    reused = decide(as_admitted(bob, model_of(admitted_of(server("alice")))), state, Policy())
    assert (reused.verdict, reused.reasons, reused.node) == (own.verdict, own.reasons, own.node)
    raw = decide(bob, state, Policy())
    assert (raw.verdict, raw.reasons) != (own.verdict, own.reasons), "the overhead made no change"


async def test_checks_that_ask_at_once_wait_for_the_one_dry_run_in_flight():
    models = AdmissionModels()
    key = shape_key(server("alice"))
    assert models.model(key, 600) is None and models.pending(key) is None
    future = models.begin(key)
    assert models.pending(key) is future
    waiter = asyncio.ensure_future(asyncio.shield(future))
    await asyncio.sleep(0)
    models.end(key, future, admitted_of(server("alice")))
    assert (await waiter)["spec"]["overhead"] == {"cpu": "250m", "memory": "120Mi"}
    assert models.pending(key) is None
    assert models.model(key, 600) is not None and models.made == 1


async def test_a_refused_or_failed_dry_run_is_not_kept_and_its_waiters_make_their_own():
    models = AdmissionModels()
    key = shape_key(server("alice"))
    future = models.begin(key)
    models.end(key, future, None)
    assert future.result() is None
    assert models.model(key, 600) is None and models.pending(key) is None


async def test_a_model_older_than_reuse_seconds_is_dropped():
    models = AdmissionModels()
    key = shape_key(server("alice"))
    models.end(key, models.begin(key), admitted_of(server("alice")))
    assert models.model(key, 600) is not None
    assert models.model(key, 600, now=time.monotonic() + 10**9) is None
    assert models.model(key, 600) is None  # dropped


async def test_the_shapes_kept_are_bounded_oldest_dropped_first():
    models = AdmissionModels(max_shapes=2)
    keys = [shape_key(server("a", nodeSelector={"n": str(i)})) for i in range(3)]
    for key in keys:
        models.end(key, models.begin(key), admitted_of(server("a")))
    assert [models.model(k, 600) is not None for k in keys] == [False, True, True]


# ---------------------------------------------------------------------------------------------
# a created pod teaches its shape (model_from_created, AdmissionModels.learn)

LABEL = "hub.jupyter.org/username"
WRITTEN_AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["cpu"]}]}
            ]
        }
    }
}


def sent_of(written: dict, node: str | None = None) -> dict:
    """``written`` as the spawner sends it: labelled, with the co-location affinity."""
    decision = Decision(verdict=COLOCATE, node=node, claims=["claim-alice"])
    return apply_decision(written, decision, LABEL, "alice")


@pytest.mark.parametrize("affinity", [None, WRITTEN_AFFINITY], ids=["no affinity", "affinity"])
@pytest.mark.parametrize("node", [None, "n1"], ids=["first server", "pinned"])
def test_a_created_pod_teaches_what_a_dry_run_of_the_pod_as_written_would(affinity, node):
    extra = {"affinity": copy.deepcopy(affinity)} if affinity else {}
    written = server("alice", **extra)
    sent = sent_of(written, node)
    assert sent["spec"]["affinity"] != written["spec"].get("affinity")  # what was merged in
    created = slim_pod(admitted_of(sent))  # as the watch keeps it
    model = model_from_created(created, written, sent)
    assert model is not None
    bob = server("bob", **copy.deepcopy(extra))
    assert as_admitted(bob, model) == admitted_of(bob)
    assert as_admitted(bob, model) == as_admitted(bob, model_of(admitted_of(written)))


def test_a_created_pod_whose_affinity_admission_changed_teaches_nothing():
    written = server("alice")
    sent = sent_of(written)
    created = admitted_of(sent)
    created["spec"]["affinity"]["nodeAffinity"] = WRITTEN_AFFINITY["nodeAffinity"]  # a webhook
    assert model_from_created(created, written, sent) is None
    del created["spec"]["affinity"]  # a webhook took it all out
    assert model_from_created(created, written, sent) is None


def test_the_watch_keeps_every_field_a_model_takes():
    """slim_pod keeps each of admission.FIELDS and each container's resources and
    restartPolicy: a model from a watched pod misses none."""
    pod = server("alice")
    values = {
        "affinity": WRITTEN_AFFINITY,
        "nodeSelector": {"pool": "cpu"},
        "tolerations": [{"key": "gpu", "operator": "Exists"}],
        "overhead": {"cpu": "250m"},
        "resources": {"requests": {"cpu": "1"}},
        "runtimeClassName": "kata",
        "priority": 1000,
        "priorityClassName": "hi",
        "preemptionPolicy": "Never",
        "schedulerName": "default-scheduler",
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone"}],
    }
    assert set(values) == set(FIELDS)
    pod["spec"].update(copy.deepcopy(values))
    pod["spec"]["initContainers"] = [{"name": "sidecar", "image": "x", "restartPolicy": "Always"}]
    assert model_of(slim_pod(pod)) == model_of(pod)


async def test_a_learnt_model_is_kept_only_where_none_is_fresh_and_no_dry_run_is_in_flight():
    models = AdmissionModels()
    written = server("alice")
    key = shape_key(written)
    learnt = model_from_created(admitted_of(sent_of(written)), written, sent_of(written))
    assert learnt is not None
    future = models.begin(key)
    assert not models.wanted(key, 600)
    assert models.learn(key, learnt, 600) is False  # the dry run in flight will answer
    models.end(key, future, admitted_of(written))
    assert not models.wanted(key, 600)
    assert models.learn(key, learnt, 600) is False and models.learned == 0
    other = shape_key(server("alice", nodeSelector={"pool": "gpu"}))
    assert models.wanted(other, 600)
    assert models.learn(other, learnt, 600) is True
    assert (models.learned, models.made) == (1, 1)
    assert models.model(other, 600) == learnt
    assert models.wanted(other, 0)  # older than a reuse of 0 s
