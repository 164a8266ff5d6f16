"""Cold starts: importing the engine and every provider loads neither boto3 nor httpx."""

from __future__ import annotations

import subprocess
import sys

CHECK = """
import sys
import codeshot.engine.executor, codeshot.engine.builtin, codeshot.llm, codeshot.llm.bedrock, codeshot.llm.openai, codeshot.llm.fewshot
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("boto3", "botocore", "httpx"))
print(",".join(loaded))
"""


def test_providers_import_their_clients_lazily() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHECK], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == ""
