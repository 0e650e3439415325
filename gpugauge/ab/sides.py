"""The two sides of an A/B: which code (a git ref's worktree, or the working tree) and Python.

A ref is checked out into a temporary git worktree (``git worktree add --detach``) so that
its side imports that commit's gpugauge and benches, with the commit's submodules (which
``git worktree add`` leaves empty) cloned from the main checkout's own, never over the
network; the working tree itself is a side as it is, uncommitted changes included.
:func:`checkouts` removes every worktree it made when the A/B ends, also on Ctrl-C or
SIGTERM, and sweeps away those of an earlier A/B that was killed outright (its owner
process gone).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

WORKING_TREE = "WORKTREE"  # the ref that names the working tree as it is
PREFIX = "gpugauge-ab-"
OWNER_FILE = "owner.pid"


class SideError(ValueError):
    """A side that cannot be made: not a git checkout, an unknown ref, a missing Python."""


@dataclass(frozen=True)
class SideSpec:
    """What one side runs: a git ref (or :data:`WORKING_TREE`) with a Python interpreter."""

    name: str  # "base" or "head"
    ref: str
    python: str


@dataclass(frozen=True)
class Checkout:
    """A side's checkout: where its pytest runs, and what it holds."""

    spec: SideSpec
    root: Path
    commit: str | None  # None: the working tree, with whatever is uncommitted in it
    made: bool  # a worktree this A/B made (removed at its end)

    @property
    def label(self) -> str:
        """'HEAD~1 (3f2a9c1d)', or 'working tree (3f2a9c1d + changes)'."""
        if self.commit is None:
            return f"working tree ({self.spec.ref})"
        return f"{self.spec.ref} ({self.commit[:10]})"


def git(repo: Path, *args: str) -> str:
    """Run git in ``repo``; its stdout stripped, or a SideError with its message."""
    try:
        done = subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, check=False
        )
    except FileNotFoundError:
        raise SideError("git is not installed: an A/B of refs needs it") from None
    if done.returncode != 0:
        said = done.stderr.strip().splitlines()
        raise SideError(f"git {' '.join(args)}: {said[-1] if said else 'failed'}")
    return done.stdout.strip()


def repo_root(path: Path) -> Path:
    """The top of the git checkout holding ``path``."""
    return Path(git(path, "rev-parse", "--show-toplevel"))


def resolve_ref(repo: Path, ref: str) -> str:
    """The full commit id a ref names (a branch, a tag, a sha, ``HEAD~3``)."""
    try:
        return git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    except SideError:
        raise SideError(
            f"{ref!r} names no commit of {repo} (a shallow clone may need "
            f"`git fetch --depth=1 origin {ref}`)"
        ) from None


def check_python(python: str) -> None:
    """The side's interpreter must exist, run, and import pytest: else bad input, said now.

    Found only once its side had started, a Python without pytest ended the A/B as a
    failed side (exit 1) after its start, not as the bad input it is.
    """
    found = shutil.which(python)
    if found is None:
        raise SideError(f"python {python!r}: not found")
    try:
        done = subprocess.run(
            [found, "-c", "import pytest"], capture_output=True, text=True, timeout=120
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise SideError(f"python {python!r} does not run: {err}") from None
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or ["?"])[-1]
        raise SideError(f"python {python!r} cannot import pytest: {said}")


def _owner_alive(folder: Path) -> bool:
    try:
        pid = int((folder / OWNER_FILE).read_text())
    except (OSError, ValueError):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def owned_folder(prefix: str = PREFIX, parent: Path | None = None) -> Path:
    """A new temporary folder that names this process as its owner, for :func:`sweep`.

    ``prefix`` starts with :data:`PREFIX`: once this process is gone, the next A/B on the
    host removes the folder (an A/B killed outright leaves its worktrees and socket).
    """
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    (folder / OWNER_FILE).write_text(str(os.getpid()))
    return folder


def sweep(repo: Path, parent: Path | None = None) -> list[Path]:
    """Remove the folders of earlier A/Bs whose owner process is gone; the folders removed.

    A folder with no owner file is left alone: it is another A/B's, being made this instant
    (two A/Bs run side by side on a host with several GPUs).
    """
    parent = parent or Path(tempfile.gettempdir())
    gone = []
    for folder in sorted(parent.glob(f"{PREFIX}*")):
        if not (folder / OWNER_FILE).is_file() or _owner_alive(folder):
            continue
        for tree in sorted(p for p in folder.iterdir() if (p / ".git").exists()):
            with contextlib.suppress(SideError):
                git(repo, "worktree", "remove", "--force", str(tree))
        shutil.rmtree(folder, ignore_errors=True)
        gone.append(folder)
    with contextlib.suppress(SideError):
        git(repo, "worktree", "prune")
    return gone


def with_submodules(source: Path, tree: Path) -> None:
    """``tree``'s submodules, recursively, each cloned from its checkout under ``source``.

    A worktree is made without its submodules, and benchmarks kept in one would be missing
    from the side. Their URLs may name a server: each is taken from the main checkout's own
    clone instead (file transport only, nothing else allowed), or a SideError says why not.
    """
    if not (tree / ".gitmodules").is_file():
        return
    try:
        listed = git(tree, "config", "-f", ".gitmodules", "--get-regexp", r"^submodule\..*\.path$")
    except SideError:
        return  # a .gitmodules that lists none
    for line in listed.splitlines():
        key, path = line.split(maxsplit=1)
        name = key.removeprefix("submodule.").removesuffix(".path")
        here = source / path
        if not (here / ".git").exists():
            raise SideError(
                f"submodule {path} is not checked out in {source}, and an A/B takes a "
                "submodule from there only (never over the network): run `git submodule "
                f"update --init --recursive` in {source}"
            )
        local = ("-c", "protocol.allow=never", "-c", "protocol.file.allow=always")
        url = ("-c", f"submodule.{name}.url={here}")
        try:
            git(tree, *local, *url, "submodule", "update", "--init", "--", path)
        except SideError as err:
            raise SideError(
                f"submodule {path}: the commit {tree.name}'s side needs is not in {here} "
                f"({err}); fetch it there (`git -C {here} fetch`)"
            ) from None
        with_submodules(here, tree / path)


@contextlib.contextmanager
def checkouts(
    repo: Path, specs: Sequence[SideSpec], parent: Path | None = None
) -> Iterator[dict[str, Checkout]]:
    """Each side's checkout, by side name; the worktrees made are removed afterwards.

    ``repo`` is any folder inside the benchmark checkout. Two sides of the same commit get
    a worktree each: each side imports its own files, as with different commits.
    """
    top = repo_root(repo)
    for python in dict.fromkeys(s.python for s in specs):
        check_python(python)
    commits = {s.name: None if s.ref == WORKING_TREE else resolve_ref(top, s.ref) for s in specs}
    sweep(top, parent)
    folder = owned_folder(parent=parent)
    made: list[Path] = []
    try:
        out = {}
        for s in specs:
            commit = commits[s.name]
            if commit is None:
                out[s.name] = Checkout(s, top, None, made=False)
                continue
            tree = folder / s.name
            git(top, "worktree", "add", "--detach", str(tree), commit)
            made.append(tree)
            with_submodules(top, tree)
            # the benchmark's place in the checkout, as the caller's is in the repo
            out[s.name] = Checkout(s, tree, commit, made=True)
        yield out
    finally:
        for tree in made:
            with contextlib.suppress(SideError):
                git(top, "worktree", "remove", "--force", str(tree))
        shutil.rmtree(folder, ignore_errors=True)
        with contextlib.suppress(SideError):
            git(top, "worktree", "prune")
