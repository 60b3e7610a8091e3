# data-science-pack / Nebari hub config: 02-jhub-apps.py
#
# jhub-apps subclasses the spawner class it is given. Give it ColocatingKubeSpawner instead of
# KubeSpawner, so every app (a named server) gets the same co-location check as the lab.
# `c` is already defined by zero-to-jupyterhub's jupyterhub_config.py.
from jhub_apps.configuration import install_jhub_apps

from nebari_colocate import ColocatingKubeSpawner

c = install_jhub_apps(c, spawner_to_subclass=ColocatingKubeSpawner)  # noqa: F821
