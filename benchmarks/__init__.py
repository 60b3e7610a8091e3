"""The benchmarks (``benchmarks/README.md``): scripts run from the repository root; the agreement
benchmark is the package ``benchmarks.agreement`` (``python -m benchmarks.agreement``)."""
