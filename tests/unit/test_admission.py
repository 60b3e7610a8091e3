"""A pinned pod's dry run reused for pods of the same shape (nebari_colocate.admission): which pods
share a shape, what is taken from the admitted pod, and the dry runs in flight and kept.  Plain
dicts; the dry run against the real kube-apiserver is in tests/cluster/test_spawner_cluster.py."""

from __future__ import annotations

import asyncio
import copy
import time

import pytest

from nebari_colocate.admission import AdmissionModels, as_admitted, model_of, shape_key
from nebari_colocate.placement import Policy, decide
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
