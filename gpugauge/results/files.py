"""Reading and writing the suite's files: JSON read with a clear error, writes atomic.

A write goes to a temporary file beside the target and is renamed over it, so a failed or
interrupted run never leaves a half-written baseline, report or result behind.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


class FileError(ValueError):
    """A file that cannot be read as what it should be; the message names it."""


def read_json(path: Path) -> Any:
    """Parse a JSON file; FileError naming the file when it cannot be read or parsed."""
    try:
        return json.loads(Path(path).read_text())
    except IsADirectoryError:
        raise FileError(f"{path}: is a directory, not a JSON file") from None
    except OSError as err:
        raise FileError(f"{path}: cannot be read ({err.strerror})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise FileError(f"{path}: not valid JSON ({err})") from None


def atomic_write_text(path: Path, text: str) -> None:
    """Write to a temporary file beside ``path``, then rename it over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: Path, data: Any) -> None:
    """Serialize first (a bad value leaves nothing behind), then write atomically."""
    atomic_write_text(path, json.dumps(data, indent=1) + "\n")
