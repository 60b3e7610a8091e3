"""The test-support package: everything the unit, cluster, fault and end-to-end tests and the
benchmarks share, and no test.

- ``builders``: the camelCase dicts of the Kubernetes API objects, for tables;
- ``controlplane``: the real control plane of ``tests/kube`` (etcd, kube-apiserver,
  kube-scheduler, kube-controller-manager, kwok and the volume gate), started and stopped;
- ``autoscaler``: Karpenter with its kwok cloud provider, on a control plane of its own;
- ``helpers``: API object factories and waits on the real control plane;
- ``spawning``: real KubeSpawner / ColocatingKubeSpawner objects outside a hub;
- ``volume_gate``: the stand-in for a CSI node plugin that the control plane runs;
- ``waiting``: ``wait_until``, the one way a test waits for something to become true.

``tests/kube`` holds what is not Python: the Go modules of the control plane, ``build.sh`` and
the binaries it builds (``bin/``), kwok's stages and Karpenter's instance types.
"""
