"""Speed of the migration's copy step on a home of many small files.

Builds a home like a pixi/conda user's (``--files`` small files in package directories, a
hard-linked package cache, a few large files) in a temporary directory, then times
``copy_home.copy_and_verify`` (copy, then a checksum manifest of both trees, compared), the same
code the copy pod runs.  On a local disk this measures the script; on network storage the copy pod
pays a round trip per file operation on top (see docs/migrate.md).

Prints the tree, then one summary line last:
``copy-home: N entries, B MB copied and verified in S s (F files/s)``.

    python -m benchmarks.copy_home [--files 30000] [--big-mb 50] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

from nebari_colocate import copy_home


def build(root: bytes, files: int, big_mb: int) -> None:
    env = root + b"/.pixi/envs/default/lib/python3.12/site-packages"
    os.makedirs(env)
    for i in range(files):
        pkg = env + b"/pkg%04d" % (i // 200)
        if i % 200 == 0:
            os.mkdir(pkg)
        with open(pkg + b"/m%05d.py" % i, "wb") as f:
            f.write(b"x = %d\n" % i * (1 + i % 40))
    cache = root + b"/.cache/rattler/pkgs"
    os.makedirs(cache)
    for i in range(min(files // 10, 2000)):
        path = cache + b"/lib%d.so" % i
        with open(path, "wb") as f:
            f.write(os.urandom(256))
        os.link(path, env + b"/pkg0000/lib%d.so" % i)
    for i in range(max(big_mb // 10, 1)):
        with open(root + b"/data%d.parquet" % i, "wb") as f:
            f.write(os.urandom(10 << 20))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=30000)
    parser.add_argument("--big-mb", type=int, default=50)
    parser.add_argument("--dir", help="where to build the trees (default: the temp dir)")
    args = parser.parse_args()
    base = tempfile.mkdtemp(prefix="copy-home-bench-", dir=args.dir)
    try:
        src, dst = os.path.join(base, "old"), os.path.join(base, "new")
        os.mkdir(src)
        os.mkdir(dst)
        t0 = time.perf_counter()
        build(os.fsencode(src), args.files, args.big_mb)
        print(
            f"built {args.files} small files + {args.big_mb} MB in {time.perf_counter() - t0:.1f} s"
        )
        t0 = time.perf_counter()
        summary = copy_home.copy_and_verify(os.fsencode(src), os.fsencode(dst))
        seconds = time.perf_counter() - t0
        if summary["result"] != "verified":
            raise SystemExit(f"copy-home: {summary['result']}: {summary['problems']}")
        print(
            f"copy-home: {summary['entries']} entries, {summary['bytes'] / 1e6:.0f} MB copied and "
            f"verified in {seconds:.1f} s ({summary['files'] / seconds:.0f} files/s)"
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
