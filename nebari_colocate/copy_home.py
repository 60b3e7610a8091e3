"""Copy one home directory tree to another and prove the copy, for ``nebari-colocate migrate``.

The migration's copy pod runs this file with the image's ``python3`` (any Python >= 3.8, standard
library only; it is passed as ``python3 -c <source>`` so no ConfigMap is needed)::

    python3 copy_home.py SRC DST [--replace-destination] [--summary-file PATH] [--manifest PATH]

SRC is the old volume (mounted read-only), DST the new one.  It copies keeping ownership,
permission bits, hard links, symlinks (never followed), timestamps (mtime and atime, nanoseconds),
extended attributes (POSIX ACLs included), FIFOs and device nodes, and names that are not UTF-8
(paths are handled as bytes throughout).  Sockets cannot be copied and are counted as skipped.
A top-level ``lost+found`` (file system bookkeeping) is left out on both sides.

Then it verifies: it walks both trees again and builds a checksum manifest of each (type, mode,
owner, size, mtime, SHA-256 of the content or the link target, hard-link groups, extended
attributes), and compares them with each other and with the manifest of what it read while
copying.  A file that changed while it was read, or after it was copied, is detected.

Exit status: 0 verified; 3 the copy differs from the source; 4 the source changed during the
copy; 1 any other error (a permission, a full disk); 2 bad arguments.  The last line of standard
output, and the summary file when given (the pod's termination message), is one JSON object:
``{"result": "verified" | "mismatch" | "changed" | "error", "entries": n, "files": n,
"bytes": n, "digest": "<sha256 of the manifest>", "skipped_sockets": n, "problems": [...]}``.

See docs/migrate.md.
"""

from __future__ import annotations

import argparse
import errno
import hashlib
import json
import os
import stat
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # names for annotations only: the copy pod's Python may be as old as 3.8
    from collections.abc import Callable, Iterator, Sequence

    #: a manifest entry: the values of FIELDS, in that order
    Entry = tuple[Any, ...]
    #: relative path -> entry
    Manifest = dict[bytes, Entry]
    #: sorted (name, sha256 of the value) of extended attributes
    Xattrs = tuple[tuple[str, str], ...]
    Inode = tuple[int, int]

VERIFIED, MISMATCH, CHANGED, ERROR = "verified", "mismatch", "changed", "error"
EXIT = {VERIFIED: 0, ERROR: 1, MISMATCH: 3, CHANGED: 4}
#: entries at the top of a volume that belong to the file system, not to the user
EXCLUDED_TOP = frozenset({b"lost+found"})
#: extended attributes a file system sets on its own (SELinux labels follow the new mount)
SKIPPED_XATTRS = frozenset({"security.selinux"})
CHUNK = 1 << 20
MAX_PROBLEMS = 20

#: hooks for tests: called with (relative path) after a file's content was copied, and with
#: (relative path, chunk index) after each chunk read
after_file: Callable[[bytes], None] | None = None
after_chunk: Callable[[bytes, int], None] | None = None


class CopyError(Exception):
    """A failure that ends the copy; the message names the path."""


def _show(rel: bytes) -> str:
    """A relative path for people: undecodable bytes escaped, never raw control characters."""
    text = os.fsdecode(rel) if rel else "."
    return repr(text)[1:-1] if not text.isprintable() else text


def _join(root: bytes, rel: bytes) -> bytes:
    return root + b"/" + rel if rel else root


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "d"
    if stat.S_ISREG(mode):
        return "f"
    if stat.S_ISLNK(mode):
        return "l"
    if stat.S_ISFIFO(mode):
        return "p"
    if stat.S_ISCHR(mode):
        return "c"
    if stat.S_ISBLK(mode):
        return "b"
    if stat.S_ISSOCK(mode):
        return "s"
    return "?"


def _xattrs(path: bytes | int, follow: bool = False) -> Xattrs:
    """Sorted (name, sha256 of value) of a path's (or an fd's) extended attributes."""
    try:
        if isinstance(path, int):
            names = os.listxattr(path)
        else:
            names = os.listxattr(path, follow_symlinks=follow)
    except OSError as exc:
        if exc.errno in (errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS):
            return ()
        raise
    found: list[tuple[str, str]] = []
    for name in sorted(n for n in names if n not in SKIPPED_XATTRS):
        if isinstance(path, int):
            value = os.getxattr(path, name)
        else:
            value = os.getxattr(path, name, follow_symlinks=follow)
        found.append((name, hashlib.sha256(value).hexdigest()))
    return tuple(found)


