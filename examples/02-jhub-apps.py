# data-science-pack / Nebari hub config: 02-jhub-apps.py
#
# jhub-apps subclasses the spawner class it is given. Give it ColocatingKubeSpawner instead of
# KubeSpawner, so every app (a named server) gets the same co-location check as the lab.
from jhub_apps import install_jhub_apps

from nebari_colocate import ColocatingKubeSpawner

c = get_config()  # noqa: F821

c = install_jhub_apps(c, spawner_to_subclass=ColocatingKubeSpawner)
