"""``python -m benchmarks.agreement --seed 1 --count 200 [--keep-failures DIR] [--concurrency 6]``

Starts a control plane of its own (``benchmarks/_cluster.py``), runs the scenarios, prints the
summary lines and ``agreement: A/N`` last; the exit status is 1 below N/N or when the live view
or the direct reads decided differently from the full state.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from benchmarks import _cluster

from . import __doc__ as package_doc
from .run import run_agreement, summary


async def main_async(args: argparse.Namespace) -> int:
    with _cluster.control_plane(kubelet_stub=False, keep_logs=args.keep_logs) as cp:
        api_client = await _cluster.admin_client(cp)
        try:
            result = await run_agreement(
                api_client,
                seed=args.seed,
                count=args.count,
                concurrency=args.concurrency,
                keep_failures=Path(args.keep_failures) if args.keep_failures else None,
                timeout=args.timeout,
            )
        finally:
            await api_client.close()
        if args.keep_logs:
            print(f"control plane logs: {cp.dir}")
    for line in summary(result):
        print(line)
    print(result.line)
    mismatched = [o for o in result.outcomes if o.loader_mismatch]
    return 0 if result.agreed == result.count and not mismatched else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.agreement", description=(package_doc or "").splitlines()[0]
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--keep-failures", metavar="DIR", help="write disagreements here")
    parser.add_argument("--concurrency", type=int, default=6, help="scenarios at once")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait per verdict")
    parser.add_argument("--keep-logs", action="store_true", help="keep the control plane logs")
    args = parser.parse_args(argv)
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