def _copy_xattrs(src: bytes | int, dst: bytes | int, follow: bool = False) -> None:
    try:
        if isinstance(src, int):
            names = os.listxattr(src)
        else:
            names = os.listxattr(src, follow_symlinks=follow)
    except OSError as exc:
        if exc.errno in (errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS):
            return
        raise
    for name in names:
        if name in SKIPPED_XATTRS:
            continue
        if isinstance(src, int):
            os.setxattr(dst, name, os.getxattr(src, name))
        else:
            value = os.getxattr(src, name, follow_symlinks=follow)
            os.setxattr(dst, name, value, follow_symlinks=follow)


def _entries(root: bytes) -> Iterator[tuple[bytes, os.stat_result]]:
    """(relative path, lstat) of every entry under root, parents before children, sorted."""
    yield b"", os.lstat(root)
    stack = [b""]
    while stack:
        rel = stack.pop()
        with os.scandir(_join(root, rel)) as it:
            children = sorted(it, key=lambda e: e.name)
        subdirs = []
        for entry in children:
            if not rel and entry.name in EXCLUDED_TOP:
                continue
            child = rel + b"/" + entry.name if rel else entry.name
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                subdirs.append(child)
            yield child, st
        stack.extend(reversed(subdirs))  # so they are visited in sorted order


def _hash_fd(fd: int) -> str:
    digest = hashlib.sha256()
    while True:
        block = os.read(fd, CHUNK)
        if not block:
            return digest.hexdigest()
        digest.update(block)


def _record(kind: str, st: os.stat_result, content: str, xattrs: Xattrs) -> Entry:
    size = st.st_size if kind == "f" else 0  # a directory's size depends on the file system
    return (
        kind,
        stat.S_IMODE(st.st_mode),
        st.st_uid,
        st.st_gid,
        size,
        st.st_mtime_ns,
        content,
        xattrs,
    )


def scan(root: bytes) -> Manifest:
    """The manifest of a tree: relative path -> (kind, mode, uid, gid, size, mtime_ns, content,
    xattrs, hard-link group).  Content is the SHA-256 of a file, the target of a symlink, the
    device number of a device node.  The hard-link group is the first path (in sorted order) of
    the files of the tree sharing the inode, or "" for a file linked once."""
    manifest: dict[bytes, list[Any]] = {}
    by_inode: dict[Inode, list[bytes]] = {}
    for rel, st in _entries(root):
        kind = _kind(st.st_mode)
        if kind == "s":
            continue
        path = _join(root, rel)
        content = ""
        if kind == "f":
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            try:
                content = _hash_fd(fd)
                xattrs = _xattrs(fd)
            finally:
                os.close(fd)
            if st.st_nlink > 1:
                by_inode.setdefault((st.st_dev, st.st_ino), []).append(rel)
        else:
            if kind == "l":
                content = os.fsdecode(os.readlink(path))
            elif kind in ("c", "b"):
                content = f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
            xattrs = _xattrs(path)
        manifest[rel] = [*_record(kind, st, content, xattrs), ""]
    for paths in by_inode.values():
        if len(paths) > 1:
            first = os.fsdecode(min(paths))
            for rel in paths:
                manifest[rel][8] = first
    return {rel: tuple(v) for rel, v in manifest.items()}


def digest(manifest: Manifest) -> str:
    """SHA-256 of a manifest in a stable text form."""
    h = hashlib.sha256()
    for rel in sorted(manifest):
        h.update(rel + b"\0" + json.dumps(manifest[rel]).encode() + b"\n")
    return h.hexdigest()


FIELDS = ("type", "mode", "uid", "gid", "size", "mtime", "content", "xattrs", "hard links")


def differences(
    left: Manifest, right: Manifest, limit: int = MAX_PROBLEMS
) -> tuple[int, list[str]]:
    """(count, the first ``limit`` differences in words) between two manifests."""
    found: list[str] = []
    count = 0
    for rel in sorted(set(left) | set(right)):
        a, b = left.get(rel), right.get(rel)
        if a == b:
            continue
        count += 1
        if len(found) >= limit:
            continue
        if a is None or b is None:
            side = "only in the source" if b is None else "only in the copy"
            found.append(f"{_show(rel)}: {side}")
        else:
            fields = [FIELDS[i] for i in range(len(FIELDS)) if a[i] != b[i]]
            found.append(f"{_show(rel)}: {', '.join(fields)} differ")
    return count, found


