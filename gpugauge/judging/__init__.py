"""Judging results: one vocabulary of verdicts, one judge over interchangeable references."""
