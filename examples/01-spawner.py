# data-science-pack / Nebari hub config: 01-spawner.py (additions for nebari-colocate)
#
# zero-to-jupyterhub's jupyterhub_config.py executes this file with `c` already defined, and with
# `get_config` being z2jh.get_config(key, default=None), which reads the chart's values.
#
# ColocatingKubeSpawner *is* a KubeSpawner and reads the same c.KubeSpawner settings
# (profile_list, storage, images, hooks), so everything else in this file stays as it is. Remove:
#   - any hand-written hard podAffinity that keeps a user's pods together (for example in
#     c.KubeSpawner.extra_pod_config): the spawner emits it itself, only when the volume needs it;
#   - any hard-coded c.KubeSpawner.storage_access_modes: custom.storage-access-mode sets it.
from nebari_colocate.helm import configure

c.JupyterHub.spawner_class = "colocate"  # noqa: F821  (02-jhub-apps.py subclasses it)

# custom.storage-access-mode / custom.storage-class / custom.colocate-* from the helm values,
# validated now: a bad value stops the hub at start with a message naming it.
configure(c)  # noqa: F821

# A CPU app forced onto the node of a GPU lab keeps the GPU node alive: warn (default) or refuse.
c.ColocatingKubeSpawner.premium_node_policy = "warn"  # noqa: F821

# JupyterHub 5 counts refused spawns toward consecutive_failure_limit (zero-to-jupyterhub sets 5)
# and stops the hub at the limit; JupyterHub 6 counts only server errors. On JupyterHub 5:
c.Spawner.consecutive_failure_limit = 0  # noqa: F821
