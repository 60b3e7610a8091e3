# data-science-pack / Nebari hub config: 01-spawner.py
#
# Switch the hub's spawner to ColocatingKubeSpawner. Everything else a deployment sets on
# KubeSpawner (profile_list, storage, images, hooks) keeps working: ColocatingKubeSpawner *is* a
# KubeSpawner and reads the same c.KubeSpawner settings.
#
# Remove any hand-written hard pod affinity that keeps a user's pods together: the library emits
# the co-location affinity itself, and only when the volume needs it.
from nebari_colocate import ColocatingKubeSpawner
from nebari_colocate.helm import configure

c = get_config()  # noqa: F821  (provided by JupyterHub when it loads this file)

c.JupyterHub.spawner_class = ColocatingKubeSpawner  # or the entry point name: "colocate"

# custom.storage-access-mode / custom.storage-class / custom.colocate-* from the helm values,
# validated now: a bad value stops the hub at start with a message naming it.
configure(c)

# A CPU app forced onto the node of a GPU lab keeps the GPU node alive: warn (default), or refuse.
c.ColocatingKubeSpawner.premium_node_policy = "warn"

# JupyterHub 5 counts refused spawns toward consecutive_failure_limit (zero-to-jupyterhub sets 5)
# and stops the hub at the limit. JupyterHub 6 counts only server errors. On JupyterHub 5:
c.Spawner.consecutive_failure_limit = 0
