"""An agent's bundle must not carry the platform: importing the SDK and building an
agent's app load none of it (nor boto3)."""

from __future__ import annotations

import json
import subprocess
import sys

PLATFORM = ("codeshot.store", "codeshot.api", "codeshot.runner", "codeshot.services",
            "codeshot.local", "codeshot.aws", "boto3", "botocore")


def platform_modules_after(script: str) -> tuple[list[str], list[str]]:
    """(all modules, platform modules) loaded by ``script`` in a fresh interpreter."""
    run = subprocess.run([sys.executable, "-c", script + "\nimport json, sys\n"
                          "print(json.dumps(sorted(sys.modules)))"],
                         check=True, capture_output=True, text=True)
    loaded = json.loads(run.stdout.splitlines()[-1])
    return loaded, [m for m in loaded if m in PLATFORM or m.startswith(tuple(
        p + "." for p in PLATFORM))]


def test_importing_the_sdk_loads_no_platform_module():
    loaded, leaked = platform_modules_after(
        "from codeshot.sdk import CodeShotAgent, StandaloneAgent, Message, Embed, "
        "AgentResponse, AgentError, UserStorage")
    assert "codeshot.sdk.user_storage" in loaded
    assert leaked == []


def test_building_an_agent_app_loads_no_platform_module():
    loaded, leaked = platform_modules_after(
        "from codeshot.sdk import CodeShotAgent\n"
        "agent = CodeShotAgent('I echo.', 'Q: hi\\nAsk Func[echo]: hi\\nFunc[echo] says: hi\\nA: hi')\n"
        "agent.register_func(lambda query: query.text, func_name='echo')\n"
        "agent.app()")
    assert "fastapi" in loaded and "codeshot.sdk.app" in loaded
    assert leaked == []
