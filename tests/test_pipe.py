"""The pipeline's issuing threads, on the CPU."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from gpugauge.families.layer_fit.pipe import Workers


def test_workers_run_each_stage_on_its_own_thread_at_once() -> None:
    workers = Workers(["cpu", "cpu"])
    both = threading.Barrier(2, timeout=5)  # fails unless the two tasks run together

    def task(i: int) -> tuple[int, str]:
        both.wait()
        return i, threading.current_thread().name

    (a, name_a), (b, name_b) = workers.run([(0, lambda: task(0)), (1, lambda: task(1))])
    assert (a, b) == (0, 1)
    assert name_a.startswith("stage0")
    assert name_b.startswith("stage1")
    workers.close()


def test_workers_raise_only_after_every_task_has_stopped() -> None:
    workers = Workers(["cpu", "cpu"])
    finished = threading.Event()

    def fails() -> None:
        raise torch.OutOfMemoryError("simulated")

    def slow() -> None:
        time.sleep(0.2)
        finished.set()

    with pytest.raises(torch.OutOfMemoryError, match="simulated"):
        workers.run([(0, fails), (1, slow)])
    assert finished.is_set()  # nothing was still issuing when the error came back
    assert workers.run([(0, lambda: 1)]) == [1]  # and the threads are still usable


def test_workers_carry_the_callers_grad_mode() -> None:
    workers = Workers(["cpu"])
    with torch.no_grad():
        assert workers.run([(0, torch.is_grad_enabled)]) == [False]
    assert workers.run([(0, torch.is_grad_enabled)]) == [True]


def test_workers_raise_the_first_error_and_name_the_others() -> None:
    workers = Workers(["cpu", "cpu"])

    def fails(what: str) -> None:
        raise RuntimeError(what)

    with pytest.raises(RuntimeError, match="stage 0") as info:
        workers.run([(0, lambda: fails("stage 0")), (1, lambda: fails("stage 1"))])
    assert any("stage 1" in note for note in info.value.__notes__)
