"""Reading and writing the suite's files: JSON read with a clear error, writes atomic.

A read opens regular files only: a FIFO, socket or device named where a file is expected
is refused before a byte is read (a FIFO would block the reader forever).

A write goes to a temporary file beside the target and is renamed over it, so a failed or
interrupted run never leaves a half-written baseline, report or result behind; a failed
write names the target, not its temporary file. :func:`atomic_write_many` stages a set of
files (a report's Markdown, HTML and images) and renames them only once every one of them
is on disk, so a full disk leaves the previous set whole. The temporary file is created
with mode 0666 less the process umask (0644 under umask 022), as ``open`` would create it,
or with the mode of the file it replaces, so an artifact server or another user can read
what the suite writes. :func:`locked` serializes read-merge-write cycles of one file across
processes (``flock`` on a sidecar lock file); :func:`held_or_refused` refuses at once
where :func:`locked` would wait. :func:`signals_interrupt` turns SIGTERM and SIGHUP into
:class:`Interrupted` in a command, so that its writes clean up after themselves as they
do for Ctrl-C.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import itertools
import json
import os
import secrets
import signal
import stat
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from gpugauge.core.commands import interrupted


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
    Only a regular file is read (see :func:`read_regular`).
    """
    try:
        return parse(read_regular(path, what).decode())
    except (*errors, UnicodeDecodeError) as err:
        raise FileError(f"{path}: not valid {what} ({err})") from None


def read_regular(path: Path, what: str = "data") -> bytes:
    """The bytes of a regular file; FileError naming it for anything else or a failed read.

    The file is opened without blocking and checked on the open descriptor, so a FIFO (or a
    socket, a device) is refused, never read, even if it replaced a file a moment before.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except IsADirectoryError:
        raise FileError(f"{path}: is a directory, not a {what} file") from None
    except OSError as err:
        raise FileError(f"{path}: cannot be read ({err.strerror})") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        if stat.S_ISDIR(mode):
            raise FileError(f"{path}: is a directory, not a {what} file")
        raise FileError(f"{path}: not a regular file (a FIFO, socket or device); not read")
    with os.fdopen(fd, "rb") as fh:
        try:
            return fh.read()
        except OSError as err:
            raise FileError(f"{path}: cannot be read ({err.strerror})") from None


def read_json(path: Path) -> Any:
    """Parse a JSON file; FileError naming the file when it cannot be read or parsed.

    Refused as well: JSON nested deeper than the parser's recursion allows (a 100,000-deep
    array), and a string that is not valid Unicode: a lone surrogate, which a JSON escape
    can spell but no UTF-8 file, database or page can hold.
    """
    try:
        data = read_parsed(path, json.loads, "JSON", (json.JSONDecodeError,))
    except RecursionError:
        raise FileError(f"{path}: not valid JSON (nested too deep to read)") from None
    where = invalid_text(data)
    if where is not None:
        raise FileError(f"{path}: {where} is not valid Unicode (a lone surrogate); not read")
    return data


def invalid_text(data: Any) -> str | None:
    """Where a string (or key) of parsed JSON that UTF-8 cannot encode lies, or None.

    Walked without recursion, so any depth the parser accepted is fine; first, in one
    pass of the C encoder, whether there is any such string at all (there almost never
    is, and a run of 10,000 results took 0.05 s a file to walk).
    """
    try:
        json.dumps(data, ensure_ascii=False).encode()
        return None
    except (UnicodeEncodeError, RecursionError):
        pass  # find where it lies, or walk what is too deep for the encoder
    stack: list[tuple[str, Any]] = [("", data)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, str):
            if not _encodable(value):
                return where or "the document"
        elif isinstance(value, dict):
            for k, v in value.items():
                here = f"{where}.{k}" if where else str(k)
                if not _encodable(k):
                    return f"a key of {where or 'the document'}"
                stack.append((here, v))
        elif isinstance(value, list):
            stack.extend((f"{where}[{i}]", v) for i, v in enumerate(value))
    return None


def _encodable(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def name_problem(name: Any) -> str | None:
    """Why ``name`` cannot be one folder or file name inside a folder of the suite, or None.

    Device classes and families name baseline folders and files: an empty name, a path
    separator, ``.`` or ``..`` would put a file elsewhere.
    """
    if not isinstance(name, str):
        return f"must be a string, not {type(name).__name__}"
    if not name.strip():
        return "must not be empty"
    if name in (".", "..") or any(c in name for c in "/\\\0"):
        return "must be a plain name (no '/', '\\', '..' or NUL)"
    return None


def writable_problem(folder: Path) -> str | None:
    """Why files could not be written into ``folder`` (made if missing), or None.

    The folder, or the nearest part of its path that exists, must be a directory this
    process may write into (``access(2)``: it sees read-only mounts and immutable folders,
    and that root may write where the mode says otherwise).
    """
    folder = Path(folder)
    probe = folder
    while not probe.exists():
        if probe.is_symlink():
            return f"{probe} is a link to nowhere"
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        return f"{probe} is not a directory" if probe != folder else "not a directory"
    if not os.access(probe, os.W_OK | os.X_OK):
        where = "" if probe == folder else f" ({probe}, where it would be made)"
        return f"cannot be written{where}: no write permission or a read-only file system"
    return None


def check_dir(path: Path, what: str) -> Path:
    """``path`` if it is an existing directory; FileError naming ``what`` otherwise."""
    if not path.exists():
        raise FileError(f"{what} {path}: no such directory")
    if not path.is_dir():
        raise FileError(f"{what} {path}: not a directory")
    return path


def check_file(path: Path, what: str) -> Path:
    """``path`` if it is an existing regular file; FileError naming ``what`` otherwise."""
    if not path.exists():
        raise FileError(f"{what} {path}: no such file")
    if not path.is_file():
        raise FileError(f"{what} {path}: not a regular file")
    return path


def make_dir(path: Path, what: str) -> Path:
    """``path``, made with its parents if missing; a FileError naming ``what`` where not.

    An error about a path a user gave names the option it came from (``--out /proc/nope:
    cannot be made (No such file or directory)``), not only the path.
    """
    problem = writable_problem(path)
    if problem is not None:
        raise FileError(f"{what} {path}: {problem}")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise FileError(f"{what} {path}: cannot be made ({err.strerror or err})") from None
    return path


def _create_exclusive(path: Path, mode: int) -> int:
    """A new file's descriptor; the kernel applies the umask to ``mode``."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)


