"""An agent's bundle must not carry the platform: importing the SDK and building an
agent's app load none of it (nor boto3), and the SDK installs and runs with only its own
dependencies (pyproject's [project].dependencies)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PLATFORM = ("codeshot.store", "codeshot.api", "codeshot.runner", "codeshot.services",
            "codeshot.local", "codeshot.aws", "codeshot.devtools", "codeshot.usecases",
            "codeshot.routing", "codeshot.engine.executor", "codeshot.engine.builtin",
            "boto3", "botocore", "strawberry", "numpy")
AGENT_APP = ("from codeshot.sdk import CodeShotAgent\n"
             "from codeshot.settings import Settings\n"
             "agent = CodeShotAgent('I echo.', 'Q: hi\\nAsk Func[echo]: hi\\n"
             "Func[echo] says: hi\\nA: hi')\n"
             "agent.register_func(lambda query: query.text, func_name='echo')\n"
             "agent.app(Settings(agent_id='me/echo'))")
REPORT = "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"


def platform_modules(loaded: list[str]) -> list[str]:
    return [m for m in loaded if m in PLATFORM or m.startswith(tuple(p + "." for p in PLATFORM))]


def modules_after(script: str, python: str = sys.executable, cwd: Path | None = None
                  ) -> list[str]:
    """The modules ``script`` leaves loaded in a fresh interpreter."""
    run = subprocess.run([python, "-c", script + REPORT], check=True, capture_output=True,
                         text=True, cwd=cwd)
    return json.loads(run.stdout.splitlines()[-1])


def test_importing_the_sdk_loads_no_platform_module():
    loaded = modules_after(
        "from codeshot.sdk import CodeShotAgent, StandaloneAgent, Message, Embed, "
        "AgentResponse, AgentError, UserStorage")
    assert "codeshot.sdk.user_storage" in loaded and "codeshot.engine.fewshot" in loaded
    assert platform_modules(loaded) == []


def test_building_an_agent_app_loads_no_platform_module():
    loaded = modules_after(AGENT_APP)
    assert "fastapi" in loaded and "codeshot.sdk.app" in loaded
    assert platform_modules(loaded) == []


@pytest.mark.slow
def test_the_sdk_installs_and_runs_with_only_its_own_dependencies(tmp_path, monkeypatch):
    """`pip install codeshot-kit` into a fresh virtualenv: the SDK's dependencies and
    nothing of the platform's; an agent is built and answers its handshake there."""
    monkeypatch.delenv("PYTHONPATH", raising=False)  # the virtualenv's package, not ours
    source = tmp_path / "src"  # the distribution's sources, so pip writes nothing here
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    shutil.copytree(REPO / "codeshot", source / "codeshot",
                    ignore=shutil.ignore_patterns("__pycache__"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    install = subprocess.run([python, "-m", "pip", "install", "-q", str(source)],
                             capture_output=True, text=True, timeout=600, check=False)
    if install.returncode != 0 and "No matching distribution" in install.stderr:
        pytest.skip(f"PyPI is unreachable: {install.stderr.strip()[-300:]}")
    assert install.returncode == 0, install.stderr

    outside = tmp_path / "elsewhere"  # not the repository: the installed package is used
    outside.mkdir()
    platform_packages = ["boto3", "botocore", "strawberry", "numpy", "moto"]
    absent = subprocess.run(
        [python, "-c", "import importlib.util, json, sys; print(json.dumps([n for n in "
         "sys.argv[1:] if importlib.util.find_spec(n) is None]))", *platform_packages],
        check=True, capture_output=True, text=True, cwd=outside)
    assert json.loads(absent.stdout) == platform_packages
    loaded = modules_after(
        AGENT_APP + "\nfrom fastapi.testclient import TestClient\n"
        "import codeshot\n"
        "assert 'site-packages' in codeshot.__file__, codeshot.__file__\n"
        "reply = TestClient(agent.app(Settings(agent_id='me/echo'))).get('/')\n"
        "assert reply.status_code == 401, reply.text  # the app runs: it wants a token",
        python, outside)
    assert "codeshot.sdk.app" in loaded
    assert platform_modules(loaded) == []
