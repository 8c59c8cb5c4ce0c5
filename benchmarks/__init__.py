"""cablestore benchmarks (run with ``python -m benchmarks``)."""