def atomic_write_text(path: Path, text: str) -> None:
    """Write UTF-8 text atomically (see :func:`atomic_write_bytes`)."""
    atomic_write_bytes(path, text.encode())


def atomic_write_bytes(path: Path, content: bytes) -> None:
    """Write to a temporary file beside ``path``, then rename it over ``path``.

    The new file gets the replaced file's mode, or 0666 less the umask for a new one. An
    OSError names ``path`` (not the temporary file); nothing of the write is left behind.
    """
    tmp = _stage(path, content)
    with _dropped_on_failure(tmp, path):
        os.replace(tmp, path)


def atomic_write_many(files: Mapping[Path, bytes]) -> list[Path]:
    """Write a set of files all or none: every one staged beside its target, then renamed.

    A failure while staging (a full disk) removes what was staged and raises an OSError
    naming the file that failed; the previous set is left as it was. Renames need no space,
    so once staged the set goes in whole. Returns the paths written, in order.
    """
    staged: list[tuple[Path, Path]] = []
    try:
        for path, content in files.items():
            staged.append((_stage(path, content), path))
        for i, (tmp, path) in enumerate(staged):
            try:
                os.replace(tmp, path)
            except OSError as err:
                for later, _ in staged[i:]:
                    later.unlink(missing_ok=True)
                staged = []
                raise _naming(err, path) from None
    except BaseException:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
        raise
    return list(files)


def atomic_write_new(content: bytes, names: Iterable[Path]) -> Path:
    """Write ``content`` whole under the first of ``names`` that does not exist; that path.

    The content is staged beside the first name, then hard-linked to each name in turn:
    ``link(2)`` fails if the name exists, so two writers never share a name and a reader
    never sees a partial file. Where links are not supported, a name is claimed by creating
    it exclusively, then the staged file is renamed over it.
    """
    names = iter(names)
    first = next(names)
    tmp = _stage(first, content)
    try:
        for path in itertools.chain([first], names):
            try:
                os.link(tmp, path)
            except FileExistsError:
                continue
            except OSError as err:
                if err.errno not in (errno.EPERM, errno.ENOTSUP, errno.EXDEV):
                    raise _naming(err, path) from None
                try:  # no hard links here: claim the name, then move the content onto it
                    os.close(_create_exclusive(path, 0o666))
                except FileExistsError:
                    continue
                os.replace(tmp, path)
            return path
        raise FileExistsError(errno.EEXIST, "every name is taken", str(first))
    finally:
        tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def _dropped_on_failure(tmp: Path, path: Path) -> Iterator[None]:
    """Remove the temporary ``tmp`` if the block fails; an OSError then names ``path``."""
    try:
        yield
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise _naming(err, path) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _naming(err: OSError, path: Path) -> OSError:
    """The same error, naming ``path`` (a temporary file's name would mean nothing)."""
    return type(err)(err.errno, err.strerror or str(err), str(path))


