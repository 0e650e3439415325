"""Benchmark modules, one per family."""
