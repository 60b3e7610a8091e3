# JupyterHub config for the end-to-end tests: one real hub per test, on loopback ports, against
# the test control plane. Not a module of the test package: JupyterHub executes it with `c` and
# `get_config` in scope. Everything that varies per test comes from the JSON file named by
# $NEBARI_COLOCATE_E2E_SETTINGS, written by tests/e2e/harness.py (see Hub.settings there).
import asyncio
import json
import os
from pathlib import Path

c = get_config()  # noqa: F821  (provided by JupyterHub)
s = json.loads(Path(os.environ["NEBARI_COLOCATE_E2E_SETTINGS"]).read_text())
work = Path(s["workdir"])

# -- network: the public proxy, the proxy's API and the hub, all on 127.0.0.1 ------------------
if s.get("jhub_apps"):
    # jhub-apps needs bind_url (its PUBLIC_HOST and OAuth callback); it supersedes ip/port.
    c.JupyterHub.bind_url = f"http://127.0.0.1:{s['proxy_port']}"
else:
    c.JupyterHub.ip = "127.0.0.1"
    c.JupyterHub.port = s["proxy_port"]
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = s["hub_port"]
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{s['proxy_api_port']}"
c.ConfigurableHTTPProxy.auth_token = s["proxy_token"]
c.ConfigurableHTTPProxy.pid_file = str(work / "proxy.pid")
c.ConfigurableHTTPProxy.debug = False

# -- state in the test's temp dir ----------------------------------------------------------------
c.JupyterHub.db_url = f"sqlite:///{work / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(work / "cookie_secret")
c.JupyterHub.pid_file = str(work / "jupyterhub.pid")
c.JupyterHub.log_level = s.get("log_level", "INFO")

# -- people: DummyAuthenticator with one password; a service token with admin scopes -------------
c.JupyterHub.authenticator_class = "dummy"
c.DummyAuthenticator.password = s["password"]
c.Authenticator.allow_all = True
c.JupyterHub.services = [{"name": "e2e-tests", "api_token": s["api_token"]}]
c.JupyterHub.load_roles = [
    {
        "name": "e2e-tests",
        "scopes": ["admin:users", "admin:servers", "list:users", "read:metrics"],
        "services": ["e2e-tests"],
    }
]
# the operator's page's readers: admins, and roles granting custom:colocate:read
if s.get("admin_users"):
    c.Authenticator.admin_users = set(s["admin_users"])
c.JupyterHub.load_roles = c.JupyterHub.load_roles + list(s.get("roles") or [])
c.JupyterHub.allow_named_servers = True
c.JupyterHub.named_server_limit_per_user = 0

# -- the spawner under test, by its entry point name ---------------------------------------------
c.JupyterHub.spawner_class = "colocate"
c.Spawner.consecutive_failure_limit = s["consecutive_failure_limit"]
if s.get("z2jh"):
    # zero-to-jupyterhub's own jupyterhub_config.py: every REST spawn answers 202 at once.
    c.JupyterHub.tornado_settings = {"slow_spawn_timeout": 0}
c.Spawner.start_timeout = s.get("start_timeout", 30)
c.Spawner.http_timeout = s.get("http_timeout", 15)

ks = c.KubeSpawner  # ColocatingKubeSpawner reads c.KubeSpawner, as a deployment's config does