def _new_temp(path: Path) -> tuple[Path, int]:
    """A new temporary file beside ``path`` (its folder made), open for writing: (path, fd).

    An OSError names ``path`` (or its folder), never the temporary name.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise _naming(err, path.parent) from None
    tmp = path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp"
    try:
        return tmp, _create_exclusive(tmp, 0o666)
    except OSError as err:
        raise _naming(err, path) from None


def _stage(path: Path, content: bytes) -> Path:
    """``content`` in a new temporary file beside ``path``, synced; its path.

    On any failure the temporary file is removed and an OSError names ``path``.
    """
    tmp, fd = _new_temp(path)
    with _dropped_on_failure(tmp, path), os.fdopen(fd, "wb") as fh:
        if path.exists():
            os.fchmod(fh.fileno(), stat.S_IMODE(path.stat().st_mode))
        fh.write(content)
        fh.flush()
        os.fsync(fh.fileno())
    return tmp


@contextlib.contextmanager
def atomic_text_stream(path: Path) -> Iterator[IO[str]]:
    """A text file to write in pieces, put in place whole when the block ends.

    For output too large to hold in memory (a history's CSV): the block writes into a
    temporary file beside ``path`` (mode as :func:`atomic_write_bytes` gives it), which is
    synced and renamed over ``path`` only if the block ends without an error. A full disk,
    an exception or a signal (under :func:`signals_interrupt`) removes the temporary file
    and leaves the previous ``path`` as it was; an OSError names ``path``.
    """
    tmp, fd = _new_temp(path)
    with _dropped_on_failure(tmp, path):
        with os.fdopen(fd, "w", newline="", encoding="utf-8") as fh:
            if path.exists():
                os.fchmod(fh.fileno(), stat.S_IMODE(path.stat().st_mode))
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)


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


class Busy(FileError):
    """A lock that another live process holds; ``pid`` is the one its file names (or None)."""

    def __init__(self, lock: Path, pid: int | None) -> None:
        super().__init__(f"{lock}: held by process {pid if pid is not None else '(unknown)'}")
        self.pid = pid


@contextlib.contextmanager
def held_or_refused(lock: Path) -> Iterator[None]:
    """Hold ``lock``, a file naming this process, while the block runs; :class:`Busy` at once.

    For a command that owns a folder for its whole run and must not wait behind another
    (two A/Bs writing one ``--out``). ``flock`` without blocking: the kernel drops the lock
    when its holder dies, however it dies, so a file left by a dead process is taken over.
    The file is removed at the end, under the lock; a process that opened it meanwhile
    finds it gone, and tries again on a new one.
    """
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            said = os.pread(fd, 32, 0).decode(errors="replace").strip()
            os.close(fd)
            raise Busy(lock, int(said) if said.isdigit() else None) from None
        except BaseException:
            os.close(fd)
            raise
        try:
            ours = os.path.samestat(os.fstat(fd), os.stat(lock))
        except FileNotFoundError:
            ours = False
        if ours:
            break
        os.close(fd)  # removed by its last holder after this process opened it
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        with contextlib.suppress(OSError):
            lock.unlink()
        os.close(fd)  # closing the descriptor releases the lock


@contextlib.contextmanager
def folder_locked(folder: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on the folder itself while the block runs.

    A baseline family file's read-merge-write runs under it, and so does the choice of a
    saved run's number, so concurrent writers lose nothing; locking the folder rather
    than a sidecar file leaves no lock file behind in a user's project, and nothing needs
    removing, so no removal can race the next writer. Blocks until the lock is free.
    """
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


class Interrupted(KeyboardInterrupt):
    """A SIGTERM or SIGHUP turned into an exception by :func:`signals_interrupt`."""


@contextlib.contextmanager
def signals_interrupt() -> Iterator[None]:
    """In this block SIGINT, SIGTERM and SIGHUP raise :class:`KeyboardInterrupt`.

    SIGTERM's default action ends the process at once, so a write in progress would leave
    its temporary file behind; raised as an exception instead, the write's clean-up runs.
    After the first signal, the others are ignored until the block ends, so that a second
    one cannot interrupt that clean-up; a signal ignored already (nohup's SIGHUP) stays
    ignored. Only the main thread receives signals: elsewhere the block changes nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def handler(signum: int, frame: object) -> None:
        for s in signals:
            signal.signal(s, signal.SIG_IGN)
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise Interrupted(signal.Signals(signum).name)

    # a signal ignored already (nohup's SIGHUP) stays ignored
    old = {s: signal.getsignal(s) for s in signals}
    for s, h in old.items():
        if h is not signal.SIG_IGN:
            signal.signal(s, handler)
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, signal.SIG_DFL if h is None else h)


def stoppable(command: str, body: Callable[[], int]) -> int:
    """``body()`` under :func:`signals_interrupt`: a stop is one line and exit 130."""
    with signals_interrupt():
        try:
            return body()
        except KeyboardInterrupt as err:
            return interrupted(command, err)
