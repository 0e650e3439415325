"""Run one bench module in a fresh pytest process, as a user would, and read its records."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def run_bench_module(module: str, saved: Path, *args: str) -> dict[str, dict[str, Any]]:
    """``pytest <module> <args>`` from the checkout, JSON to ``saved``; records by id.

    The run must pass; its output's tail is the failure message otherwise.
    """
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            module,
            *args,
            f"--benchmark-json={saved}",
            "-p",
            "no:cacheprovider",
            "-q",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {b["param"]: b["extra_info"] for b in json.loads(saved.read_text())["benchmarks"]}