def _empty(root: bytes) -> bool:
    with os.scandir(root) as it:
        return all(e.name in EXCLUDED_TOP for e in it)


def _clear(root: bytes) -> None:
    """Remove everything under root (the destination of an earlier, unfinished attempt)."""
    for rel, st in reversed(list(_entries(root))):
        if not rel:
            continue
        path = _join(root, rel)
        if stat.S_ISDIR(st.st_mode):
            os.rmdir(path)
        else:
            os.unlink(path)


def _set_meta(path: bytes, st: os.stat_result, kind: str) -> None:
    """Owner, then mode (chown clears set-id bits), then times; symlinks are never followed."""
    if kind == "l":
        os.chown(path, st.st_uid, st.st_gid, follow_symlinks=False)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)
        return
    os.chown(path, st.st_uid, st.st_gid)
    os.chmod(path, stat.S_IMODE(st.st_mode))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _same_file_state(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_size, a.st_mtime_ns, a.st_ctime_ns, a.st_ino) == (
        b.st_size,
        b.st_mtime_ns,
        b.st_ctime_ns,
        b.st_ino,
    )


class Copier:
    def __init__(self, src: bytes, dst: bytes) -> None:
        self.src, self.dst = src, dst
        # the manifest of what was read while copying: lists while it runs, entries after
        self.read: dict[bytes, Any] = {}
        self.changed: list[bytes] = []
        self.files = self.bytes = self.sockets = 0
        self._linked: dict[Inode, bytes] = {}  # relative path of the first copy of an inode
        self._groups: dict[Inode, list[bytes]] = {}

    def run(self) -> None:
        dirs: list[tuple[bytes, os.stat_result]] = []
        for rel, st in _entries(self.src):
            kind = _kind(st.st_mode)
            try:
                self._one(rel, st, kind, dirs)
            except OSError as exc:
                raise CopyError(f"{_show(rel)}: {exc.strerror or exc}") from None
        # Directory metadata last, children before parents: creating entries moves mtimes.
        for rel, st in reversed(dirs):
            path = _join(self.dst, rel)
            try:
                _copy_xattrs(_join(self.src, rel), path)
                _set_meta(path, st, "d")
            except OSError as exc:
                raise CopyError(f"{_show(rel)}: {exc.strerror or exc}") from None
        for paths in self._groups.values():
            if len(paths) > 1:
                first = os.fsdecode(min(paths))
                for rel in paths:
                    self.read[rel][8] = first
        self.read = {rel: tuple(v) for rel, v in self.read.items()}

    def _one(
        self, rel: bytes, st: os.stat_result, kind: str, dirs: list[tuple[bytes, os.stat_result]]
    ) -> None:
        src, dst = _join(self.src, rel), _join(self.dst, rel)
        content = ""
        if kind == "d":
            if rel:
                os.mkdir(dst, 0o700)
            dirs.append((rel, st))
            self.read[rel] = [*_record(kind, st, "", _xattrs(src)), ""]
            return
        if kind == "s":
            self.sockets += 1
            return
        if kind == "f":
            key = (st.st_dev, st.st_ino)
            if st.st_nlink > 1:
                self._groups.setdefault(key, []).append(rel)
                if key in self._linked:
                    os.link(_join(self.dst, self._linked[key]), dst)
                    self.read[rel] = list(self.read[self._linked[key]])
                    return
                self._linked[key] = rel
            content, st = self._copy_file(rel, src, dst, st)
            self.read[rel] = [*_record(kind, st, content, _xattrs(src)), ""]
            if after_file is not None:
                after_file(rel)
            return
        if kind == "l":
            target = os.readlink(src)
            os.symlink(target, dst)
            content = os.fsdecode(target)
        elif kind == "p":
            os.mkfifo(dst, 0o600)
        elif kind in ("c", "b"):
            os.mknod(dst, stat.S_IFMT(st.st_mode) | 0o600, st.st_rdev)
            content = f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
        else:
            raise CopyError(f"{_show(rel)}: unknown file type {st.st_mode:o}")
        _copy_xattrs(src, dst)
        _set_meta(dst, st, kind)
        self.read[rel] = [*_record(kind, st, content, _xattrs(src)), ""]

    def _copy_file(
        self, rel: bytes, src: bytes, dst: bytes, listed: os.stat_result
    ) -> tuple[str, os.stat_result]:
        fin = os.open(src, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            before = os.fstat(fin)
            fout = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            try:
                h, size = hashlib.sha256(), 0
                index = 0
                while True:
                    block = os.read(fin, CHUNK)
                    if not block:
                        break
                    h.update(block)
                    view = memoryview(block)
                    while view:
                        view = view[os.write(fout, view) :]
                    size += len(block)
                    if after_chunk is not None:
                        after_chunk(rel, index)
                    index += 1
                after = os.fstat(fin)
                if not (_same_file_state(before, after) and _same_file_state(listed, before)):
                    self.changed.append(rel)
                if size != before.st_size:
                    self.changed.append(rel)
                _copy_xattrs(fin, fout)
                os.fchown(fout, before.st_uid, before.st_gid)
                os.fchmod(fout, stat.S_IMODE(before.st_mode))
                os.utime(fout, ns=(before.st_atime_ns, before.st_mtime_ns))
            finally:
                os.close(fout)
        finally:
            os.close(fin)
        self.files += 1
        self.bytes += size
        return h.hexdigest(), before


def copy_and_verify(src: bytes, dst: bytes, replace_destination: bool = False) -> dict[str, Any]:
    """Copy SRC to DST and verify; the summary dict (see the module docstring)."""
    summary: dict[str, Any] = {
        "result": ERROR,
        "entries": 0,
        "files": 0,
        "bytes": 0,
        "digest": "",
        "skipped_sockets": 0,
        "problems": [],
    }
    for name, path in (("source", src), ("destination", dst)):
        if not os.path.isdir(path):
            summary["problems"].append(f"the {name} {_show(path)} is not a directory")
            return summary
    if os.path.realpath(src) == os.path.realpath(dst):
        summary["problems"].append("the source and the destination are the same directory")
        return summary
    if not _empty(dst):
        if not replace_destination:
            summary["problems"].append(
                "the destination is not empty (pass --replace-destination to replace what an "
                "earlier attempt left there)"
            )
            return summary
        _clear(dst)
    copier = Copier(src, dst)
    try:
        copier.run()
        after_src = scan(src)
        after_dst = scan(dst)
    except (CopyError, OSError) as exc:
        summary["problems"].append(str(exc))
        return summary
    summary.update(
        entries=len(after_dst),
        files=copier.files,
        bytes=copier.bytes,
        skipped_sockets=copier.sockets,
        digest=digest(after_dst),
    )
    changed, during = differences(copier.read, after_src)
    if copier.changed or changed:
        summary["result"] = CHANGED
        paths = sorted(set(copier.changed))
        summary["problems"] = [
            *(f"{_show(p)}: changed while it was read" for p in paths[:MAX_PROBLEMS]),
            *(f"changed during the copy: {d}" for d in during),
        ][:MAX_PROBLEMS]
        return summary
    count, problems = differences(after_src, after_dst)
    if count:
        summary["result"] = MISMATCH
        summary["problems"] = [f"{count} entries differ", *problems]
        return summary
    summary["result"] = VERIFIED
    summary["source_digest"] = digest(after_src)
    return summary


def write_manifest(manifest: Manifest, path: str) -> None:
    with open(path, "w", encoding="utf-8") as out:
        for rel in sorted(manifest):
            out.write(json.dumps([os.fsdecode(rel), *manifest[rel]]) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="copy_home", description="Copy a home directory tree and verify the copy."
    )
    parser.add_argument("src", help="the source directory (the old volume, read-only)")
    parser.add_argument("dst", help="the destination directory (the new volume)")
    parser.add_argument(
        "--replace-destination",
        action="store_true",
        help="remove what an earlier attempt left in the destination first",
    )
    parser.add_argument("--summary-file", help="also write the JSON summary here")
    parser.add_argument("--manifest", help="write the verified manifest (JSON lines) here")
    args = parser.parse_args(argv)
    summary = copy_and_verify(
        os.fsencode(args.src), os.fsencode(args.dst), args.replace_destination
    )
    if args.manifest and summary["result"] == VERIFIED:
        write_manifest(scan(os.fsencode(args.dst)), args.manifest)
    line = json.dumps(summary)
    for problem in summary["problems"]:
        print(f"copy_home: {problem}", file=sys.stderr)
    if args.summary_file:
        # The pod's termination message holds at most 4096 bytes: keep the summary inside it.
        short = dict(summary)
        while len(json.dumps(short)) > 4000 and short["problems"]:
            short["problems"] = short["problems"][:-1]
        with open(args.summary_file, "w", encoding="utf-8") as out:
            out.write(json.dumps(short))
    print(line, flush=True)
    return EXIT[summary["result"]]


if __name__ == "__main__":
    sys.exit(main())
