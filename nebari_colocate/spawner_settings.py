"""The settings of :class:`~nebari_colocate.spawner.ColocatingKubeSpawner` (its traits), apart
from what it does with them.

:class:`ColocationSettings` is a base of the spawner, beside
:class:`~nebari_colocate.headroom_spawner.HeadroomSpawner`: set them in the hub's config as
``c.ColocatingKubeSpawner.<name>`` (every setting's validator is in
:data:`nebari_colocate.config.SETTINGS`; the spawner applies them, and ``configure(c)``'s helm
keys map onto them, ``docs/configuration.md``).
"""

from __future__ import annotations

from traitlets import Bool, CaselessStrEnum, Float, List, Unicode
from traitlets.config import LoggingConfigurable

from .config import (
    ACCESS_MODES,
    COLOCATION_MODES,
    DEFAULT_ACCESS_MODE,
    DEFAULT_CHECK_TIMEOUT,
    DEFAULT_COLOCATION_MODE,
    DEFAULT_DETACH_GRACE_SECONDS,
    DEFAULT_DRY_RUN_REUSE_SECONDS,
    DEFAULT_FAIL_FAST_ON_EVENTS,
    DEFAULT_IMAGE_PULL_GRACE_SECONDS,
    DEFAULT_LABEL_KEY,
    DEFAULT_PREMIUM_NODE_POLICY,
    DEFAULT_PREMIUM_RESOURCES,
    DEFAULT_REFUSAL_HOLD_SECONDS,
    DEFAULT_SERVER_DISPLAY_NAME,
    DEFAULT_SHARE_POD_WATCH,
    DEFAULT_UNSCHEDULABLE_GRACE_SECONDS,
    DEFAULT_UNSCHEDULED_TIMEOUT_SECONDS,
    DEFAULT_WATCH_STALE_SECONDS,
    DEFAULT_WAY_OUT_RELEASE_TIMEOUT,
    PREMIUM_POLICIES,
)


