"""What zero-to-jupyterhub puts on a cluster for scheduling, as its chart renders it.

- ``scheduling.podPriority.enabled: true``: three PriorityClasses (``<release>-default-priority``
  0 for user pods, ``<release>-image-puller-priority`` -5, ``<release>-user-placeholder-priority``
  -10; none is the cluster's global default) and ``c.KubeSpawner.priority_class_name`` set to
  the first (:data:`USER_POD_TRAITS`);
- ``scheduling.userPlaceholder``: a StatefulSet of pause pods at -10 with
  ``terminationGracePeriodSeconds: 0`` and the user pods' resources, and a PDB with
  ``minAvailable: 0`` (:func:`placeholder_statefulset`, :func:`placeholder_pdb`; the test control
  plane runs no StatefulSet controller unless a test starts one, so most tests create its pods
  themselves, with the template's spec: :func:`placeholder`);
- ``scheduling.userScheduler.enabled: true``: a second kube-scheduler whose one profile
  re-weights scoring (:data:`USER_SCHEDULER_PROFILE`, from the chart's ``values.yaml``), and
  ``c.KubeSpawner.scheduler_name`` set to it.

Read from the chart (jupyterhub/zero-to-jupyterhub-k8s ``jupyterhub/values.yaml``,
``templates/scheduling/priorityclass.yaml``, ``user-placeholder/statefulset.yaml`` and
``pdb.yaml``, ``_helpers.tpl``'s labels); nothing copied but the values.
"""

from __future__ import annotations

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from tests.support.helpers import api_client_of
from tests.support.waiting import wait_until

RELEASE = "jhub"
DEFAULT_PRIORITY = f"{RELEASE}-default-priority"
IMAGE_PULLER_PRIORITY = f"{RELEASE}-image-puller-priority"
PLACEHOLDER_PRIORITY = f"{RELEASE}-user-placeholder-priority"
PRIORITY_CLASSES = {DEFAULT_PRIORITY: 0, IMAGE_PULLER_PRIORITY: -5, PLACEHOLDER_PRIORITY: -10}
USER_SCHEDULER = f"{RELEASE}-user-scheduler"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
#: the chart's user-placeholder StatefulSet, its Service and its PDB (``fullnameOverride: ""``)
PLACEHOLDER_NAME = "user-placeholder"
#: ``jupyterhub.matchLabels``: the StatefulSet's and the PDB's selector
PLACEHOLDER_MATCH_LABELS = {
    "component": "user-placeholder",
    "app": "jupyterhub",
    "release": RELEASE,
}
#: ``jupyterhub.matchLabelsLegacyAndModern``: the labels of the placeholder pods
PLACEHOLDER_POD_LABELS = {
    **PLACEHOLDER_MATCH_LABELS,
    "app.kubernetes.io/component": "user-placeholder",
    "app.kubernetes.io/name": "jupyterhub",
    "app.kubernetes.io/instance": RELEASE,
}

#: the KubeSpawner traits the chart sets with podPriority on
USER_POD_TRAITS = {"priority_class_name": DEFAULT_PRIORITY}

#: the chart's user-scheduler profile (``scheduling.userScheduler.plugins`` / ``pluginConfig``):
#: scoring re-weighted, NodeResourcesFit by MostAllocated; filters and preemption stock
USER_SCHEDULER_PROFILE = {
    "schedulerName": USER_SCHEDULER,
    "plugins": {
        "score": {
            "disabled": [
                {"name": "NodeResourcesBalancedAllocation"},
                {"name": "NodeAffinity"},
                {"name": "InterPodAffinity"},
                {"name": "NodeResourcesFit"},
                {"name": "ImageLocality"},
            ],
            "enabled": [
                {"name": "NodeAffinity", "weight": 14631},
                {"name": "InterPodAffinity", "weight": 1331},
                {"name": "NodeResourcesFit", "weight": 121},
                {"name": "ImageLocality", "weight": 11},
            ],
        }
    },
    "pluginConfig": [
        {
            "name": "NodeResourcesFit",
            "args": {
                "scoringStrategy": {
                    "type": "MostAllocated",
                    "resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}],
                }
            },
        }
    ],
}


