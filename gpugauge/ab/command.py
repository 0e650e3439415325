"""One A/B from a command line: its selection, its configuration, its run, its exit status.

Shared by ``gpugauge ab``, ``bisect`` and ``confirm`` (:mod:`gpugauge.ab.cli`,
:mod:`gpugauge.ab.confirm_command`).
"""

from __future__ import annotations

import argparse
import contextlib
import shlex
import shutil
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path

from gpugauge.ab.budget import Budget
from gpugauge.ab.config import SETUP_MEMO, ABConfig, forget_earlier
from gpugauge.ab.gpus import folder_of, host_gpus, over_gpus
from gpugauge.ab.render import write_ab_report
from gpugauge.ab.result import ABReport
from gpugauge.ab.rounds import run_sides
from gpugauge.ab.runner import ABError
from gpugauge.ab.sides import SideError, SideSpec, checkouts, repo_root
from gpugauge.ab.verdict import Schedule
from gpugauge.check.runs import sigterm_as_interrupt
from gpugauge.results.files import Busy, held_or_refused, make_dir

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130
OUT_LOCK = ".gpugauge-ab.lock"  # in --out while a command A/Bs into it, naming its pid


@contextlib.contextmanager
def owning(out: Path) -> Iterator[Path]:
    """``--out`` made and held by this command alone while the block runs.

    Two A/Bs writing one folder would overwrite each other's ``ab.json``, and the first
    one's verdicts would be lost: the second is refused at once, naming the first.
    An A/B refused before it wrote anything (no checkout, a GPU the host lacks) removes
    the folders it made for ``--out``, which are still empty: the refusal leaves no trace.
    """
    made = [p for p in (out, *out.parents) if not p.exists()]  # deepest first
    make_dir(out, "--out")
    try:
        with contextlib.ExitStack() as stack:
            try:
                stack.enter_context(held_or_refused(out / OUT_LOCK))
            except Busy as err:
                who = f"pid {err.pid}" if err.pid is not None else "a process that is starting"
                raise SideError(
                    f"--out {out} is in use by another A/B ({who}): wait for it to end, or "
                    "give another --out"
                ) from None
            yield out
    except BaseException:
        for folder in made:
            try:
                folder.rmdir()  # only an empty one: what was written stays
            except OSError:
                break
        raise


def selection(args: argparse.Namespace, ids: Sequence[str] | None = None) -> tuple[str, ...]:
    """Both sides' pytest arguments: -k, -m and the rest; or the rest and the node ids ``ids``.

    A later round's selection is its node ids: round 1 applied -k and -m, and a build from
    before a marker they name would deselect them. The profile goes to the sides by option
    dest (:class:`~gpugauge.ab.config.ABConfig`), as its option's name differs between older
    and newer commits.
    """
    out: list[str] = []
    if args.select and not ids:
        out += ["-k", args.select]
    if args.markers and not ids:
        out += ["-m", args.markers]
    given = [*_without_tests(args.pytest_args, bool(ids)), *(ids or ())]
    paths = [a for a in given if _names_tests(a)]
    where = () if paths or not Path(args.benches).exists() else (args.benches,)
    return (*where, *out, *given)


def _names_tests(arg: str) -> bool:
    """Whether a pytest argument names tests: a node id, or a file or folder that exists."""
    return "::" in arg or Path(arg).exists()


def _without_tests(given: Sequence[str], ids: bool) -> list[str]:
    """``given`` less the tests it names, where node ids are given instead.

    A later round's selection is its node ids alone. A path right after an option (its value,
    as in ``--gauge-baselines-dir baselines``) stays.
    """
    if not ids:
        return list(given)
    out = []
    for i, arg in enumerate(given):
        value = i > 0 and given[i - 1].startswith("-") and "=" not in given[i - 1]
        if value or not _names_tests(arg):
            out.append(arg)
    return out


def side_args_of(args: argparse.Namespace) -> dict[str, tuple[str, ...]]:
    """--base-args and --head-args, split as a shell would; SideError for one that does not."""
    try:
        return {
            "base": tuple(shlex.split(args.base_args)),
            "head": tuple(shlex.split(args.head_args)),
        }
    except ValueError as err:
        raise SideError(f"--base-args/--head-args: {err}") from None


