# A zero-to-jupyterhub hub without jhub-apps: a whole jupyterhub_config.d file (or the body of a
# hub.extraConfig entry). zero-to-jupyterhub's jupyterhub_config.py executes it with `c` defined,
# after the chart's own settings (storage, profile_list, consecutive_failure_limit).
#
# configure(c) is the one call: it reads custom.storage-access-mode, custom.storage-class and
# custom.colocate-* from the helm values, switches KubeSpawner to ColocatingKubeSpawner, takes a
# hand-written co-location pod affinity out of extra_pod_config / pod_affinity_required (in
# c.Spawner and c.KubeSpawner, assigned or .append/.update-ed, and in every profile's
# kubespawner_override; the hub log says where; the spawner emits its own, only when a volume
# needs it), makes storage_access_modes follow the mode,
# and validates: a bad value stops the hub at start with a message naming it.
# ruff: noqa: F821  (`c` is defined by the hub config)
from nebari_colocate.helm import configure

# Settings of your own go before configure(c), so that it validates them too.
# A CPU app forced onto the node of a GPU lab keeps the GPU node alive: warn (default) or refuse.
c.ColocatingKubeSpawner.premium_node_policy = "warn"

configure(c)
