"""How the check composes with KubeSpawner's and JupyterHub's extension points, on the real
control plane: hooks, profiles, user_options, and a jhub-apps style subclass."""

from __future__ import annotations

import logging
import textwrap

import pytest
from jupyterhub.utils import maybe_future
from traitlets.config import Config
from traitlets.config.loader import PyFileConfigLoader

from nebari_colocate import ColocatingKubeSpawner
from nebari_colocate.helm import configure
from nebari_colocate.spawner import ColocationRefused

from .test_spawner_cluster import GPU_PROFILE, GPU_TAINT, cpu_and_gpu_nodes, pod_of

LABEL = "nebari.dev/colocate-user"


def colocation_term(pod: dict) -> list:
    return pod["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]


async def test_the_affinity_is_in_the_final_manifest_and_modify_pod_hook_runs_after(kube, spawners):
    await kube.create_node("node-a")
    await kube.create_bound_claim("claim-alice")
    seen = {}

    def modify_pod_hook(spawner, pod):
        # The operator's hook sees our label and affinity, and its own change is kept.
        seen["label"] = pod.metadata.labels.get(LABEL)
        seen["affinity"] = pod.spec.affinity is not None
        pod.metadata.labels["team"] = "data"
        return pod

    lab = spawners.make("alice", modify_pod_hook=modify_pod_hook)
    await spawners.start(lab)
    pod = await pod_of(kube, lab)
    assert seen == {"label": "alice", "affinity": True}
    assert pod["metadata"]["labels"][LABEL] == "alice"
    assert pod["metadata"]["labels"]["team"] == "data"
    assert colocation_term(pod) == [
        {
            "labelSelector": {"matchLabels": {LABEL: "alice"}},
            "topologyKey": "kubernetes.io/hostname",
        }
    ]


async def test_a_pre_spawn_hook_that_picks_a_gpu_node_is_what_gets_checked(kube, spawners):
    await cpu_and_gpu_nodes(kube)
    await kube.create_bound_claim("claim-alice")
    await spawners.start(spawners.make("alice", "app", node_selector={"node-type": "cpu"}))

    def pre_spawn_hook(spawner):
        spawner.node_selector = {"node-type": "gpu"}
        spawner.extra_resource_limits = {"nvidia.com/gpu": "1"}
        spawner.tolerations = [{"key": "nvidia.com/gpu", "operator": "Exists"}]

    lab = spawners.make("alice", pre_spawn_hook=pre_spawn_hook)
    await maybe_future(lab.run_pre_spawn_hook())  # JupyterHub runs it before start()
    with pytest.raises(ColocationRefused) as refused:
        await spawners.start(lab)
    assert set(refused.value.decision.reasons) == {"node-selector", "insufficient:nvidia.com/gpu"}


PROFILES = [
    {
        "display_name": "CPU",
        "slug": "cpu",
        "default": True,
        "kubespawner_override": {"node_selector": {"node-type": "cpu"}},
    },
    {"display_name": "GPU", "slug": "gpu", "kubespawner_override": GPU_PROFILE},
]


async def test_a_profiles_kubespawner_override_is_what_gets_checked(kube, spawners):
    await cpu_and_gpu_nodes(kube)
    await kube.create_bound_claim("claim-alice")
    app = spawners.make("alice", "app", profile_list=PROFILES)
    app.user_options = {"profile": "cpu"}
    await spawners.start(app)
    assert (await pod_of(kube, app))["spec"]["nodeName"] == "cpu-1"

    lab = spawners.make("alice", profile_list=PROFILES)
    lab.user_options = {"profile": "gpu"}
    with pytest.raises(ColocationRefused) as refused:
        await spawners.start(lab)
    assert "insufficient:nvidia.com/gpu" in refused.value.decision.reasons
    assert refused.value.decision.node == "cpu-1"


async def test_user_options_cannot_alter_the_colocation_affinity(kube, spawners):
    await kube.create_node("node-a")
    await kube.create_node("node-b")
    await kube.create_bound_claim("claim-alice")
    lab = spawners.make("alice", node_selector={"kubernetes.io/hostname": "node-a"})
    await spawners.start(lab)
    app = spawners.make("alice", "app")
    app.user_options = {
        "extra_labels": {LABEL: "mallory"},
        "node_selector": {"kubernetes.io/hostname": "node-b"},
        "node_affinity_required": [],
        "affinity": {},
    }
    await spawners.start(app)
    pod = await pod_of(kube, app)
    assert pod["spec"]["nodeName"] == "node-a"
    assert pod["metadata"]["labels"][LABEL] == "alice"
    assert colocation_term(pod)[0]["labelSelector"] == {"matchLabels": {LABEL: "alice"}}


def jhub_apps_style_subclass(base):
    """The shape of jhub-apps' ``subclass_spawner`` (jhub_apps/spawner/spawner_creation.py):
    it overrides get_args, get_env, load_user_options (super first, then the image) and start
    (sets cmd, then ``return await super().start()``).  jhub-apps itself pulls in Jupyter,
    Panel and Bokeh, so the pattern is reproduced here rather than installed."""

    class JHubSpawner(base):
        def get_args(self):
            return [*super().get_args(), *self.user_options.get("argv", [])]

        def get_env(self):
            env = super().get_env()
            env.update(self.user_options.get("env", {}))
            return env

        async def load_user_options(self):
            await super().load_user_options()
            if self.user_options.get("profile_image"):
                self.image = self.user_options["profile_image"]

        async def start(self):
            if self.user_options.get("jhub_app"):
                self.cmd = ["python", "-m", "jhub_app_proxy", "--", "panel", "serve", "app.py"]
            return await super().start()

    return JHubSpawner


async def test_a_class_built_the_way_jhub_apps_builds_it_colocates_and_refuses(kube, spawners):
    await cpu_and_gpu_nodes(kube)
    await kube.create_bound_claim("claim-alice")
    cls = jhub_apps_style_subclass(ColocatingKubeSpawner)
    c = Config()
    c.ColocatingKubeSpawner.node_selector = {"node-type": "cpu"}
    app = spawners.make("alice", "panel-app", cls=cls, config=c)
    app.user_options = {
        "jhub_app": True,
        "profile_image": "quay.io/nebari/app:1",
        "env": {"A": "1"},
    }
    await spawners.start(app)
    pod = await pod_of(kube, app)
    assert pod["spec"]["nodeName"] == "cpu-1"
    assert pod["spec"]["containers"][0]["image"] == "quay.io/nebari/app:1"
    assert colocation_term(pod)

    lab = spawners.make("alice", cls=cls, **GPU_PROFILE)
    with pytest.raises(ColocationRefused):
        await spawners.start(lab)


async def test_a_refused_first_spawn_creates_no_home_claim(kube, spawners):
    """data-science-pack mounts a second, RWO workspace claim.  An app that mounts only the
    workspace pins the user to the CPU node; the home claim does not exist yet."""
    await kube.create_node("cpu-1", labels={"node-type": "cpu"})
    await kube.create_node(
        "gpu-1", labels={"node-type": "gpu"}, taints=[GPU_TAINT], extra={"nvidia.com/gpu": "1"}
    )
    await kube.create_bound_claim("nebi-workspaces-alice")
    workspace_only = Config()
    workspace_only.KubeSpawner.volumes = [
        {"name": "ws", "persistentVolumeClaim": {"claimName": "nebi-workspaces-{username}"}}
    ]
    workspace_only.KubeSpawner.volume_mounts = [{"name": "ws", "mountPath": "/ws"}]
    workspace_only.KubeSpawner.storage_pvc_ensure = False
    app = spawners.make("alice", "app", config=workspace_only, node_selector={"node-type": "cpu"})
    await spawners.start(app)

    both = Config()
    both.KubeSpawner.volumes = [
        {"name": "home", "persistentVolumeClaim": {"claimName": "claim-{username}"}},
        {"name": "ws", "persistentVolumeClaim": {"claimName": "nebi-workspaces-{username}"}},
    ]
    lab = spawners.make("alice", config=both, **GPU_PROFILE)
    assert lab.storage_pvc_ensure
    with pytest.raises(ColocationRefused) as refused:
        await spawners.start(lab)
    assert refused.value.decision.claims == ["claim-alice", "nebi-workspaces-alice"]
    claims = await kube.core.list_namespaced_persistent_volume_claim(kube.namespace)
    assert {c.metadata.name for c in claims.items} == {"nebi-workspaces-alice"}


# A hub config's own co-location rule, on KubeSpawner's username label, and a term of its own
# that is not co-location (kept).
HAND_WRITTEN = """
BY_USERNAME = {"labelSelector": {"matchLabels": {"hub.jupyter.org/username": "alice"}},
               "topologyKey": "kubernetes.io/hostname"}
BY_OUR_KEY = {"labelSelector": {"matchExpressions": [{"key": "nebari.dev/colocate-user",
              "operator": "In", "values": ["alice"]}]}, "topologyKey": "kubernetes.io/hostname"}

def affinity(*terms):
    return {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": list(terms)}}

def profile(override):
    return {"display_name": "GPU", "slug": "gpu", "kubespawner_override": override}
"""

#: the label key of each idiom's hand-written term
TERM_KEYS = {
    "lazy-append": "hub.jupyter.org/username",
    "lazy-update": "nebari.dev/colocate-user",
    "parent-section": "hub.jupyter.org/username",
    "profile-override": "nebari.dev/colocate-user",
    "async-profile-list": "hub.jupyter.org/username",
    "pre-spawn-hook": "hub.jupyter.org/username",
}
IDIOMS = {
    "lazy-append": "c.KubeSpawner.pod_affinity_required.append(BY_USERNAME)",
    "lazy-update": 'c.KubeSpawner.extra_pod_config.update({"affinity": affinity(BY_OUR_KEY)})',
    "parent-section": 'c.Spawner.extra_pod_config = {"affinity": affinity(BY_USERNAME)}',
    "profile-override": """
        c.KubeSpawner.profile_list = [profile({"pod_affinity_required": [BY_OUR_KEY]})]
        """,
    "async-profile-list": """
        async def profiles(spawner):
            return [profile({"extra_pod_config": {"affinity": affinity(BY_USERNAME)}})]
        c.KubeSpawner.profile_list = profiles
        """,
    "pre-spawn-hook": """
        def hook(spawner):
            spawner.extra_pod_config = {"affinity": affinity(BY_USERNAME)}
        c.Spawner.pre_spawn_hook = hook
        """,
}


def hub_config(tmp_path, idiom: str) -> Config:
    """The hub config file as JupyterHub loads it (so ``.append`` / ``.update`` are lazy)."""
    path = tmp_path / "jupyterhub_config.py"
    path.write_text(HAND_WRITTEN + textwrap.dedent(IDIOMS[idiom]))
    return PyFileConfigLoader(path.name, path=str(tmp_path)).load_config()


@pytest.mark.parametrize("configured", [True, False], ids=["configured", "not-configured"])
@pytest.mark.parametrize("idiom", list(IDIOMS))
async def test_a_readwritemany_home_gets_no_hand_written_colocation_in_any_config_idiom(
    kube, spawners, tmp_path, caplog, idiom, configured
):
    """With configure(c) the term is gone from the config; without it (or set where configure
    cannot see, a pre_spawn_hook) the spawner takes it out of the manifest and says so."""
    await kube.create_node("node-a")
    await kube.create_bound_claim("claim-alice", access_modes=("ReadWriteMany",))
    c = hub_config(tmp_path, idiom)
    with caplog.at_level(logging.INFO):
        if configured:
            configure(c, get_config=lambda key, default=None: default)
        lab = spawners.make("alice", config=c)
        if "profile_list" in c.KubeSpawner:
            lab.user_options = {"profile": "gpu"}
        await maybe_future(lab.run_pre_spawn_hook())  # JupyterHub runs it before start()
        await spawners.start(lab)
    pod = await pod_of(kube, lab)
    assert lab._colocation_decision.verdict == "skip"
    assert not (pod["spec"].get("affinity") or {}).get("podAffinity"), pod["spec"]["affinity"]
    logged = " ".join(r.getMessage() for r in caplog.records)
    if configured and idiom != "pre-spawn-hook":
        # the hub log at start names the place (section, trait, profile) and the label key
        assert "removed hand-written co-location pod affinity from c." in logged, logged
    else:
        said = f"co-location pod affinity (term on {TERM_KEYS[idiom]}) from pod {lab.pod_name}"
        assert said in logged, logged