def config_of(
    args: argparse.Namespace,
    out: Path,
    ids: Sequence[str] | None = None,
    budget: Budget | None = None,
) -> ABConfig:
    """The A/B's configuration from the command line, within ``budget`` (None: no limit)."""
    cfg = ABConfig(
        selection(args, ids),
        out,
        side_args=side_args_of(args),
        schedule=replace(
            Schedule(),
            min_effect=args.min_effect,
            max_pairs=args.max_pairs,
            rounds=getattr(args, "rounds", Schedule().rounds),
        ),
        block_s=args.block_time,
        profile=args.profile,
        memo=out / SETUP_MEMO,
    )
    return replace(cfg, budget=replace(budget or Budget(), first_look_s=cfg.first_look_s))


def run_ab(
    args: argparse.Namespace,
    base: str,
    head: str,
    out: Path,
    ids: Sequence[str] | None = None,
    budget: Budget | None = None,
    *,
    gated: Sequence[str] | None = None,
    later: Callable[[Sequence[str]], Sequence[str]] | None = None,
) -> ABReport:
    """One A/B of two refs with this command line's selection and settings, within ``budget``.

    ``gated``: round 1's head process runs as its command line says, with these options
    too (the gated run of ``confirm --measure``: options an older base may not know);
    ``later``: which of round 1's paired tests this A/B judges, and the later rounds run
    (None: every one).
    """
    here = Path.cwd()
    top = repo_root(here)
    specs = [
        SideSpec("base", base, args.base_python or sys.executable),
        SideSpec("head", head, args.head_python or sys.executable),
    ]
    asked = getattr(args, "gpus", None)  # confirm has no --gpus
    gpus = host_gpus(asked) if asked else ()
    cfg = replace(config_of(args, make_dir(out, "--out"), ids, budget), picked=later is not None)
    if gated is not None:
        as_is = (*cfg.side_args.get("head", ()), *gated)
        gated_side = {**cfg.side_args, "head": as_is}
        cfg = replace(cfg, side_args=gated_side, head_as_is=True)
    where = f" over GPUs {', '.join(gpus)}" if gpus else ""
    print(f"gpugauge ab: {base} against {head}{where}; logs and saved runs in {out}", flush=True)
    folders = [out, *(folder_of(out, g) for g in gpus)]
    with checkouts(top, specs) as sides:
        # the setup answers of an earlier A/B's builds are never this one's; its records
        # go once this one has tests to run (gpugauge.ab.config.forget_earlier)
        for folder in folders:
            if (folder / SETUP_MEMO).exists():
                shutil.rmtree(folder / SETUP_MEMO)
        rel = here.resolve().relative_to(top.resolve())
        cwd = rel if str(rel) != "." else None
        try:
            if gpus:

                def rounds_of(gpu: str) -> tuple[ABConfig, Callable[[Sequence[str]], ABConfig]]:
                    folder = folder_of(out, gpu)
                    first = replace(config_of(args, folder, ids, budget), picked=later is not None)
                    return first, partial(config_of, args, folder, budget=budget)

                report = over_gpus(gpus, rounds_of, sides, say, out, cwd, later)
            else:
                next_round = partial(config_of, args, out, budget=budget)
                report = run_sides(cfg, sides, say, cwd, next_round, later)
        except ABError:
            # broken, not refused: the earlier A/B's records must not pass for this one's
            for folder in folders:
                forget_earlier(folder)
            raise
    write_ab_report(report, out)
    return report


def say(line: str) -> None:
    print(line, flush=True)


def guarded(name: str, body: Callable[[], int]) -> int:
    """Run ``body()``; its errors as one line and an exit status (interrupted: 130)."""
    try:
        with sigterm_as_interrupt():
            return body()
    except KeyboardInterrupt:
        print(
            f"\ngpugauge {name}: interrupted; both sides stopped, worktrees removed",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    except (SideError, ValueError, OSError) as err:
        print(f"gpugauge {name}: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except ABError as err:
        print(f"gpugauge {name}: {err}", file=sys.stderr)
        return EXIT_FAILED
