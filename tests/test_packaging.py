"""Packaging: light imports, the command line, the README's commands and the public API.

These tests look at the package from the outside, the way a new user meets it: ``import
spinsa`` must stay light, every subcommand must explain itself, the set-up commands in the
README must be the ones CI runs, and the names of the public API (docs/api.md) must be there.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
CI_SCRIPT = ROOT / ".ci" / "run"
HEAVY = ("torch", "dask", "matplotlib")

# The public API (docs/api.md, "The spinsa namespace"; random_couplings is the companion of
# hebbian_couplings in spinsa.couplings).
PUBLIC_NAMES = [
    "PatchEmbedding",
    "site_energies",
    "energy",
    "attention",
    "local_fields",
    "step",
    "run",
    "hebbian_couplings",
    "random_couplings",
    "pl_loss_and_grad",
    "fit_pseudolikelihood",
]


def _python(code: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter (so that this process's imports don't count)."""
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT
    )


def _loaded_heavy(code: str) -> list[str]:
    probe = (
        f"{code}\nimport json, sys\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    )
    result = _python(probe)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------- light imports
def test_import_spinsa_loads_no_heavy_dependency():
    loaded = _loaded_heavy("import spinsa")
    assert loaded == [], (
        f"`import spinsa` imported {loaded}; import them inside the functions that need them"
    )


def test_building_the_command_line_loads_no_heavy_dependency():
    loaded = _loaded_heavy("import spinsa.cli\nspinsa.cli.build_parser()")
    assert loaded == [], (
        f"building the `spinsa` parser imported {loaded}; import them in the handlers, so "
        "that `spinsa --help` stays fast"
    )


def test_subpackages_are_reachable_after_import_spinsa_and_load_lazily():
    # `import spinsa` then `spinsa.plotting.figure_...`: imported on first access, and
    # neither the import nor the access loads matplotlib (the figure functions do)
    code = (
        "import sys, spinsa\n"
        "before = 'spinsa.plotting' in sys.modules\n"
        "f = spinsa.plotting.figure_hebbian\n"
        "a = spinsa.analysis.find_attractors\n"
        "assert 'plotting' in dir(spinsa)\n"
        "try:\n    spinsa.no_such_thing\nexcept AttributeError as e:\n    print(e)\n"
        "print(before, callable(f) and callable(a))"
    )
    result = _python(code)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[-1] == "False True"
    assert "no attribute 'no_such_thing'" in lines[-2]
    assert _loaded_heavy("import spinsa\nspinsa.plotting\nspinsa.analysis") == []


# Modules that need a heavy dependency at import time, with the reason. Their package must
# still import without it (it loads them on first use); everything else must not import one.
HEAVY_AT_IMPORT = {
    "spinsa.baselines.models": ("torch", "torch.nn.Module subclasses; spinsa.baselines is lazy"),
    "spinsa.sequences.models": ("torch", "torch.nn.Module subclasses; sequences.train is lazy"),
}


def test_every_module_imports_without_heavy_dependencies():
    """Each module of spinsa imports cleanly, and none imports torch, dask or matplotlib.

    The modules of ``HEAVY_AT_IMPORT`` are imported last (once torch is loaded, nothing
    after it could be caught importing torch) and only when their dependency is installed.
    """
    code = f"""
import importlib, importlib.util, json, pkgutil, sys, traceback
import spinsa
allowed = {{name: dep for name, (dep, _) in {HEAVY_AT_IMPORT!r}.items()}}
names = [info.name for info in pkgutil.walk_packages(spinsa.__path__, "spinsa.")]
names = [n for n in names if n not in allowed] + [n for n in names if n in allowed]
report = {{}}
for name in names:
    if name in allowed and importlib.util.find_spec(allowed[name]) is None:
        continue
    before = {{m for m in {HEAVY!r} if m in sys.modules}}
    try:
        importlib.import_module(name)
    except Exception:
        report[name] = "import failed: " + traceback.format_exc(limit=3)
        continue
    new = sorted({{m for m in {HEAVY!r} if m in sys.modules}} - before - {{allowed.get(name)}})
    if new:
        report[name] = "imported " + ", ".join(new) + " at import time"
print(json.dumps(report))
"""
    result = _python(code)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report == {}, "\n".join(f"{name}: {what}" for name, what in report.items())


def test_version_matches_the_installed_metadata():
    import spinsa

    assert spinsa.__version__ == importlib.metadata.version("spinsa")


# ------------------------------------------------------------------------ command line
def _subcommands() -> list[list[str]]:
    """Every subcommand path of ``spinsa.cli.build_parser()``, nested ones included."""
    from spinsa.cli import build_parser

    found: list[list[str]] = []

    def walk(parser: argparse.ArgumentParser, prefix: list[str]) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    found.append([*prefix, name])
                    walk(sub, [*prefix, name])

    walk(build_parser(), [])
    return found


def _spinsa_command() -> list[str]:
    """The installed ``spinsa`` console script (next to this interpreter, else on PATH)."""
    script = Path(sys.executable).parent / "spinsa"
    if script.exists():
        return [str(script)]
    found = shutil.which("spinsa")
    if found is None:
        pytest.fail("the `spinsa` command is not installed; run: pip install -e .")
    return [found]


def _spinsa(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*_spinsa_command(), *args], capture_output=True, text=True, timeout=120, cwd=ROOT
    )


