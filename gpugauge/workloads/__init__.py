"""Benchmark workloads, importable without pytest: specs, cases per profile, step builders."""
