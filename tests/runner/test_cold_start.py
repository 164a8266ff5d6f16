"""The runner's cold start stays small: building it loads no pydantic, and a query's
heavier libraries (numpy, PyJWT, PyNaCl) wait for the first query.
benchmarks/cold_start.py measures the times; this keeps the imports from creeping back."""

from __future__ import annotations

import json
import subprocess
import sys

DEFERRED = ("pydantic", "pydantic_core", "numpy", "jwt", "nacl", "cryptography", "yaml",
            "fastapi", "strawberry", "mcp", "httpx2")


def test_building_the_runner_loads_only_what_it_needs():
    script = ("import handlers.runner; handlers.runner._runner()\n"
              "import json, sys; print(json.dumps(sorted(sys.modules)))")
    run = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True,
                         text=True, env={"AWS_DEFAULT_REGION": "us-east-1", "PATH": ""})
    loaded = json.loads(run.stdout.splitlines()[-1])
    assert "codeshot.runner.session_runner" in loaded and "boto3" in loaded
    assert sorted({m.split(".")[0] for m in loaded} & set(DEFERRED)) == []
