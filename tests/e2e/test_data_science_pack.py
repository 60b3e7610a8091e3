"""The one-snippet switch, against a replica of data-science-pack's hub config
(tests/e2e/data_science_pack/: 01-spawner.py, 02-jhub-apps.py), run in zero-to-jupyterhub's
order: chart settings, the jupyterhub_config.d files, then ``hub.extraConfig``::

    hub:
      extraConfig:
        10-colocate: |
          from nebari_colocate.helm import configure
          configure(c)

First the config alone (what the snippet leaves in ``c``), then a real hub of that config with
an e-mail user (data-science-pack's escape slugs): the lab and an app start, share one node and
mount both of the user's claims; a GPU app is refused with the names the user knows. JupyterHub
5 only, as jhub-apps (which data-science-pack installs) works on 5 only.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from traitlets import TraitError
from traitlets.config import Config

from nebari_colocate import ColocatingKubeSpawner
from nebari_colocate.helm import HUB_TEMPLATES, JHUB_APPS_TEMPLATES, HelmValuesError

from .conftest import JUPYTERHUB_MAJOR
from .japps import app_options
from .test_refusals_in_browser import CPU_PROFILE, GPU_PROFILE, cpu_and_gpu_nodes
from .test_success_path import user_pods

pytestmark = pytest.mark.skipif(
    JUPYTERHUB_MAJOR >= 6, reason="jhub-apps does not work on JupyterHub 6 (docs/surfaces.md)"
)

HERE = Path(__file__).resolve().parent / "data_science_pack"
SNIPPET = "from nebari_colocate.helm import configure\nconfigure(c)\n"
EMAIL_USER = "tpotts@openteams.com"
ESCAPED = "tpotts-40openteams-2ecom"  # KubeSpawner's escape slug scheme, as data-science-pack uses


def helm_values(**custom) -> dict:
    return {
        "hub": {"extraConfig": {"10-colocate": SNIPPET}},
        "singleuser": {"extraLabels": {"hub.jupyter.org/network-access-hub": "true"}},
        "custom": {"profiles": [CPU_PROFILE, GPU_PROFILE], **custom},
    }


def run_like_z2jh(tmp_path, monkeypatch, values: dict, snippets: int = 1) -> Config:
    """The replica's files, then hub.extraConfig, as zero-to-jupyterhub's jupyterhub_config.py
    runs them (``c`` and ``get_config`` in scope)."""
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"helm_values": values}))
    monkeypatch.setenv("NEBARI_COLOCATE_E2E_SETTINGS", str(settings))
    monkeypatch.syspath_prepend(str(HERE))
    sys.modules.pop("z2jh", None)
    from z2jh import get_chart_config, get_config

    c = Config()
    c.KubeSpawner.storage_access_modes = ["ReadWriteOnce"]  # the chart's own setting
    scope = {"c": c, "get_config": get_config, "get_chart_config": get_chart_config}
    for name in ("01-spawner.py", "02-jhub-apps.py"):
        exec(compile((HERE / name).read_text(), name, "exec"), dict(scope))
    for _ in range(snippets):
        for _, snippet in sorted(get_config("hub.extraConfig").items()):
            exec(snippet, {"c": c, "get_config": get_config})
    return c


@pytest.mark.parametrize("snippets", [1, 2], ids=["once", "twice-changes-nothing-more"])
def test_the_snippet_switches_the_replica(snippets, tmp_path, monkeypatch):
    c = run_like_z2jh(tmp_path, monkeypatch, helm_values(), snippets)

    cls = c.JupyterHub.spawner_class
    assert cls.__module__.startswith("jhub_apps"), cls
    assert issubclass(cls, ColocatingKubeSpawner)
    assert ColocatingKubeSpawner in cls.__mro__[1:3]  # rebuilt once, not stacked

    extra = c.KubeSpawner.extra_pod_config
    assert "affinity" not in extra, extra  # the hand-written co-location rule is gone
    assert extra["securityContext"] == {"fsGroup": 100, "fsGroupChangePolicy": "OnRootMismatch"}
    assert c.KubeSpawner.extra_labels["nebari.dev/colocate-user"] == "{username}"

    assert c.ColocatingKubeSpawner.storage_access_mode == "ReadWriteOnce"
    assert c.ColocatingKubeSpawner.storage_access_modes == ["ReadWriteOnce"]

    paths = [str(p) for p in c.JupyterHub.template_paths]
    assert paths[0] == str(JHUB_APPS_TEMPLATES)
    assert paths[1].endswith("jhub_apps/templates")
    assert paths[2:] == [str(HUB_TEMPLATES)]


def test_a_helm_mode_wins_over_the_hard_coded_access_modes(tmp_path, monkeypatch):
    values = helm_values(**{"storage-access-mode": "ReadWriteMany", "storage-class": "nfs"})
    c = run_like_z2jh(tmp_path, monkeypatch, values)
    assert c.ColocatingKubeSpawner.storage_access_mode == "ReadWriteMany"
    assert c.ColocatingKubeSpawner.storage_access_modes == ["ReadWriteMany"]
    assert c.ColocatingKubeSpawner.storage_class == "nfs"


@pytest.mark.parametrize(
    "test_variation_id, custom, expect",
    [
        ("rwx-without-a-class", {"storage-access-mode": "ReadWriteMany"}, "storage_class"),
        ("unknown-policy", {"colocate-premium-node-policy": "sometimes"}, "premium_node_policy"),
        ("unknown-key", {"colocate-nodes": 3}, "custom.colocate-nodes"),
    ],
)
def test_bad_settings_stop_the_hub_at_start_naming_them(
    test_variation_id, custom, expect, tmp_path, monkeypatch
):
    with pytest.raises((HelmValuesError, ValueError, TraitError)) as info:
        run_like_z2jh(tmp_path, monkeypatch, helm_values(**custom))
    assert expect in str(info.value)


async def test_an_email_user_starts_lab_and_app_on_one_node(kube, start_hub):
    await cpu_and_gpu_nodes(kube)
    await kube.create_bound_claim(f"claim-{ESCAPED}")
    # The workspace claim data-science-pack's pre_spawn_hook creates (409: it exists, bound).
    await kube.create_bound_claim(f"nebi-workspaces-{ESCAPED}")
    hub = await start_hub(
        jhub_apps="data-science-pack",
        z2jh=True,
        consecutive_failure_limit=5,
        helm_values=helm_values(),
    )
    await hub.create_user(EMAIL_USER)

    lab = await hub.start_server(EMAIL_USER, "", {"profile": "cpu"})
    app = await hub.start_server(
        EMAIL_USER, "pandas-app", app_options("pandas-app", "Pandas App", "cpu")
    )
    assert lab["ready"] and app["ready"]
    pods = await user_pods(kube, EMAIL_USER)
    assert set(pods) == {"", "pandas-app"}
    assert len({p["spec"]["nodeName"] for p in pods.values()}) == 1
    for pod in pods.values():
        claims = {
            v["persistentVolumeClaim"]["claimName"]
            for v in pod["spec"]["volumes"]
            if v.get("persistentVolumeClaim")
        }
        assert claims == {f"claim-{ESCAPED}", f"nebi-workspaces-{ESCAPED}"}
        terms = pod["spec"]["affinity"]["podAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]
        # One co-location term, ours, matching the label the pod carries: never two that
        # disagree about the user's label value.
        assert len(terms) == 1, terms
        value = pod["metadata"]["labels"]["nebari.dev/colocate-user"]
        assert terms[0]["labelSelector"]["matchLabels"] == {"nebari.dev/colocate-user": value}
        assert pod["spec"]["securityContext"]["fsGroup"] == 100

    status, body = await hub.request_server(
        EMAIL_USER, "gpu-app", app_options("gpu-app", "GPU App", "gpu")
    )
    assert status == 202, body
    await hub.wait_until_ended(EMAIL_USER, "gpu-app")
    log = hub.log()
    assert "colocate verdict=refuse" in log and "server='gpu-app'" in log
    assert set(await user_pods(kube, EMAIL_USER)) == {"", "pandas-app"}
    assert hub.hub.alive()


def test_observe_mode_leaves_data_science_packs_affinity_in_the_config(tmp_path, monkeypatch):
    c = run_like_z2jh(tmp_path, monkeypatch, helm_values(**{"colocate-mode": "observe"}))
    assert issubclass(c.JupyterHub.spawner_class, ColocatingKubeSpawner)
    assert c.ColocatingKubeSpawner.colocation_mode == "observe"
    terms = c.KubeSpawner.extra_pod_config["affinity"]["podAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    (expression,) = terms[0]["labelSelector"]["matchExpressions"]
    assert expression["values"] == ["{username}"]


async def test_observe_mode_spawns_as_data_science_pack_does_and_says_what_it_would_do(
    kube, start_hub
):
    """``colocate-mode: observe`` on the replica's hub: the pods are data-science-pack's own
    (its escape-slug label and hard affinity, nothing of ours), the GPU app waits out
    ``start_timeout`` as it does today, and the hub log says enforce would have refused it."""
    await cpu_and_gpu_nodes(kube)
    await kube.create_bound_claim(f"claim-{ESCAPED}")
    await kube.create_bound_claim(f"nebi-workspaces-{ESCAPED}")
    hub = await start_hub(
        jhub_apps="data-science-pack",
        z2jh=True,
        consecutive_failure_limit=5,
        start_timeout=10,
        helm_values=helm_values(**{"colocate-mode": "observe"}),
    )
    await hub.create_user(EMAIL_USER)
    await hub.start_server(EMAIL_USER, "", {"profile": "cpu"})
    await hub.start_server(EMAIL_USER, "pandas-app", app_options("pandas-app", "Pandas App", "cpu"))
    pods = await user_pods(kube, EMAIL_USER)
    assert len({p["spec"]["nodeName"] for p in pods.values()}) == 1
    for pod in pods.values():
        assert pod["metadata"]["labels"]["nebari.dev/colocate-user"] == ESCAPED
        (term,) = pod["spec"]["affinity"]["podAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]
        # data-science-pack's own term, as its 01-spawner.py writes it
        assert term["labelSelector"] == {
            "matchExpressions": [
                {"key": "nebari.dev/colocate-user", "operator": "In", "values": [ESCAPED]}
            ]
        }
        assert "nodeAffinity" not in pod["spec"]["affinity"], "nothing pinned by us"

    status, body = await hub.request_server(
        EMAIL_USER, "gpu-app", app_options("gpu-app", "GPU App", "gpu")
    )
    assert status == 202, body
    model = await hub.wait_until_ended(EMAIL_USER, "gpu-app", timeout=60)
    assert model is None or not model.get("ready"), model
    log = hub.log()
    assert f"observe: would refuse {EMAIL_USER}'s 'gpu-app': " in log
    enforced = [line for line in log.splitlines() if "observe: " not in line]
    assert not [line for line in enforced if "colocate verdict=refuse" in line], "nothing refused"
    assert "failed to start in 10 seconds" in log, "stock KubeSpawner's timeout ended it"
    assert set(await user_pods(kube, EMAIL_USER)) == {"", "pandas-app"}
    assert hub.hub.alive()


# --------------------------------------------------------------------------------------------------
# examples/: whole files, run as zero-to-jupyterhub runs them

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_the_jhub_apps_example_runs_as_a_whole_file(monkeypatch):
    import types

    def get_config(key, default=None):
        return default

    monkeypatch.setitem(sys.modules, "z2jh", types.SimpleNamespace(get_config=get_config))
    c = Config()
    c.JupyterHub.spawner_class = "kubespawner"  # zero-to-jupyterhub's own settings
    c.JupyterHub.services = []
    c.KubeSpawner.storage_access_modes = ["ReadWriteOnce"]
    code = compile((EXAMPLES / "02-jhub-apps.py").read_text(), "02-jhub-apps.py", "exec")
    exec(code, {"c": c, "get_config": get_config})
    cls = c.JupyterHub.spawner_class
    assert cls.__module__.startswith("jhub_apps") and issubclass(cls, ColocatingKubeSpawner)
    assert c.JupyterHub.bind_url == "http://127.0.0.1:8000"
    assert str(c.JupyterHub.template_paths[0]) == str(JHUB_APPS_TEMPLATES)
    assert any(s["name"] == "japps" for s in c.JupyterHub.services)


def test_the_data_science_pack_example_is_the_tested_snippet(tmp_path, monkeypatch):
    import yaml

    values = yaml.safe_load((EXAMPLES / "data-science-pack-values.yaml").read_text())
    snippets = values["jupyterhub"]["hub"]["extraConfig"]
    assert list(snippets.values()) == [SNIPPET]
    # ... and with the example's custom values, the replica switches as above.
    c = run_like_z2jh(tmp_path, monkeypatch, {**helm_values(), "hub": values["jupyterhub"]["hub"]})
    assert issubclass(c.JupyterHub.spawner_class, ColocatingKubeSpawner)
