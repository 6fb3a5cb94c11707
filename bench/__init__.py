"""Benchmarks for sidecar-debug (`python -m bench`, `make bench`); see docs/performance.md."""
