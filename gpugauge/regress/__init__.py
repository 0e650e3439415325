"""Regression checking: stored baselines (data), tolerances (policy) and the gate."""
