"""Write the Sphinx inventories (objects.inv) that docs/conf.py's intersphinx reads, offline.

The docs build is part of the test command, which talks to nothing but package registries and
127.0.0.0/8, so intersphinx must not fetch ``objects.inv`` from Read the Docs while it builds.
docs/conf.py points each mapping at a file in ``docs/_inventories/`` instead. This script writes
those files from the INSTALLED packages (jupyterhub, kubespawner, traitlets), for the pages of
their documentation that our pages link to, with each site's real layout:

- JupyterHub, https://jupyterhub.readthedocs.io/en/stable/: ``reference/api/spawner.html``
  (module ``jupyterhub.spawner``: ``SpawnException``, ``Spawner`` with its config traits and the
  members the page names, ``LocalProcessSpawner``) and ``reference/api/app.html``
  (``jupyterhub.app.JupyterHub`` and its config traits);
- KubeSpawner, https://jupyterhub-kubespawner.readthedocs.io/en/latest/: ``spawner.html``
  (module ``kubespawner``: ``KubeSpawner`` and its config traits);
- traitlets, https://traitlets.readthedocs.io/en/stable/: ``trait_types.html`` (the trait types
  of module ``traitlets``), ``api.html`` (``HasTraits``, ``default``, ``observe``, ``validate``)
  and ``config-api.html`` (``traitlets.config``: ``Configurable``, ``Application``, ``Config``).

Traits are ``py:attribute`` entries, as autodoc_traits documents them; a class's entries are the
config traits it defines itself (an inherited one is documented on the class that defines it).
The files are written by Sphinx's own writer (``sphinx.util.inventory.InventoryFile.dump``) and
read back with its reader, so the format is the one intersphinx expects. Rerun after upgrading
one of the three packages:

    .venv/bin/python scripts/make-inventories.py
"""

from __future__ import annotations

import importlib
import inspect
import sys
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from types import SimpleNamespace

from sphinx.util.inventory import InventoryFile
from traitlets import TraitType

OUT = Path(__file__).resolve().parent.parent / "docs" / "_inventories"


@dataclass
class Page:
    """One page of a site: the module it documents and what it documents of it."""

    docname: str
    module: str
    #: classes whose config traits are documented (``autoconfigurable``)
    configurables: tuple[str, ...] = ()
    #: other classes (``autoclass``), functions (``autofunction``) and methods ("Class.method")
    classes: tuple[str, ...] = ()
    functions: tuple[str, ...] = ()
    methods: tuple[str, ...] = ()
    #: whether the page declares the module (``automodule`` / ``.. module::``)
    declares_module: bool = True


@dataclass
class Site:
    project: str
    distribution: str
    filename: str
    pages: list[Page] = field(default_factory=list)


SITES = [
    Site(
        "JupyterHub",
        "jupyterhub",
        "jupyterhub.inv",
        [
            Page(
                "reference/api/spawner",
                "jupyterhub.spawner",
                configurables=("Spawner", "LocalProcessSpawner"),
                classes=("SpawnException",),
                methods=tuple(
                    f"Spawner.{name}"
                    for name in (
                        "options_from_form",
                        "user_options",
                        "poll",
                        "start",
                        "stop",
                        "get_args",
                        "get_env",
                        "get_state",
                        "template_namespace",
                        "format_string",
                        "create_certs",
                        "move_certs",
                    )
                ),
            ),
            Page("reference/api/app", "jupyterhub.app", configurables=("JupyterHub",)),
        ],
    ),
    Site(
        "kubespawner",
        "jupyterhub-kubespawner",
        "kubespawner.inv",
        [Page("spawner", "kubespawner", configurables=("KubeSpawner",))],
    ),
    Site(
        "traitlets",
        "traitlets",
        "traitlets.inv",
        [
            Page(
                "trait_types",
                "traitlets",
                classes=(
                    "TraitType",
                    "Int",
                    "Integer",
                    "Float",
                    "Complex",
                    "CInt",
                    "CFloat",
                    "Unicode",
                    "Bytes",
                    "CUnicode",
                    "ObjectName",
                    "DottedObjectName",
                    "List",
                    "Set",
                    "Tuple",
                    "Dict",
                    "Instance",
                    "Type",
                    "This",
                    "ForwardDeclaredInstance",
                    "ForwardDeclaredType",
                    "Bool",
                    "CBool",
                    "Enum",
                    "CaselessStrEnum",
                    "UseEnum",
                    "TCPAddress",
                    "CRegExp",
                    "Union",
                    "Callable",
                    "Any",
                ),
            ),
            Page(
                "api",
                "traitlets",
                classes=("HasTraits",),
                functions=("default", "observe", "validate"),
                methods=tuple(
                    f"HasTraits.{name}"
                    for name in (
                        "has_trait",
                        "trait_has_value",
                        "trait_names",
                        "class_trait_names",
                        "traits",
                        "class_traits",
                        "trait_metadata",
                        "add_traits",
                        "observe",
                    )
                ),
                # trait_types.html declares the module; api.html only sets currentmodule
                declares_module=False,
            ),
            Page(
                "config-api",
                "traitlets.config",
                classes=("Configurable", "SingletonConfigurable", "Application", "Config"),
                declares_module=False,
            ),
        ],
    ),
]


