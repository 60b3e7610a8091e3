"""Volume-aware co-location for KubeSpawner.

Importing this package has no side effects (jhub-apps re-executes the hub configuration in another
process); the spawner class is imported on first use.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # type checkers see the class; importing the package does not import it
    from .spawner import ColocatingKubeSpawner

__version__ = "0.1.0"
__all__ = ["ColocatingKubeSpawner", "__version__"]


def __getattr__(name: str) -> type:
    if name == "ColocatingKubeSpawner":
        from .spawner import ColocatingKubeSpawner

        return ColocatingKubeSpawner
    raise AttributeError(f"module 'nebari_colocate' has no attribute {name!r}")