def test_spinsa_help_exits_0_and_lists_the_subcommands():
    result = _spinsa("--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: spinsa")
    for path in _subcommands():
        if len(path) == 1:
            assert path[0] in result.stdout, f"`spinsa --help` does not list {path[0]}"


def test_spinsa_version():
    import spinsa

    result = _spinsa("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"spinsa {spinsa.__version__}"


def test_there_are_subcommands():
    assert _subcommands(), "spinsa.cli.build_parser() declares no subcommand"


@pytest.mark.parametrize("path", _subcommands(), ids=" ".join)
def test_every_subcommand_help_exits_0(path, capsys):
    # In this process (one interpreter start per subcommand would be slow); the console
    # script itself is exercised by the tests above.
    from spinsa.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main([*path, "--help"])
    out = capsys.readouterr().out
    assert exit_info.value.code in (0, None), f"`spinsa {' '.join(path)} --help` failed"
    assert f"usage: spinsa {' '.join(path)}" in out


def test_every_subcommand_has_a_help_text():
    from spinsa.cli import build_parser

    missing = []

    def walk(parser: argparse.ArgumentParser, prefix: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for choice in action._choices_actions:
                    if not choice.help:
                        missing.append(f"{prefix} {choice.dest}")
                for name, sub in action.choices.items():
                    walk(sub, f"{prefix} {name}")

    walk(build_parser(), "spinsa")
    assert missing == [], f"subcommands without help=...: {missing}"


# ------------------------------------------------------------------ README and CI
def _readme_block(name: str) -> str:
    """The body of the fenced block between ``<!-- name -->`` and ``<!-- /name -->``."""
    text = README.read_text(encoding="utf-8")
    pattern = rf"^<!-- {name} -->\n```bash\n(.*?)\n```\n<!-- /{name} -->$"
    blocks = re.findall(pattern, text, flags=re.MULTILINE | re.DOTALL)
    assert len(blocks) == 1, f"README.md must have exactly one <!-- {name} --> bash block"
    return blocks[0]


def test_readme_commands_are_single_lines_from_a_clone():
    for name in ("main-command", "test-command"):
        command = _readme_block(name)
        assert "\n" not in command, f"the README's {name} must be one copy-pasteable line"
        assert command.startswith("python3 -m venv .venv && "), command


def test_readme_test_command_installs_what_ci_needs():
    # .ci/run builds the docs and lints with the tools of .venv after the test command.
    command = _readme_block("test-command")
    assert '-e ".[all]"' in command, command
    assert command.endswith(".venv/bin/python -m pytest"), command


def test_readme_main_and_test_commands_set_up_the_same_environment():
    main, tests = _readme_block("main-command"), _readme_block("test-command")
    setup = tests.rsplit(" && ", 1)[0]
    assert main.startswith(setup + " && "), (main, tests)


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_ci_script_is_valid_bash():
    result = subprocess.run(["bash", "-n", str(CI_SCRIPT)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_slurm_localhost_script_is_valid_bash_and_explains_itself():
    script = ROOT / "scripts" / "slurm-localhost.sh"
    result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    result = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=30)
    assert result.returncode == 2 and "install|start|status|stop" in result.stderr


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_ci_runs_exactly_the_readme_test_command():
    result = subprocess.run(
        ["bash", str(CI_SCRIPT), "--print-test-command"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == _readme_block("test-command") + "\n"


# ------------------------------------------------------------------------- public API
@pytest.mark.parametrize("name", PUBLIC_NAMES)
def test_public_name_of_the_design_exists(name):
    import spinsa

    assert hasattr(spinsa, name), (
        f"spinsa.{name} is missing: docs/api.md promises it; define it and re-export it in "
        "spinsa/__init__.py"
    )
    assert name in spinsa.__all__, f"spinsa.{name} exists but is not listed in spinsa.__all__"
    assert callable(getattr(spinsa, name))


def test_everything_in_all_exists():
    import spinsa

    dangling = [name for name in spinsa.__all__ if not hasattr(spinsa, name)]
    assert dangling == [], f"spinsa.__all__ lists names that do not exist: {dangling}"


def test_info_separates_every_package_from_its_version(capsys):
    # a name as long as the column (dask_jobqueue) once ran into its version
    from spinsa.cli import main

    assert main(["info"]) == 0
    rows = [line.strip() for line in capsys.readouterr().out.splitlines()]
    for name in ("numpy", "scipy", "numba", "h5py", "dask_jobqueue"):
        row = next(r for r in rows if r.startswith(name))
        assert row[len(name)] == " ", f"no space after {name!r} in {row!r}"
