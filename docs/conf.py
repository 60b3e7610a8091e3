"""Sphinx configuration: MyST pages and a configuration reference generated from the traits."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import nebari_colocate  # noqa: E402

project = "nebari-colocate"
author = "the nebari-colocate contributors"
copyright = "the nebari-colocate contributors"
release = nebari_colocate.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.intersphinx",
    "autodoc_traits",
    "myst_parser",
]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "README.md"]
default_role = "literal"

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

autodoc_member_order = "bysource"

# Links into JupyterHub's, KubeSpawner's and traitlets' documentation. The build is part of the
# test command, which reaches nothing but package registries, so intersphinx reads inventories
# kept in docs/_inventories/ (written from the installed packages by scripts/make-inventories.py)
# and never fetches objects.inv; the links still point at the published sites.
intersphinx_mapping = {
    "jupyterhub": ("https://jupyterhub.readthedocs.io/en/stable/", "_inventories/jupyterhub.inv"),
    "kubespawner": (
        "https://jupyterhub-kubespawner.readthedocs.io/en/latest/",
        "_inventories/kubespawner.inv",
    ),
    "traitlets": ("https://traitlets.readthedocs.io/en/stable/", "_inventories/traitlets.inv"),
}

html_theme = "pydata_sphinx_theme"
html_title = f"nebari-colocate {release}"
html_theme_options = {"navigation_with_keys": False}


# -- the configuration reference: the traits a class defines itself -------------------------------


def _own_config_traits(path: str) -> list[str]:
    """Names of the configurable traits defined in the class body at ``path`` and in its bases of
    this package (``HeadroomSpawner``), in source order."""
    import importlib

    from traitlets import TraitType

    module, _, name = path.rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    return [
        attr
        for klass in cls.__mro__
        if klass.__module__.startswith("nebari_colocate")
        for attr, value in vars(klass).items()
        if isinstance(value, TraitType) and value.metadata.get("config")
    ]


def setup(app):
    from docutils.parsers.rst import Directive

    class OwnTraits(Directive):
        """``.. own-traits:: package.module.Class`` (reStructuredText, so inside ``{eval-rst}`` in
        MyST pages): an ``autotrait`` for each configurable trait the class defines itself
        (``autoconfigurable`` would also list every inherited KubeSpawner trait)."""

        required_arguments = 1

        def run(self):
            from docutils import nodes
            from docutils.statemachine import StringList

            path = self.arguments[0]
            lines = []
            for trait in _own_config_traits(path):
                lines += [f".. autotrait:: {path}.{trait}", ""]
            container = nodes.container()
            self.state.nested_parse(StringList(lines, source="own-traits"), 0, container)
            return container.children

    app.add_directive("own-traits", OwnTraits)