async def ensure_priority_classes(api) -> None:
    """The chart's PriorityClasses (cluster-scoped, kept for the session; none is global), once
    the API server's Priority admission knows them: it reads them from a cache that follows the
    create, and a pod naming a class a moment after its create is refused ("no PriorityClass
    with name ... was found", 403) until then."""
    scheduling = client.SchedulingV1Api(api_client_of(api))
    for name, value in PRIORITY_CLASSES.items():
        body = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
            "globalDefault": False,
            "description": "zero-to-jupyterhub's, as its chart renders it (tests)",
        }
        try:
            await scheduling.create_priority_class(body)
        except ApiException as e:
            if e.status != 409:
                raise
    core = client.CoreV1Api(api_client_of(api))
    for name in PRIORITY_CLASSES:
        probe = placeholder(f"priority-probe-{name}", cpu="1m")
        probe["spec"]["priorityClassName"] = name

        async def admitted(probe=probe) -> bool:
            try:
                # a server-side dry run: admitted, nothing stored
                await core.create_namespaced_pod("default", probe, dry_run="All")
            except ApiException as e:
                if e.status != 403 or "no PriorityClass" not in str(e.body):
                    raise
                return False
            return True

        await wait_until(
            admitted, timeout=30, what=f"Priority admission to know {name}", interval=0.1
        )


def placeholder(
    name: str,
    *,
    cpu: str,
    memory: str = "128M",
    scheduler_name: str | None = None,
    node_selector: dict[str, str] | None = None,
) -> dict:
    """One pod of the chart's user-placeholder StatefulSet (its template's spec)."""
    spec: dict = {
        "priorityClassName": PLACEHOLDER_PRIORITY,
        "terminationGracePeriodSeconds": 0,
        "automountServiceAccountToken": False,
        "containers": [
            {
                "name": "pause",
                "image": PAUSE_IMAGE,
                "resources": {"requests": {"cpu": cpu, "memory": memory}},
            }
        ],
    }
    if scheduler_name:
        spec["schedulerName"] = scheduler_name
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": dict(PLACEHOLDER_MATCH_LABELS)},
        "spec": spec,
    }


def placeholder_statefulset(replicas: int, *, cpu: str, memory: str = "128M") -> dict:
    """The chart's user-placeholder StatefulSet with ``scheduling.podPriority.enabled`` and
    ``userPlaceholder.replicas: replicas``; its pause containers request the singleuser
    ``cpu.guarantee`` / ``memory.guarantee`` given here (the chart's default when
    ``userPlaceholder.resources`` is empty)."""
    pod = placeholder(PLACEHOLDER_NAME, cpu=cpu, memory=memory)
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": PLACEHOLDER_NAME, "labels": dict(PLACEHOLDER_MATCH_LABELS)},
        "spec": {
            # all replicas created and recreated at once, not one after the other
            "podManagementPolicy": "Parallel",
            "replicas": replicas,
            "selector": {"matchLabels": dict(PLACEHOLDER_MATCH_LABELS)},
            "serviceName": PLACEHOLDER_NAME,
            "template": {"metadata": {"labels": dict(PLACEHOLDER_POD_LABELS)}, "spec": pod["spec"]},
        },
    }


def placeholder_pdb() -> dict:
    """The chart's PDB of the placeholders: ``minAvailable: 0`` (any of them may be evicted)."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": PLACEHOLDER_NAME, "labels": dict(PLACEHOLDER_MATCH_LABELS)},
        "spec": {"minAvailable": 0, "selector": {"matchLabels": dict(PLACEHOLDER_MATCH_LABELS)}},
    }


async def create_placeholders(api, namespace: str, count: int, **kwargs) -> list[str]:
    """``count`` placeholder pods ``user-placeholder-<i>``; their names."""
    core = client.CoreV1Api(api_client_of(api))
    names = [f"user-placeholder-{i}" for i in range(count)]
    for name in names:
        await core.create_namespaced_pod(namespace, placeholder(name, **kwargs))
    return names
