"""Reading cluster dumps and pod manifests from files, hostile input refused in one line.

``nebari-colocate simulate`` (a dump and a manifest) and ``explain --pod`` (a manifest) read
files an operator gives, which no API server has seen.  This module reads them: the bytes (size,
NUL bytes, UTF-8), the YAML (PyYAML's C loader; alias bombs, recursion, deep nesting and huge
integers refused or defused), ``kind: List`` expanded, and every object the decision reads
validated as the API would (:mod:`nebari_colocate.validate`).  Every problem is one
:class:`~nebari_colocate.state.StateError` naming the file and what is wrong, never a traceback
or a hang (``docs/cli.md``).  It decides nothing: the objects it returns go into a
:class:`~nebari_colocate.state.ClusterState`.

A dump of 20,000 pods is 60 MB; with the ``fast-yaml`` extra (rapidyaml) installed, big files
are parsed ten to twenty times faster, wherever rapidyaml reads exactly what PyYAML reads.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from . import messages, preemption, validate
from .objects import JsonDict, Obj, meta, pod_claims
from .state import StateError

if TYPE_CHECKING:  # imported when a file is read
    import yaml

KINDS = (
    "Node",
    "Pod",
    "PersistentVolumeClaim",
    "PersistentVolume",
    "VolumeAttachment",
    "RuntimeClass",  # its overhead, which admission adds to a pod naming it
    "PriorityClass",  # the priority admission gives a pod naming it (preemption)
    "PodDisruptionBudget",  # which pods preemption would rather spare
)


# --------------------------------------------------------------------------------------------------
# files: size, encoding, YAML, the guards against hostile input


def flatten_objects(documents: Iterable[object], source: str) -> list[JsonDict]:
    """Objects from YAML documents, expanding ``kind: List`` (and ``PodList`` ...) items."""
    objects: list[JsonDict] = []
    for index, doc in enumerate(documents):
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise StateError(f"{source}: document {index + 1} is not a mapping")
        kind = doc.get("kind")
        if isinstance(kind, str) and kind.endswith("List"):
            items = doc.get("items") or []
            if not isinstance(items, list):
                raise StateError(f"{source}: document {index + 1}: items is not a list")
            item_kind = kind[: -len("List")] or None
            for item in items:
                if not isinstance(item, dict):
                    raise StateError(f"{source}: document {index + 1}: an item is not a mapping")
                if "kind" not in item and item_kind:
                    item = {**item, "kind": item_kind}
                objects.append(item)
        else:
            objects.append(doc)
    return objects


#: the largest file read: a 20,000-pod dump is about 60 MB
MAX_FILE_BYTES = 256 * 2**20
#: aliases may repeat at most this many nodes beyond the document's own (an alias bomb
#: expands a few hundred bytes into billions)
MAX_ALIAS_EXPANSION = 100_000
_ANCHOR = re.compile(r"(?:^|[\s\[{,])&[^\s]")
#: integer scalars longer than this stay text (int() of a huge literal is quadratic in 3.10)
_LONGEST_INT = 100


def _loader() -> type[yaml.SafeLoader | yaml.CSafeLoader]:
    """The C YAML loader (libyaml) when PyYAML has it, else the pure-Python one; both safe."""
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    # A subclass of its own, so the constructor below does not change PyYAML's loaders.
    loader = cast("type[yaml.SafeLoader | yaml.CSafeLoader]", type("Loader", (base,), {}))

    def construct_int(constructor: yaml.SafeLoader, node: yaml.ScalarNode) -> int | str:
        if len(node.value) > _LONGEST_INT:
            return str(node.value)  # a quantity reader takes the text (and saturates it)
        return yaml.SafeLoader.construct_yaml_int(constructor, node)

    loader.add_constructor("tag:yaml.org,2002:int", construct_int)
    return loader


def _expansion_problem(documents: list[Any]) -> str | None:
    """Why the documents' aliases make them unreadable (recursion, an alias bomb), or None.

    Counts the nodes of the tree with every alias expanded, in time proportional to the distinct
    nodes: each shared mapping or list is sized once.
    """
    sizes: dict[int, int] = {}
    distinct = 0
    on_path: set[int] = set()
    stack: list[tuple[object, bool]] = [(doc, False) for doc in documents]
    while stack:
        node, children_done = stack.pop()
        if not isinstance(node, (dict, list)):
            continue
        key = id(node)
        items = list(node.values()) if isinstance(node, dict) else node
        if children_done:
            on_path.discard(key)
            sizes[key] = 1 + sum(sizes.get(id(i), 1) for i in items)
            continue
        if key in sizes:
            continue
        if key in on_path:
            return "an alias refers to an object that contains it (recursive YAML)"
        distinct += 1
        on_path.add(key)
        stack.append((node, True))
        stack.extend((i, False) for i in items if isinstance(i, (dict, list)))
    expanded = sum(sizes.get(id(d), 1) for d in documents)
    if expanded > 2 * distinct + MAX_ALIAS_EXPANSION:
        return (
            f"its aliases expand {distinct} mappings and lists into {expanded} "
            "(an alias bomb?); kubectl never writes aliases: expand them or remove them"
        )
    return None


def read_text(path: str | Path, *, max_bytes: int | None = None) -> str:
    """The text of a user-supplied file, or StateError naming the file and the problem
    (unreadable, larger than ``max_bytes`` (default :data:`MAX_FILE_BYTES`), not UTF-8 text)."""
    path = Path(path)
    max_bytes = MAX_FILE_BYTES if max_bytes is None else max_bytes
    try:
        with open(path, "rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as exc:
        raise StateError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(data) > max_bytes:
        raise StateError(
            f"{path}: larger than {max_bytes // 2**20} MiB; split the dump (one namespace, or "
            "only the nodes and pods involved)"
        )
    if b"\0" in data:
        raise StateError(f"{path}: a binary file (NUL byte at offset {data.index(0)}), not YAML")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise StateError(f"{path}: not UTF-8 text (invalid byte at offset {exc.start})") from None


#: below this size PyYAML's C loader is fast enough; above it rapidyaml is used when installed
FAST_YAML_BYTES = 1 << 20
# Plain scalars that YAML 1.1 (PyYAML, and Kubernetes' own YAML reader) types differently from
# rapidyaml's JSON output: yes/no/on/off, ~, octal, hexadecimal, sexagesimal, .inf/.nan, dates,
# underscores in numbers, exponents without a dot, and numbers JSON does not have (+1, 01, .5).
_YAML_1_1_BODY = (
    r"(?=[-+.~0-9yYnNoOTF])(?:(?:[yYnN]|[yY]es|YES|[nN]o|NO|[oO]n|ON|[oO]ff|OFF|True|TRUE|False"
    r"|FALSE|Null|NULL|~|[-+]?0b[01_]+|[-+]?0[0-7_]+|[-+]?0x[0-9a-fA-F_]+"
    r"|[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?|[-+]?[0-9][0-9_]*_[0-9_]*(?:\.[0-9_]*)?"
    r"|\+[0-9.][0-9_.eE+-]*|[-+]?\.[0-9_]+(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF|nan|NaN|NAN)"
    r"|[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+|[-+]?[0-9]+\."
    r")(?=[ \t]*(?:$|[,\]}]|[ \t]#))|[0-9]{4}-[0-9]{1,2}-[0-9]{1,2})"
)
# A mapping value or a sequence item; each pattern starts with a literal, which the regular
# expression engine finds at memchr speed (one alternation of both is five times slower).
_YAML_1_1_ONLY = tuple(re.compile(p + _YAML_1_1_BODY, re.MULTILINE) for p in (": ", "- "))
_TAG = re.compile(r"(?:^|[\s\[{,])!")


def _fast_documents(text: str) -> list[Any] | None:
    """The documents of a big dump through rapidyaml (C++) and the json module, ten to twenty
    times faster than PyYAML's C loader; None where it does not apply (not installed, a small
    file, anchors, tags, or a plain scalar YAML 1.1 reads differently), or fails."""
    if len(text) < FAST_YAML_BYTES:
        return None
    try:
        import ryml
    except ImportError:
        return None
    if _ANCHOR.search(text) or _TAG.search(text) or any(p.search(text) for p in _YAML_1_1_ONLY):
        return None
    try:
        with _quiet_stderr():  # rapidyaml reports its errors on file descriptor 2 as well
            # Parsed in place (no copy into an arena); the tree and the buffer are dropped
            # before the JSON becomes Python objects, which keeps the peak memory down.
            buffer = bytearray(text, "utf-8")
            tree = ryml.parse_in_place(buffer)
            root = tree.root_id()
            ids = [root]
            if tree.is_stream(root):
                ids, child = [], tree.first_child(root)
                while child != ryml.NONE:
                    ids.append(child)
                    child = tree.next_sibling(child)
            emitted = [ryml.emit_json_malloc(tree, i) for i in ids]
        del tree, buffer
        return [json.loads(emitted.pop(0)) for _ in range(len(emitted))]
    except Exception:  # a parse or depth error: PyYAML reads it again and names the problem
        return None


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    import os
    import sys

    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def parse_documents(text: str, source: str) -> list[Any]:
    """YAML (or JSON, which is YAML) documents of ``text``; StateError names ``source``."""
    import yaml

    stripped = text.lstrip()
    try:
        if stripped[:1] in ("{", "["):
            # JSON: the json module is several times faster than any YAML loader.
            try:
                return [json.loads(text)]
            except ValueError:
                pass  # flow-style YAML, or broken JSON: let the YAML loader say where
        fast = _fast_documents(text)
        if fast is not None:
            return fast
        documents = list(yaml.load_all(text, Loader=_loader()))
    except yaml.YAMLError as exc:
        problem = " ".join(str(exc).split())
        raise StateError(f"{source}: not valid YAML: {problem}") from None
    except RecursionError:
        raise StateError(f"{source}: nested too deeply to be a Kubernetes object") from None
    if _ANCHOR.search(text):  # no anchor, no alias: nothing to expand
        expansion = _expansion_problem(documents)
        if expansion:
            raise StateError(f"{source}: {expansion}")
    return documents


def read_yaml(path: str | Path) -> list[JsonDict]:
    """All objects in a YAML or JSON file, or StateError naming the file and the problem."""
    text = read_text(path)
    return flatten_objects(parse_documents(text, str(path)), str(path))


def read_objects(
    path: str | Path,
    *,
    read: Callable[[Obj], bool] | None = None,
    saturated: list[str] | None = None,
) -> list[JsonDict]:
    """The objects of the kinds the decision reads (:data:`KINDS`) in a YAML or JSON file, each
    validated as the API would (``nebari_colocate.validate``); StateError names the file, the
    object and the problem.  ``read`` and ``saturated``: see ``validate.check_objects`` (a
    quantity beyond int64 in an object the decision does not read is recorded, not refused)."""
    return checked_objects(read_yaml(path), path, read=read, saturated=saturated)


def checked_objects(
    objects: list[JsonDict],
    path: str | Path,
    *,
    read: Callable[[Obj], bool] | None = None,
    saturated: list[str] | None = None,
) -> list[JsonDict]:
    """:func:`read_objects` on objects already read from ``path`` (the same checks and names)."""
    found: list[str] = []
    try:
        validate.check_objects(objects, read=read, saturated=found if read is not None else None)
    except validate.InvalidObject as exc:
        raise StateError(f"{path}: {exc}") from None
    if saturated is not None:
        saturated.extend(f"{path}: {line}" for line in found)
    return [o for o in objects if o.get("kind") in KINDS]


def read_by_decision(pod: Obj, namespace: str) -> Callable[[Obj], bool]:
    """Whether the decision on ``pod`` reads an object itself, rather than only summing it into
    a node's usage: the pod's claims and the pods of its namespace that mount them."""
    claims = set(pod_claims(pod))

    def read(obj: Obj) -> bool:
        if (meta(obj).get("namespace") or namespace) != namespace:
            return False
        if obj.get("kind") == "PersistentVolumeClaim":
            return meta(obj).get("name") in claims
        if obj.get("kind") == "Pod":
            return bool(claims.intersection(pod_claims(obj)))
        return False

    return read


# --------------------------------------------------------------------------------------------------
# what simulate and explain read: one pod manifest, and a dump to judge it against


def read_pod(path: str | Path) -> JsonDict:
    """The one Pod of a manifest file, validated as the API would (invalid input whatever the
    verdict, not only when a fit check happens to read the bad field)."""
    objects = read_yaml(path)
    pods = [o for o in objects if o.get("kind", "Pod") == "Pod"]
    if len(pods) != 1:
        raise StateError(f"{path}: expected exactly one Pod, found {len(pods)}")
    pod = pods[0]
    if not isinstance(pod.get("spec"), dict):
        raise StateError(f"{path}: the Pod has no spec")
    try:
        validate.check_pod(pod, name_required=False)
    except validate.InvalidObject as exc:
        raise StateError(f"{path}: {exc}") from None
    return pod


#: where ``simulate`` took the namespace it judges the pod in (JSON ``namespace_from``)
NAMESPACE_FROM_POD, NAMESPACE_FROM_DUMP, NAMESPACE_ASSUMED = "pod", "dump", "assumed"


def simulated_namespace(pod: Obj, objects: Iterable[Obj]) -> tuple[str, str]:
    """(namespace, where it came from) for judging ``pod``: its own ``metadata.namespace``
    (KubeSpawner's manifest has none); else the one namespace of the dump that has the pod's
    claims, else of the pods that mount them, else of every pod and claim; else ``default``,
    assumed (none, or more than one)."""
    own = meta(pod).get("namespace")
    if own:
        return own, NAMESPACE_FROM_POD
    claims = set(pod_claims(pod))
    namespaced = [
        o for o in objects if o.get("kind") in ("Pod", "PersistentVolumeClaim") and meta(o)
    ]
    with_claims = {
        meta(o).get("namespace") or "default"
        for o in namespaced
        if o.get("kind") == "PersistentVolumeClaim" and meta(o).get("name") in claims
    }
    if not with_claims:  # no claim of the pod in the dump: the pods that mount them, if any
        with_claims = {
            meta(o).get("namespace") or "default"
            for o in namespaced
            if o.get("kind") == "Pod" and claims.intersection(pod_claims(o))
        }
    if not with_claims:
        with_claims = {meta(o).get("namespace") or "default" for o in namespaced}
    if len(with_claims) == 1:
        return next(iter(with_claims)), NAMESPACE_FROM_DUMP
    return "default", NAMESPACE_ASSUMED


class Simulation(NamedTuple):
    """What ``simulate`` judges: the pod as admission leaves it, in the namespace found for
    it, and the dump's objects of :data:`KINDS`."""

    pod: JsonDict
    objects: list[JsonDict]
    namespace: str
    namespace_from: str  # NAMESPACE_FROM_POD, NAMESPACE_FROM_DUMP or NAMESPACE_ASSUMED
    #: what was counted other than as written (one line each, naming the file)
    notes: list[str]


def read_simulation(state_path: str | Path, pod_path: str | Path) -> Simulation:
    """The manifest at ``pod_path`` and the dump at ``state_path``, read and validated in one
    pass over the dump.

    Each object is checked once, a quantity beyond int64 in a Pod or a Node set aside rather
    than refused, which lets the namespace be found from objects known to be well formed; then
    such a quantity is refused in an object the decision on the pod reads itself
    (:func:`read_by_decision`), and noted in any other (the scheduler only sums it, saturated).
    """
    pod = read_pod(pod_path)
    raw = read_yaml(state_path)
    saturated: dict[int, list[str]] = {}
    try:
        for index, obj in enumerate(raw):
            found = validate.check_object(index, obj, lenient=True)
            if found:
                saturated[index] = found
    except validate.InvalidObject as exc:
        raise StateError(f"{state_path}: {exc}") from None
    objects = [o for o in raw if o.get("kind") in KINDS]
    namespace, namespace_from = simulated_namespace(pod, objects)
    pod.setdefault("metadata", {})["namespace"] = namespace
    read = read_by_decision(pod, namespace)
    notes: list[str] = []
    for index, lines in saturated.items():
        if validate.reads(read, raw[index]):
            try:
                validate.check_object(index, raw[index])
            except validate.InvalidObject as exc:
                raise StateError(f"{state_path}: {exc}") from None
        else:
            notes.extend(f"{state_path}: {line}" for line in lines)
    runtime_classes = {
        meta(o).get("name", ""): o for o in objects if o.get("kind") == "RuntimeClass"
    }
    try:
        pod, no_runtime_class = validate.admit_runtime_class(pod, runtime_classes)
    except validate.InvalidObject as exc:
        raise StateError(f"{pod_path} with {state_path}: {exc}") from None
    if no_runtime_class:
        notes.append(f"{pod_path}: {no_runtime_class}")
    classes = {meta(o).get("name", ""): o for o in objects if o.get("kind") == "PriorityClass"}
    admitted = preemption.admitted_priority(pod, classes)
    if admitted.missing_class:
        note = messages.missing_priority_class_note(admitted.missing_class, admitted.priority)
        notes.append(f"{pod_path}: {note}")
    return Simulation(pod, objects, namespace, namespace_from, notes)
