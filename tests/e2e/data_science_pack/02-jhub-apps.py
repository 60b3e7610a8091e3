# A faithful replica of data-science-pack's config/jupyterhub/02-jhub-apps.py (read from
# nebari-dev/data-science-pack; written here): bind_url, default_url, jhub-apps' theme
# templates, then install_jhub_apps on *KubeSpawner*, which sets c.JupyterHub.spawner_class
# after 01-spawner.py. The one difference: with no external URL data-science-pack binds
# http://0.0.0.0:8000; tests bind loopback only (custom.e2e-bind-url).
# ruff: noqa: F821 - `c`, `get_config` and `get_chart_config` come from the hub config
from jhub_apps import theme_template_paths, themes
from jhub_apps.configuration import install_jhub_apps
from kubespawner import KubeSpawner

domain = get_chart_config("external-url")
if domain:
    c.JupyterHub.bind_url = f"https://{domain}"
else:
    c.JupyterHub.bind_url = get_chart_config("e2e-bind-url", "http://127.0.0.1:8000")
c.JupyterHub.default_url = "/hub/home"
c.JupyterHub.template_paths = theme_template_paths
c.JupyterHub.template_vars = {**themes.DEFAULT_THEME, "display_version": True}

for key, value in (get_config("custom.japps-config", {}) or {}).items():
    setattr(c.JAppsConfig, key, value)

c = install_jhub_apps(c, spawner_to_subclass=KubeSpawner)
