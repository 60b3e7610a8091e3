"""Volume-aware co-location for KubeSpawner."""

__version__ = "0.1.0"