def _objects(page: Page) -> list[tuple[str, str]]:
    """(full name, object type) of everything ``page`` documents, checked against the package."""
    module = importlib.import_module(page.module)
    found: list[tuple[str, str]] = []
    if page.declares_module:
        found.append((page.module, "module"))
    for name in page.classes + page.configurables:
        getattr(module, name)  # raises if the package no longer has it
        # autoclass documents an exception class as py:class too
        found.append((f"{page.module}.{name}", "class"))
    for name in page.configurables:
        cls = getattr(module, name)
        for attr, value in vars(cls).items():
            if isinstance(value, TraitType) and value.metadata.get("config"):
                found.append((f"{page.module}.{name}.{attr}", "attribute"))
    for name in page.functions:
        if not callable(getattr(module, name)):
            raise SystemExit(f"{page.module}.{name} is not a function")
        found.append((f"{page.module}.{name}", "function"))
    for dotted in page.methods:
        cls_name, _, method = dotted.partition(".")
        member = inspect.getattr_static(getattr(module, cls_name), method)
        if isinstance(member, TraitType):
            # a trait named in :members: (options_from_form, user_options) is an attribute
            if (f"{page.module}.{dotted}", "attribute") not in found:
                found.append((f"{page.module}.{dotted}", "attribute"))
            continue
        if isinstance(member, (classmethod, staticmethod)):
            member = member.__func__
        if not inspect.isfunction(member):
            raise SystemExit(f"{page.module}.{dotted} is not a method")
        found.append((f"{page.module}.{dotted}", "method"))
    return found


class _Domain:
    """The part of a Sphinx domain that ``InventoryFile.dump`` reads."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.objects: list[tuple[str, str, str, str, str, int]] = []

    def get_objects(self) -> list[tuple[str, str, str, str, str, int]]:
        return self.objects


def write(site: Site) -> Path:
    py = _Domain("py")
    std = _Domain("std")
    for page in site.pages:
        for fullname, kind in _objects(page):
            # as Sphinx's Python domain: a module is anchored "module-<name>" with priority 0,
            # everything else by its full name with priority 1
            if kind == "module":
                py.objects.append((fullname, fullname, kind, page.docname, f"module-{fullname}", 0))
            else:
                py.objects.append((fullname, fullname, kind, page.docname, fullname, 1))
        std.objects.append((page.docname, page.docname, "doc", page.docname, "", -1))
    env = SimpleNamespace(
        config=SimpleNamespace(project=site.project, version=version(site.distribution)),
        domains=SimpleNamespace(sorted=lambda: [py, std]),
    )
    builder = SimpleNamespace(get_target_uri=lambda docname: f"{docname}.html")
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / site.filename
    InventoryFile.dump(path, env, builder)  # type: ignore[arg-type]
    # read it back as intersphinx will
    with open(path, "rb") as f:
        InventoryFile.load(f, "https://example.invalid/", lambda base, uri: f"{base}{uri}")
    return path


def main() -> int:
    for site in SITES:
        path = write(site)
        count = sum(len(_objects(page)) for page in site.pages)
        where = path.relative_to(OUT.parent.parent)
        release = version(site.distribution)
        print(f"{where}: {site.project} {release}, {count} objects on {len(site.pages)} pages")
    return 0


if __name__ == "__main__":
    sys.exit(main())
