import subprocess
from pathlib import Path

import pytest

from gpugauge.measure.environment import device_class, fingerprint, git_commit, slug


def test_slug() -> None:
    assert slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
    assert slug("  A/B (c) ") == "a-b-c"


def test_cpu_device_class() -> None:
    assert device_class("cpu").startswith("cpu-")


def test_git_commit_inside_and_outside_a_repository(tmp_path: Path) -> None:
    outside = git_commit(tmp_path)
    assert outside["commit"] is None
    assert "not a git checkout" in outside["reason"]
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
        "PATH": "/usr/bin:/bin",
    }
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "f").write_text("x")
    subprocess.run(["git", "add", "f"], cwd=tmp_path, check=True)
    subprocess.run(["git", "commit", "-qm", "x"], cwd=tmp_path, check=True, env=env)
    inside = git_commit(tmp_path)
    assert len(inside["commit"]) == 40
    assert inside["dirty"] is False
    (tmp_path / "f").write_text("y")
    assert git_commit(tmp_path)["dirty"] is True


def test_the_environment_names_the_commit_of_a_copied_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUGAUGE_GIT_COMMIT", "0123abcd")
    copied = git_commit(tmp_path)
    assert copied["commit"] == "0123abcd"
    assert copied["dirty"] is None
    assert "GPUGAUGE_GIT_COMMIT" in copied["reason"]
    monkeypatch.delenv("GPUGAUGE_GIT_COMMIT")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "f").write_text("x")
    subprocess.run(["git", "add", "f"], cwd=tmp_path, check=True)
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t"}
    env |= {"GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin"}
    subprocess.run(["git", "commit", "-qm", "x"], cwd=tmp_path, check=True, env=env)
    inside = git_commit(tmp_path)["commit"]
    assert len(inside) == 40
    monkeypatch.setenv("GPUGAUGE_GIT_COMMIT", "0123abcd")  # set: it wins (a stale .git)
    assert git_commit(tmp_path)["commit"] == "0123abcd"


def test_fingerprint_without_nvml_says_why() -> None:
    import torch

    info = fingerprint(Path.cwd(), None, "NVML Shared Library Not Found")
    assert info["torch"] == torch.__version__
    assert info["nvml"] == "NVML Shared Library Not Found"
    assert set(info["flags"]) >= {"cuda_matmul_allow_tf32", "cudnn_benchmark", "cudnn_allow_tf32"}
    for key in ("python", "cpu", "cuda_runtime", "cudnn", "git", "gpu_count", "driver"):
        assert key in info
