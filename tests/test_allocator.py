"""The caching allocator's setting per case: settings strings and the switch's order."""

from __future__ import annotations

import pytest
import torch

from gpugauge.measure import allocator
from gpugauge.measure.allocator import check_allocator, conf_with, process_conf, use_allocator


def test_conf_with_switches_expandable_segments_and_keeps_the_other_keys() -> None:
    base = "max_split_size_mb:128,roundup_power2_divisions:[256:1,512:2],backend:native"
    assert conf_with(base, True) == (
        "max_split_size_mb:128,roundup_power2_divisions:[256:1,512:2],expandable_segments:True"
    )
    assert conf_with("", False) == "expandable_segments:False"
    # restoring: the base's own choice, named even where it was left out
    assert conf_with("expandable_segments:True", None) == "expandable_segments:True"
    assert conf_with("garbage_collection_threshold:0.6", None) == (
        "garbage_collection_threshold:0.6,expandable_segments:False"
    )
    assert conf_with("expandable_segments:True,expandable_segments:False", None).endswith(
        "expandable_segments:False"
    )


def test_process_conf_reads_either_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    monkeypatch.setenv("PYTORCH_ALLOC_CONF", "expandable_segments:True")
    assert process_conf() == "expandable_segments:True"
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:64")
    assert process_conf() == "max_split_size_mb:64"


def test_unknown_allocator_is_refused_on_any_device() -> None:
    assert check_allocator("expandable") == "expandable"
    with pytest.raises(ValueError, match="allocators are"), use_allocator("pooled", ["cpu"]):
        pass
    with pytest.raises(ValueError, match="allocators are"), use_allocator("pooled", ["cuda:0"]):
        pass


def test_use_allocator_switches_empty_and_restores_even_on_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:128")
    monkeypatch.setattr(allocator, "set_conf", lambda conf: calls.append(f"set {conf}"))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty"))

    def fail() -> None:
        calls.append("body")
        raise RuntimeError("inside")

    with pytest.raises(RuntimeError, match="inside"), use_allocator("expandable", ["cuda:0"]):
        fail()
    assert calls == [
        "empty",
        "set max_split_size_mb:128,expandable_segments:True",
        "body",
        "empty",
        "set max_split_size_mb:128,expandable_segments:False",
    ]
    calls.clear()
    with use_allocator("default", ["cpu", "cpu"]):
        calls.append("body")
    assert calls == ["body"]  # nothing to switch off CUDA


def test_blas_workspaces_are_released_by_the_binding_torch_has() -> None:
    import torch

    from gpugauge.measure.allocator import release_blas_workspaces

    if torch.backends.cuda.is_built():  # a CUDA build names it, or the release is a no-op
        assert hasattr(torch._C, "_cuda_clearCublasWorkspaces")
    release_blas_workspaces(torch)  # CUDA not initialised here: nothing to free, no error