class ColocationSettings(LoggingConfigurable):
    """Every setting of nebari-colocate's spawner but headroom's
    (:class:`~nebari_colocate.headroom_spawner.HeadroomSpawner`)."""

    storage_access_mode = CaselessStrEnum(
        list(ACCESS_MODES),
        default_value=DEFAULT_ACCESS_MODE,
        config=True,
        help="""
        Access mode of the home volumes this hub creates: ``ReadWriteOnce`` or ``ReadWriteMany``
        (case-insensitive). Default: ``ReadWriteOnce``.

        It sets KubeSpawner's ``storage_access_modes`` for new PVCs, and it is how a claim that
        does not exist yet is judged.  With ``ReadWriteOnce`` a volume attaches to one node at a
        time, so every server of a user is co-located on one node; with ``ReadWriteMany`` (NFS,
        CephFS, EFS, Longhorn RWX) servers go wherever the scheduler likes, at a metadata-latency
        cost for small-file workloads.  Access modes of existing claims are immutable: claims
        created before a switch keep their mode, and are judged by it.  ``ReadWriteMany``
        requires ``storage_class`` when the hub creates the claims (``storage_pvc_ensure``, as
        zero-to-jupyterhub's dynamic storage sets it); a hub on claims made by others (Nebari's
        static storage) needs none.
        """,
    )

    colocation_mode = CaselessStrEnum(
        list(COLOCATION_MODES),
        default_value=DEFAULT_COLOCATION_MODE,
        config=True,
        help="""
        ``enforce`` (the default): act on every decision.  ``observe``: decide every spawn as
        ``enforce`` does and record what it would have done (the hub log's "observe: would
        refuse alice's 'gpu-lab': ...", metrics with ``mode="observe"``, the operator's page),
        but change nothing: no refusal, no label or affinity of ours (hand-written co-location
        terms stay), no fail fast, no way out.  Observe for a week, then enforce
        (docs/rollout.md).
        """,
    )

    colocation_label_key = Unicode(
        DEFAULT_LABEL_KEY,
        config=True,
        help="""
        Label put on every user pod; its value is KubeSpawner's safe slug of the username (the
        name itself when it is a valid label value, else a strip-and-hash form).  The required
        pod affinity selects on it.  Default: ``nebari.dev/colocate-user``.  Changing it on a
        running hub means pods started before the change are found only by their volumes.
        """,
    )

    premium_resources = List(
        Unicode(),
        default_value=list(DEFAULT_PREMIUM_RESOURCES),
        config=True,
        help="""
        Extended resources that make a node "premium" (expensive): a node whose allocatable has
        any of them above zero.  Used by ``premium_node_policy``.
        Default: ``["nvidia.com/gpu", "amd.com/gpu"]``.
        """,
    )

    premium_node_policy = CaselessStrEnum(
        list(PREMIUM_POLICIES),
        default_value=DEFAULT_PREMIUM_NODE_POLICY,
        config=True,
        help="""
        What to do when co-location would put a server that requests no premium resource on a
        premium node (a CPU app forced onto the node of a GPU lab keeps the GPU node from scaling
        down): ``allow`` it silently, ``warn`` (start it and log a warning; the default), or
        ``refuse`` it with a message telling the user to stop the GPU server first.
        """,
    )

    colocation_check_timeout = Float(
        DEFAULT_CHECK_TIMEOUT,
        config=True,
        help="""
        The most seconds the pre-spawn check may wait on the Kubernetes API.  Past it the spawn
        proceeds on the safe side: the co-location affinity is still emitted (pinned to a
        holder's node when one is known from the live view or the pod reflector), the hub log
        says why and ``nebari_colocate_safe_side_total`` counts it.  Default: 5.  At least 0.25
        (on the first check after hub start, or while the live view is not live, the check makes
        up to four rounds of API requests); less is refused at hub start.  Keep it well below
        ``start_timeout``: the check runs inside the start.
        """,
    )

    colocation_watch_stale_seconds = Float(
        DEFAULT_WATCH_STALE_SECONDS,
        config=True,
        help="""
        Seconds a watch of the live view may go without an event or a bookmark before it is no
        longer trusted and is listed again.  A watch whose network path died (a dropped NAT or
        load-balancer flow) stays open and silent, and would hide a pod that starts holding a
        user's home; kube-apiserver sends a bookmark on a quiet watch about every 60 s, so
        silence longer than that means the path is gone.  While a watch is untrusted the check
        reads the API directly.  Independently of this bound, every unpinned decision (no
        holder known) is confirmed by one namespaced LIST of pods, and a refusal by reading its
        holders by name.  Default: 75.  At least 65; less lists quiet watches again and
        again, more leaves a dead watch trusted longer.
        """,
    )

    fail_fast_on_events = Bool(
        DEFAULT_FAIL_FAST_ON_EVENTS,
        config=True,
        help="""
        While ``start()`` waits for the pod, read its events (KubeSpawner's event reflector) and
        end a spawn that cannot succeed at once, with a reason the user can act on, instead of
        waiting out ``start_timeout``: the scheduler cannot place a pod pinned to its volume's
        node, the autoscaler (cluster-autoscaler or Karpenter) says no node can be added, the
        volume is attached elsewhere (Multi-Attach), or the image name is invalid.  The pod is
        deleted.  Needs ``events_enabled`` (KubeSpawner's default).  Default: True.
        """,
    )

    colocation_share_pod_watch = Bool(
        DEFAULT_SHARE_POD_WATCH,
        config=True,
        help="""
        Let KubeSpawner's pod reflector read the live view's watch of the pods instead of
        watching the same pods a second time.  KubeSpawner's own reflector keeps every server
        pod whole and lists them all again every 10 s (one JSON parse of the whole list on the
        hub's event loop); the view keeps each pod slim, lists page by page, and lists again
        only after a broken watch.  While a start or a stop waits on its pod and the view's
        watch of the pods is quiet (5 s without an event or a bookmark) or broken, that pod is
        read by name (one GET, every 1 s at first, every 8 s at most), so a watch that goes
        silent on a dead network path does not hide a starting pod's Running; ``poll()`` reads
        its server's pod so too while the watch is quiet, so a pod deleted behind the hub's back
        is seen stopped.  Default: True.
        KubeSpawner's own reflector is used anyway
        when the view's pods may not be listed (RBAC), and when KubeSpawner or a hook reads
        more of a pod than the view keeps (``internal_ssl``, ``services_enabled``,
        ``after_pod_created_hook``, ``get_pod_url``).  False: always KubeSpawner's own.
        """,
    )

    colocation_dry_run_reuse_seconds = Float(
        DEFAULT_DRY_RUN_REUSE_SECONDS,
        config=True,
        help="""
        Seconds the server-side dry run of a pinned pod serves the pinned pods of the same
        shape: the same namespace, images, resources, node selector, tolerations, affinity,
        RuntimeClass, priority class and service account (names, labels, environment and
        claims may differ).  Their check is taken on the pod with the admitted fields of that
        dry run (resources, overhead, tolerations, affinity...) instead of a dry run of its own,
        and checks that ask at once share the one dry run in flight: a class whose 100 users
        each start an app makes one dry run, not 100.  A webhook that sets resources from the
        pod's user would be judged by another user's pod; the pod is then refused on
        kube-scheduler's FailedScheduling at once instead of before it is created.  A reused
        dry run never refuses a pod alone: a refusal on it is taken again on a dry run of the
        pod's own (what admission reads, a LimitRange, a RuntimeClass, may have changed since).
        0 or less: a dry run for every pinned pod.  Default: 600.
        """,
    )

    unschedulable_grace_seconds = Float(
        DEFAULT_UNSCHEDULABLE_GRACE_SECONDS,
        config=True,
        help="""
        Seconds an unpinned pod may stay unschedulable with no word from an autoscaler before the
        spawn is ended (a scale-up in progress keeps it waiting).  0 disables this rule: such a
        pod waits for ``start_timeout``.  Default: 60.
        """,
    )

    image_pull_grace_seconds = Float(
        DEFAULT_IMAGE_PULL_GRACE_SECONDS,
        config=True,
        help="""
        Seconds image pulls may keep failing (``ErrImagePull`` / ``ImagePullBackOff``, which can
        heal: a registry hiccup) before the spawn is ended.  0 disables this rule.  Invalid
        image names end the spawn at once regardless.  Default: 120.
        """,
    )

    detach_grace_seconds = Float(
        DEFAULT_DETACH_GRACE_SECONDS,
        config=True,
        help="""
        Seconds the pod's volume may stay attached to another node where no pod uses it any
        more (a detach under way: the old node's kubelet unmounts, then the attach/detach
        controller detaches, usually within seconds) before the spawn is ended
        (``multi-attach``: an unmount that hangs).  A volume another pod still uses ends the
        spawn at once.  0 disables this rule: such a pod waits for ``start_timeout``.
        Default: 60.
        """,
    )

    colocation_unscheduled_timeout = Float(
        DEFAULT_UNSCHEDULED_TIMEOUT_SECONDS,
        config=True,
        help="""
        Seconds a created pod may go with no word from any scheduler (not bound, no
        ``PodScheduled`` condition, not one event) before the spawn is ended with "No scheduler
        has picked up your server: the cluster's scheduler 'X' may not be running"; the hub log
        names the scheduler.  A pod whose ``schedulerName`` no running scheduler serves
        (zero-to-jupyterhub's user-scheduler Deployment down, a typo in ``scheduler_name``)
        stays Pending with no event at all, and would wait out ``start_timeout``.  A running
        kube-scheduler binds a pod or says why not within a second or two; a user-scheduler's
        leader failover takes about 15 s.  Default: 30.  Shorter ends such spawns sooner but
        risks ending one a busy scheduler had not reached yet (at least 5); 0 disables it.
        """,
    )

    refusal_hold_seconds = Float(
        DEFAULT_REFUSAL_HOLD_SECONDS,
        config=True,
        help="""
        Seconds a refused spawn that was requested through the REST API stays pending before it
        fails, with the reason already in its progress stream.  Under zero-to-jupyterhub
        (``slow_spawn_timeout`` 0) the REST API answers 202 before any refusal, and jhub-apps'
        pages learn how a start ended only by looking again: held this long, the refusal reaches
        JupyterHub's spawn-pending page that jhub-apps' "Create app" opens, and the home page
        nebari-colocate installs for jhub-apps.  Spawns from JupyterHub's own spawn form are
        never held (the form shows a quick refusal itself).  0 disables it.  Default: 3.
        """,
    )

    way_out_release_timeout = Float(
        DEFAULT_WAY_OUT_RELEASE_TIMEOUT,
        config=True,
        help="""
        The most seconds the way out (a refusal's "Stop 'Pandas App' and start 'JupyterLab'"
        button, ``docs/decisions.md``) waits, after stopping the servers that block a start,
        for the home volume to be released: their pods gone and, when every holder was
        stopped, no VolumeAttachment left attached on the old node (the attach/detach
        controller detaches within seconds to a minute).  Past it the way out ends with words
        and starts nothing.  Default: 120.  Longer waits on a slow storage driver; shorter
        gives up on a stuck detach sooner.
        """,
    )

    default_server_display_name = Unicode(
        DEFAULT_SERVER_DISPLAY_NAME,
        allow_none=True,
        config=True,
        help="""
        What messages call the user's default server.  ``None`` (the default): "JupyterLab" when
        jhub-apps built this spawner class (its home page shows the default server so), else
        "your default server".  Named servers are called by their display name (jhub-apps' app
        name) when they have one, else by their server name.
        """,
    )
