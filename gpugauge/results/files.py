"""Reading and writing the suite's files: JSON read with a clear error, writes atomic.

A write goes to a temporary file beside the target and is renamed over it, so a failed or
interrupted run never leaves a half-written baseline, report or result behind. The
temporary file is created with mode 0666 less the process umask (0644 under umask 022),
as ``open`` would create it, or with the mode of the file it replaces, so an artifact
server or another user can read what the suite writes. :func:`locked` serializes
read-merge-write cycles of one file across processes (``flock`` on a sidecar lock file).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


class FileError(ValueError):
    """A file that cannot be read as what it should be; the message names it."""


def read_parsed(
    path: Path,
    parse: Callable[[str], Any],
    what: str,
    errors: tuple[type[Exception], ...],
) -> Any:
    """Read a text file and ``parse`` it; FileError naming the file and what went wrong.

    ``what`` names the format ('JSON', 'TOML'); ``errors`` are the parser's own exceptions.
    """
    try:
        return parse(Path(path).read_text())
    except IsADirectoryError:
        raise FileError(f"{path}: is a directory, not a {what} file") from None
    except OSError as err:
        raise FileError(f"{path}: cannot be read ({err.strerror})") from None
    except (*errors, UnicodeDecodeError) as err:
        raise FileError(f"{path}: not valid {what} ({err})") from None


def read_json(path: Path) -> Any:
    """Parse a JSON file; FileError naming the file when it cannot be read or parsed."""
    return read_parsed(path, json.loads, "JSON", (json.JSONDecodeError,))


def check_dir(path: Path, what: str) -> Path:
    """``path`` if it is an existing directory; FileError naming ``what`` otherwise."""
    if not path.exists():
        raise FileError(f"{what} {path}: no such directory")
    if not path.is_dir():
        raise FileError(f"{what} {path}: not a directory")
    return path


def _create_exclusive(path: Path, mode: int) -> int:
    """A new file's descriptor; the kernel applies the umask to ``mode``."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)


def atomic_write_text(path: Path, text: str) -> None:
    """Write UTF-8 text atomically (see :func:`atomic_write_bytes`)."""
    atomic_write_bytes(path, text.encode())


def atomic_write_bytes(path: Path, content: bytes) -> None:
    """Write to a temporary file beside ``path``, then rename it over ``path``.

    The new file gets the replaced file's mode, or 0666 less the umask for a new one.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp"
    fd = _create_exclusive(tmp, 0o666)
    try:
        with os.fdopen(fd, "wb") as fh:
            if path.exists():
                os.fchmod(fh.fileno(), stat.S_IMODE(path.stat().st_mode))
            fh.write(content)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_json(path: Path, data: Any) -> None:
    """Serialize first (a bad value leaves nothing behind), then write atomically."""
    atomic_write_text(path, json.dumps(data, indent=1, allow_nan=False) + "\n")


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` across processes while the block runs.

    The lock is ``flock`` on ``.<name>.lock`` beside ``path`` (the file itself is replaced
    by atomic writes, so it cannot carry the lock). Readers need no lock: a rename is
    atomic. Blocks until the lock is free.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = path.parent / f".{path.name}.lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock
