"""The migration's copy step on real directories (no container runtime needed).

``nebari_colocate/copy_home.py`` is what the copy pod runs.  Here it copies real trees under
``tmp_path``: tens of thousands of small files, hard links, symlinks, odd names, owners and
permission bits, a FIFO, extended attributes, nanosecond timestamps.  Every copy is checked by
this file's own walk (``os.lstat`` and file contents compared side by side), not by the script's
manifest, so a script that verified wrongly would still fail here.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from nebari_colocate import copy_home

IS_ROOT = os.geteuid() == 0

ODD_NAMES = [
    b"with space",
    b"new\nline",
    b"-leading-dash",
    b"tab\there",
    "caf\u00e9-\u65e5\u672c".encode(),
    b"not-utf8-\xff\xfe",
    b"glob*?[x]",
    b"quote'\"back\\slash",
    b"x" * 255,
    b".hidden",
]


def _write(path: bytes, data: bytes, mode: int = 0o644, uid: int | None = None, mtime_ns=None):
    with open(path, "wb") as f:
        f.write(data)
    if uid is not None:
        os.chown(path, uid, uid)
    os.chmod(path, mode)
    if mtime_ns is not None:
        os.utime(path, ns=(mtime_ns, mtime_ns))


def build_home(root: Path, small_files: int = 20000) -> dict:
    """A home as conda, pixi and people leave it; returns counts the test checks."""
    base = os.fsencode(root)
    owners = [1000, 1000, 1000, 0, 12345] if IS_ROOT else [os.geteuid()]
    counts = {"files": 0, "hardlinks": 0, "symlinks": 0}
    env = base + b"/.pixi/envs/default/lib/python3.12/site-packages"
    os.makedirs(env)
    for i in range(small_files):
        pkg = env + b"/pkg%03d" % (i // 100)
        if i % 100 == 0:
            os.mkdir(pkg)
        _write(
            pkg + b"/mod%05d.py" % i,
            b"# %d\n" % i * (i % 7),
            mode=0o644 if i % 3 else 0o755,
            uid=owners[i % len(owners)] if IS_ROOT else None,
            mtime_ns=1_600_000_000_123_456_789 + i * 1_000_003,
        )
        counts["files"] += 1
    # conda's package cache hard-links files into environments
    cache = base + b"/.conda/pkgs/numpy"
    os.makedirs(cache)
    for i in range(300):
        original = cache + b"/f%d.so" % i
        _write(original, os.urandom(64))
        os.link(original, env + b"/pkg000/linked%d.so" % i)
        counts["hardlinks"] += 1
        if i % 50 == 0:  # three names for one inode, one in a third directory
            os.link(original, base + b"/.pixi/triple%d.so" % i)
    os.mkdir(base + b"/odd")
    for name in ODD_NAMES:
        _write(base + b"/odd/" + name, name * 3)
        counts["files"] += 1
    os.mkdir(base + b"/odd/dir \xff")
    _write(base + b"/odd/dir \xff/inside", b"inside")
    # symlinks: relative, absolute, dangling, to a directory, a chain; never followed
    os.symlink(b"../odd/with space", base + b"/.pixi/rel-link")
    os.symlink(b"/etc/passwd", base + b"/abs-link")
    os.symlink(b"does/not/exist", base + b"/dangling")
    os.symlink(b".pixi", base + b"/dir-link")
    os.symlink(b"dir-link", base + b"/chain")
    os.symlink(b"not-utf8-\xff\xfe", base + b"/odd/link-to-odd")
    counts["symlinks"] = 6
    os.lchown(base + b"/dangling", owners[-1], owners[-1])
    os.utime(base + b"/dangling", ns=(1_500_000_000_000_000_001,) * 2, follow_symlinks=False)
    # permission bits people set on purpose
    _write(base + b"/.ssh-key", b"secret", mode=0o600)
    _write(base + b"/setuid-tool", b"#!/bin/sh\n", mode=0o4755)
    _write(base + b"/setgid-tool", b"#!/bin/sh\n", mode=0o2750)
    os.mkdir(base + b"/shared-tmp")
    os.chmod(base + b"/shared-tmp", 0o1777)
    os.mkdir(base + b"/locked")
    _write(base + b"/locked/readonly", b"ro", mode=0o400)
    os.chmod(base + b"/locked", 0o500)
    _write(base + b"/empty", b"")
    _write(base + b"/big.bin", os.urandom(3 * copy_home.CHUNK + 12345))
    _write(base + b"/future", b"f", mtime_ns=4_102_444_800_000_000_007)
    _write(base + b"/ancient", b"a", mtime_ns=1)
    os.mkfifo(base + b"/a-fifo", 0o640)
    try:
        os.setxattr(base + b"/big.bin", "user.origin", b"downloaded")
        counts["xattrs"] = 1
    except OSError:
        counts["xattrs"] = 0
    if IS_ROOT:
        os.chown(base, 1000, 100)
    os.chmod(base, 0o750)
    os.utime(base + b"/odd", ns=(1_234_567_890_000_000_999,) * 2)
    return counts


def independent_diff(src: Path, dst: Path) -> list[str]:
    """Every difference between two trees that this test (not the script) can see."""
    problems = []
    s_root, d_root = os.fsencode(src), os.fsencode(dst)
    inodes_src: dict = {}
    inodes_dst: dict = {}
    for dirpath, dirnames, filenames in os.walk(s_root):
        rel_dir = os.path.relpath(dirpath, s_root)
        for name in [b".", *dirnames, *filenames] if rel_dir == b"." else [*dirnames, *filenames]:
            rel = name if rel_dir == b"." else os.path.join(rel_dir, name)
            a = os.lstat(os.path.join(s_root, rel))
            try:
                b = os.lstat(os.path.join(d_root, rel))
            except FileNotFoundError:
                problems.append(f"{rel!r} missing")
                continue
            if stat.S_IFMT(a.st_mode) != stat.S_IFMT(b.st_mode):
                problems.append(f"{rel!r} type")
                continue
            if (a.st_uid, a.st_gid) != (b.st_uid, b.st_gid):
                problems.append(f"{rel!r} owner")
            if not stat.S_ISLNK(a.st_mode) and a.st_mode != b.st_mode:
                problems.append(f"{rel!r} mode {a.st_mode:o} != {b.st_mode:o}")
            if a.st_mtime_ns != b.st_mtime_ns:
                problems.append(f"{rel!r} mtime")
            if stat.S_ISLNK(a.st_mode):
                if os.readlink(os.path.join(s_root, rel)) != os.readlink(os.path.join(d_root, rel)):
                    problems.append(f"{rel!r} link target")
            elif stat.S_ISREG(a.st_mode):
                with (
                    open(os.path.join(s_root, rel), "rb") as f,
                    open(os.path.join(d_root, rel), "rb") as g,
                ):
                    if f.read() != g.read():
                        problems.append(f"{rel!r} content")
                inodes_src.setdefault(a.st_ino, set()).add(rel)
                inodes_dst.setdefault(b.st_ino, set()).add(rel)
    groups_src = sorted(sorted(g) for g in inodes_src.values())
    groups_dst = sorted(sorted(g) for g in inodes_dst.values())
    if groups_src != groups_dst:
        problems.append("hard-link groups differ")
    extra = sum(len(f) + len(d) for _, d, f in os.walk(d_root)) - sum(
        len(f) + len(d) for _, d, f in os.walk(s_root)
    )
    if extra:
        problems.append(f"{extra} more entries in the copy")
    return problems


@pytest.fixture
def dirs(tmp_path):
    src, dst = tmp_path / "old", tmp_path / "new"
    src.mkdir()
    dst.mkdir()
    yield src, dst
    copy_home.after_file = copy_home.after_chunk = None
    for root in (src, dst):  # the test tree has read-only directories
        for dirpath, _, _ in os.walk(root):
            os.chmod(dirpath, 0o755)


def run(src: Path, dst: Path, replace: bool = False) -> dict:
    return copy_home.copy_and_verify(os.fsencode(src), os.fsencode(dst), replace)


def test_a_home_of_twenty_thousand_small_files_is_copied_exactly_and_verified(dirs):
    src, dst = dirs
    counts = build_home(src)
    summary = run(src, dst)
    assert summary["result"] == "verified", summary["problems"]
    # contents copied once per inode: the small files, the odd names, the 300 cache files (their
    # other names are links), odd/dir/inside and the 8 files with chosen modes and times
    assert summary["files"] == counts["files"] + 300 + 1 + 8
    assert summary["digest"] == summary["source_digest"]
    assert independent_diff(src, dst) == []
    # hard links stay links: one inode for the cache file and its names in the environment
    base = os.fsencode(dst)
    assert (
        os.lstat(base + b"/.conda/pkgs/numpy/f0.so").st_ino
        == os.lstat(
            base + b"/.pixi/envs/default/lib/python3.12/site-packages/pkg000/linked0.so"
        ).st_ino
        == os.lstat(base + b"/.pixi/triple0.so").st_ino
    )
    assert os.lstat(base + b"/.conda/pkgs/numpy/f0.so").st_nlink == 3
    assert os.readlink(base + b"/dangling") == b"does/not/exist"
    assert stat.S_ISFIFO(os.lstat(base + b"/a-fifo").st_mode)
    assert stat.S_IMODE(os.lstat(base + b"/setuid-tool").st_mode) == 0o4755
    if counts["xattrs"]:
        assert os.getxattr(base + b"/big.bin", "user.origin") == b"downloaded"
    if IS_ROOT:
        assert (os.lstat(base).st_uid, os.lstat(base).st_gid) == (1000, 100)
        assert os.lstat(base + b"/dangling").st_uid == 12345


def test_a_file_changed_after_it_was_copied_is_detected(dirs):
    src, dst = dirs
    build_home(src, small_files=200)
    victim = os.fsencode(src) + b"/odd/with space"

    def append_once(rel: bytes):
        if rel == b"odd/with space":  # just copied: a backup job writes to it
            with open(victim, "ab") as f:
                f.write(b"written by a backup job during the copy")

    copy_home.after_file = append_once
    summary = run(src, dst)
    assert summary["result"] == "changed"
    assert any("odd/with space" in p for p in summary["problems"]), summary["problems"]


def test_a_file_changed_while_it_is_read_is_detected(dirs):
    src, dst = dirs
    big = os.fsencode(src) + b"/big.bin"
    _write(big, b"a" * (3 * copy_home.CHUNK))

    def rewrite_middle(rel: bytes, index: int):
        if rel == b"big.bin" and index == 0:
            with open(big, "r+b") as f:  # same size, later chunks differ from the first read
                f.seek(2 * copy_home.CHUNK)
                f.write(b"b" * 10)

    copy_home.after_chunk = rewrite_middle
    summary = run(src, dst)
    assert summary["result"] == "changed"
    assert summary["problems"][0] == "big.bin: changed while it was read"


def test_a_file_whose_change_kept_its_size_and_mtime_is_still_detected(dirs):
    src, dst = dirs
    path = os.fsencode(src) + b"/notebook.ipynb"
    _write(path, b"x" * 100, mtime_ns=1_700_000_000_000_000_000)
    _write(os.fsencode(src) + b"/zz-later", b"later")

    def sneaky(rel: bytes):
        if rel == b"zz-later":
            _write(path, b"y" * 100, mtime_ns=1_700_000_000_000_000_000)  # touch -r style

    copy_home.after_file = sneaky
    summary = run(src, dst)
    assert summary["result"] == "changed"
    assert "content differ" in " ".join(summary["problems"])


def test_a_corrupted_copy_fails_verification(dirs):
    src, dst = dirs
    build_home(src, small_files=100)
    target = os.fsencode(dst) + b"/odd/with space"

    def corrupt(rel: bytes):
        if rel == b"odd/with space":
            with open(target, "r+b") as f:  # the storage returns other bytes than were written
                f.write(b"X")

    copy_home.after_file = corrupt
    summary = run(src, dst)
    assert summary["result"] == "mismatch"
    assert summary["problems"][0] == "1 entries differ"
    assert summary["problems"][1] == "odd/with space: mtime, content differ"


def test_a_lost_permission_on_the_copy_fails_verification(dirs):
    src, dst = dirs
    _write(os.fsencode(src) + b"/.ssh-key", b"k", mode=0o600)
    _write(os.fsencode(src) + b"/zz", b"z")

    def loosen(rel: bytes):
        if rel == b"zz":
            os.chmod(os.fsencode(dst) + b"/.ssh-key", 0o644)

    copy_home.after_file = loosen
    summary = run(src, dst)
    assert summary["result"] == "mismatch"
    assert ".ssh-key: mode differ" in summary["problems"][1]


def test_a_destination_left_by_an_interrupted_attempt_is_replaced_only_when_asked(dirs):
    src, dst = dirs
    build_home(src, small_files=500)

    class Killed(Exception):
        pass

    def die(rel: bytes):
        if rel.endswith(b"mod00250.py"):
            raise Killed

    copy_home.after_file = die
    with pytest.raises(Killed):
        run(src, dst)
    copy_home.after_file = None
    refused = run(src, dst)
    assert refused["result"] == "error"
    assert "not empty" in refused["problems"][0]
    summary = run(src, dst, replace=True)
    assert summary["result"] == "verified", summary["problems"]
    assert independent_diff(src, dst) == []


def test_lost_and_found_at_the_top_is_ignored_on_both_sides(dirs):
    src, dst = dirs
    (src / "lost+found").mkdir()
    (src / "lost+found" / "#123").write_bytes(b"fsck leftovers")
    (dst / "lost+found").mkdir()
    (src / "notes.txt").write_text("hi")
    summary = run(src, dst)
    assert summary["result"] == "verified", summary["problems"]
    assert not (dst / "lost+found" / "#123").exists()
    assert (dst / "notes.txt").read_text() == "hi"


def test_source_and_destination_must_be_two_directories(dirs, tmp_path):
    src, _ = dirs
    assert run(src, src)["problems"] == ["the source and the destination are the same directory"]
    assert "is not a directory" in run(src, tmp_path / "missing")["problems"][0]


def test_the_script_runs_as_the_copy_pod_runs_it(dirs, tmp_path):
    """``python3 -c <source> SRC DST ...``: exit status, last stdout line, summary file."""
    src, dst = dirs
    build_home(src, small_files=300)
    source = Path(copy_home.__file__).read_text()
    summary_file = tmp_path / "termination-log"
    manifest = tmp_path / "manifest.jsonl"
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            source,
            str(src),
            str(dst),
            "--replace-destination",
            "--summary-file",
            str(summary_file),
            "--manifest",
            str(manifest),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    last = json.loads(result.stdout.strip().splitlines()[-1])
    assert last["result"] == "verified"
    assert json.loads(summary_file.read_text()) == last
    assert len(manifest.read_text().splitlines()) == last["entries"]
    assert independent_diff(src, dst) == []


def test_the_script_exits_4_when_the_source_changes(dirs, tmp_path):
    src, dst = dirs
    (src / "a").write_text("a")
    hook = (
        "import nebari_colocate.copy_home as c, sys\n"
        "def touch(rel):\n"
        "    open(sys.argv[1] + '/a', 'a').write('more')\n"
        "c.after_file = touch\n"
        "sys.exit(c.main(sys.argv[1:]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", hook, str(src), str(dst)], capture_output=True, text=True
    )
    assert result.returncode == 4, result.stderr
    assert json.loads(result.stdout.splitlines()[-1])["result"] == "changed"
