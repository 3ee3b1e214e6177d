"""Benchmarks: each file runs with one command; see docs/benchmarks.md."""
