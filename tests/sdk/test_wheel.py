"""The package as `pip install /path/to/codeshot` installs it (no -e): a wheel built from
this tree and installed alone, with nothing of the repository beside it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A directory holding only the installed codeshot package (its dependencies come from
    this interpreter)."""
    where = tmp_path_factory.mktemp("wheel")
    # Built as pip builds it for a user: in isolation, with pyproject's build requirements
    # (a virtualenv's own setuptools may be too old for its licence field).
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps",
                    "-q", "-w", str(where / "dist")],
                   check=True, timeout=300, capture_output=True, cwd=where)
    [wheel] = (where / "dist").glob("*.whl")
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target",
                    str(where / "site"), str(wheel)], check=True, timeout=300,
                   capture_output=True)
    return where / "site"


def run(installed: Path, *code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CODESHOT_")}
    return subprocess.run([sys.executable, *code], cwd=cwd, capture_output=True, text=True,
                          timeout=120, check=False, env={**env, "PYTHONPATH": str(installed)})


def test_codeshot_new_copies_the_template_from_an_installed_package(installed, tmp_path):
    out = run(installed, "-m", "codeshot.cli", "new", "mine", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("Created agent 'mine' in mine. It is still the notes template")
    assert {p.name for p in (tmp_path / "mine").iterdir()} >= {"agent.py", "agent.yaml",
                                                               "README.md", "tests"}


def test_the_local_stack_runs_the_quick_starts_agents_from_an_installed_package(installed,
                                                                               tmp_path):
    out = run(installed, "-c", "import codeshot; from codeshot.local.stack import "
              "example_agent_dirs as d; print(codeshot.__file__); "
              "print(' '.join(p.name for p in d()))", cwd=tmp_path)
    where, names = out.stdout.splitlines()
    assert where.startswith(str(installed)), where  # not the repository's
    assert names == "agent_template clock dice"  # notes (the template), clock and dice
