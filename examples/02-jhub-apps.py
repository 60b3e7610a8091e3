# jhub-apps on ColocatingKubeSpawner: a whole jupyterhub_config.d file (or hub.extraConfig entry)
# for a zero-to-jupyterhub hub that installs jhub-apps itself. (data-science-pack and Nebari
# install jhub-apps in their own files: leave those as they are and add only the one snippet of
# examples/data-science-pack-values.yaml.)
#
# jhub-apps subclasses the spawner class it is given: give it ColocatingKubeSpawner, so every
# app (a named server) gets the same check as JupyterLab. install_jhub_apps needs
# c.JupyterHub.bind_url (the hub's public URL: jhub-apps' OAuth callback), which the chart does
# not set. configure(c) at the end puts nebari-colocate's templates for jhub-apps' pages ahead of
# jhub-apps' own (the reason of a refused start on the page the person lands on) and validates.
# ruff: noqa: F821  (`c` and `get_config` are defined by the hub config)
from jhub_apps import theme_template_paths, themes
from jhub_apps.configuration import install_jhub_apps

from nebari_colocate import ColocatingKubeSpawner
from nebari_colocate.helm import configure

domain = get_config("custom.external-url", None)
c.JupyterHub.bind_url = f"https://{domain}" if domain else "http://127.0.0.1:8000"
c.JupyterHub.default_url = "/hub/home"
c.JupyterHub.template_paths = theme_template_paths
c.JupyterHub.template_vars = dict(themes.DEFAULT_THEME)

c = install_jhub_apps(c, spawner_to_subclass=ColocatingKubeSpawner)
configure(c)
