"""Installed, the plugin is in every pytest run: it must cost nothing until a run uses it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tests.fakes import SPEC_SOURCE

# what a run that never uses gpugauge must not load: the import that made every pytest run
# of an environment take seconds, the hardware library, and the harness's heavy parts
HEAVY = (
    "torch",
    "torchvision",
    "pynvml",
    "pandas",
    "matplotlib",
    "numpy",
    "scipy",
    "gpugauge.families",
    "gpugauge.family.registry",
    "gpugauge.runtime.startup",
    "gpugauge.runtime.session",
    "gpugauge.report",
)

LOADED = f"""
import sys
print(sorted(m for m in {HEAVY!r} if m in sys.modules))
"""


def _loaded(code: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        check=True,
    )
    return out.stdout.strip().splitlines()[-1]


def test_importing_the_plugin_loads_nothing_heavy() -> None:
    assert _loaded("import gpugauge.plugin" + LOADED) == "[]"


def test_declaring_its_options_and_markers_loads_nothing_heavy() -> None:
    code = (
        "import pytest\n"
        "from gpugauge.runtime import flags, markers\n"
        "parser = pytest.Parser(_ispytest=True)\n"
        "flags.add_options(parser.getgroup('g'))\n"
        "flags.add_history_options(parser.getgroup('g'))\n"
        "flags.defaults(); markers.marker_lines()\n" + LOADED
    )
    assert _loaded(code) == "[]"


UNRELATED = f"""
import sys

def test_unrelated():
    assert sorted(m for m in {HEAVY!r} if m in sys.modules) == []
"""


def test_an_unrelated_run_loads_nothing_heavy(gauge_pytester: pytest.Pytester) -> None:
    gauge_pytester.makepyfile(test_unrelated=UNRELATED)
    # a subprocess: this process has torch loaded already
    result = gauge_pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    assert "gpugauge:" not in out  # no header
    assert "= gpugauge =" not in out  # no section


def test_a_gauge_test_starts_it_and_measures(gauge_pytester: pytest.Pytester) -> None:
    gauge_pytester.makepyfile(
        test_mine=SPEC_SOURCE
        + """
def test_mine(gauge):
    gauge.measure(Spec("mine"), lambda: time.sleep(0.001))
"""
    )
    result = gauge_pytester.runpytest_subprocess("-p", "no:cacheprovider", "--gauge-no-history")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*gpugauge: profile=smoke devices=cpu*", "*gpugauge results*"])


def test_a_gpu_marked_test_is_still_skipped(gauge_pytester: pytest.Pytester) -> None:
    gauge_pytester.makepyfile(
        """
        import pytest

        @pytest.mark.gpu
        def test_needs_gpu():
            raise AssertionError("must be skipped where no GPU is visible")
        """
    )
    result = gauge_pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*needs a CUDA GPU; none is visible here*"])


def test_a_start_that_fails_while_collecting_is_a_usage_error(
    gauge_pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    gauge_pytester.makepyfile(
        test_mine=SPEC_SOURCE
        + """
from gpugauge.plugin import parametrize_cases

def pytest_generate_tests(metafunc):
    parametrize_cases(metafunc, "case", lambda profile: [Spec("a")])

def test_mine(case, gauge):
    gauge.measure(case, lambda: None)
"""
    )
    (gauge_pytester.path / "afile").write_text("")
    monkeypatch.setenv("GPUGAUGE_HISTORY", str(gauge_pytester.path / "afile/h.db"))
    result = gauge_pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--gauge-history:" in result.stderr.str()


def test_the_defaults_that_tell_an_option_given_are_pytests(pytestconfig: pytest.Config) -> None:
    from gpugauge.runtime import flags

    parser = pytest.Parser(_ispytest=True)
    group = parser.getgroup("gpugauge")
    flags.add_options(group)
    flags.add_history_options(group)
    parsed = vars(parser.parse([]))
    assert {d: parsed[d] for d in flags.defaults()} == dict(flags.defaults())
    assert set(flags.defaults()) == {o.dest for o in group.options}
    # and this run's own values of them are pytest's parse of the same declarations
    assert set(flags.defaults()) <= set(vars(pytestconfig.option))


def test_every_family_marker_is_declared_without_importing_the_family() -> None:
    """The markers come from the declarations; the registry loads the same families."""
    from gpugauge.family.entries import family_names
    from gpugauge.family.registry import registry
    from gpugauge.runtime.markers import marker_lines

    assert family_names() == tuple(registry())
    marked = [line.split(":")[0] for line in marker_lines()]
    assert [n for n in marked if n in family_names()] == list(family_names())


WITHOUT_TORCHVISION = """
import sys

import pytest

sys.modules["torchvision"] = None  # as in an install without the families extra
sys.exit(pytest.main(sys.argv[1:]))
"""


def test_a_family_whose_module_is_missing_skips_with_the_reason(tmp_path) -> None:
    """The light install has no torchvision: distributed's cases skip, saying what to install."""
    args = ["benches/test_distributed.py", "-rs", "-p", "no:cacheprovider", "--gauge-no-history"]
    run = subprocess.run(
        [sys.executable, "-c", WITHOUT_TORCHVISION, *args, f"--basetemp={tmp_path}"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "error" not in run.stdout.lower()
    assert (
        "family distributed needs torchvision, which is not installed: "
        "pip install 'gpugauge[families]'" in run.stdout
    )
    assert " passed" not in run.stdout  # every case skipped, none ran


OWN_OPTIONS = """
pytest_plugins = ["gpugauge.plugin"]


def pytest_addoption(parser):
    parser.addoption("--device", default="cpu")
    parser.addoption("--profile", action="store_true")
    parser.addoption("--rounds", type=int, default=1)
    parser.addoption("--gate", action="store_true")
"""


def test_a_project_with_its_own_common_options_starts(gauge_pytester: pytest.Pytester) -> None:
    """A conftest declaring --device, --profile, --rounds and --gate: gpugauge takes none."""
    gauge_pytester.makeconftest(OWN_OPTIONS)
    gauge_pytester.makepyfile(
        test_mine=SPEC_SOURCE
        + """
def test_theirs(pytestconfig):
    got = [pytestconfig.getoption(o) for o in ("device", "profile", "rounds", "gate")]
    assert got == ["meta", True, 7, True]

def test_ours(gauge, pytestconfig):
    m = gauge.measure(Spec("mine"), lambda: time.sleep(0.001))
    assert len(m.timing.device_ms) == pytestconfig.getoption("gauge_rounds") == 3
"""
    )
    result = gauge_pytester.runpytest_subprocess(
        *("--device", "meta", "--profile", "--rounds", "7", "--gate"),
        *("--gauge-rounds", "3", "--gauge-warmup", "1", "--gauge-no-history"),
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=2)