def _load(name, path):
    """A module of the test package by its path: JupyterHub runs this file outside it."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# the settings every test spawner shares, written once (tests/support/spawning.py)
spawning = _load("e2e_spawning", Path(__file__).resolve().parents[1] / "support" / "spawning.py")
for name, value in spawning.kubespawner_settings(s["namespace"]).items():
    setattr(ks, name, value)
ks.port = s["server_port"]
if s.get("z2jh_pod_priority"):
    # zero-to-jupyterhub's jupyterhub_config.py with scheduling.podPriority.enabled
    ks.priority_class_name = s["z2jh_pod_priority"]
if s.get("profile_list"):
    ks.profile_list = s["profile_list"]
for name, value in (s.get("spawner") or {}).items():
    setattr(c.ColocatingKubeSpawner, name, value)
if s.get("way_out_handler"):
    # what nebari_colocate.helm.configure(c) installs: the way out's hub handler and the
    # templates of JupyterHub's pages (its button)
    # (install_way_out: the way out's and the moves' handlers and the operator's page)
    from nebari_colocate.helm import install_templates, install_way_out

    install_way_out(c)
    install_templates(c)

# A deployment's pre_spawn_hook (Nebari's and data-science-pack's look things up in other
# services) can take longer than the one second JupyterHub's spawn form waits for a spawn to fail
# before it redirects to /hub/spawn-pending. `pre_spawn_delay` reproduces that timing, so a test
# can choose which page the person sees: the re-rendered form (fast refusal) or spawn-pending.
delay = float(s.get("pre_spawn_delay") or 0)
if delay:

    async def slow_pre_spawn_hook(spawner):
        await asyncio.sleep(delay)

    c.Spawner.pre_spawn_hook = slow_pre_spawn_hook

# -- Nebari: its own hub.extraConfig files and values, read from the installed nebari package and
# run as zero-to-jupyterhub runs them (tests/e2e/nebari/release.py), then the documented switch
if s.get("nebari"):
    here = Path(__file__).resolve().parent
    z2jh = _load("z2jh", here / "data_science_pack" / "z2jh.py")
    c = _load("nebari_release", here / "nebari" / "release.py").run(c, z2jh.get_config, z2jh)

# -- jhub-apps, installed as a deployment installs it ----------------------------------------
# "jhub_apps": "colocate"  -> install_jhub_apps(c, spawner_to_subclass=ColocatingKubeSpawner)
# "jhub_apps": "data-science-pack" -> the replica of data-science-pack's 01-spawner.py and
#     02-jhub-apps.py (tests/e2e/data_science_pack/), then the documented hub.extraConfig
#     snippet, in zero-to-jupyterhub's order.
# jhub-apps re-executes this file in its `japps` service process (JHUB_JUPYTERHUB_CONFIG).
mode = s.get("jhub_apps")
if mode:
    import sys

    from jhub_apps import theme_template_paths, themes
    from jhub_apps.configuration import install_jhub_apps

    c.JAppsConfig.jupyterhub_config_path = __file__
    c.JAppsConfig.python_exec = sys.executable
    c.JAppsConfig.hub_host = "127.0.0.1"
    c.JAppsConfig.app_title = "nebari-colocate e2e"
    # JupyterHub gives a managed service 10 s to answer and stops the hub otherwise; importing
    # jhub-apps' service takes ~5 s of CPU per worker, two workers by default: one, on 2 cores.
    c.JAppsConfig.service_workers = 1
    if mode == "data-science-pack":
        here = Path(__file__).resolve().parent
        # the shim of zero-to-jupyterhub's `z2jh` module (tests/e2e/data_science_pack/z2jh.py),
        # importable as `z2jh` as in the hub image, without a sys.path entry
        z2jh = _load("z2jh", here / "data_science_pack" / "z2jh.py")
        get_chart_config, get_config = z2jh.get_chart_config, z2jh.get_config

        for name in ("01-spawner.py", "02-jhub-apps.py"):
            path = here / "data_science_pack" / name
            code = compile(path.read_text(), str(path), "exec")
            exec(code, {"c": c, "get_config": get_config, "get_chart_config": get_chart_config})
        for _, snippet in sorted((get_config("hub.extraConfig", {}) or {}).items()):
            exec(snippet, {"c": c, "get_config": get_config})
    else:
        from nebari_colocate import ColocatingKubeSpawner

        c.JupyterHub.default_url = "/hub/home"
        c.JupyterHub.template_paths = theme_template_paths
        c.JupyterHub.template_vars = dict(themes.DEFAULT_THEME)
        c = install_jhub_apps(c, spawner_to_subclass=ColocatingKubeSpawner)
        if s.get("configure", True):
            from nebari_colocate.helm import configure

            configure(c, get_config=lambda key, default=None: default)

    # jhub-apps binds its service on 0.0.0.0:10202 (fixed); here: loopback and a free port.
    for service in c.JupyterHub.services:
        if service.get("name") == "japps":
            port = s["japps_port"]
            service["url"] = f"http://127.0.0.1:{port}"
            service["command"] = [
                f"--port={port}"
                if arg.startswith("--port=")
                else ("--host=127.0.0.1" if arg.startswith("--host=") else arg)
                for arg in service["command"]
            ]
        if "command" in service:
            env = service.setdefault("environment", {})
            env["NEBARI_COLOCATE_E2E_SETTINGS"] = os.environ["NEBARI_COLOCATE_E2E_SETTINGS"]
            env["KUBECONFIG"] = os.environ.get("KUBECONFIG", "")
