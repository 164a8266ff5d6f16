"""Agent tokens replayed (#13 item 3): an agent's owner sees every token sent to their
agent; replayed to another user's agent it must be refused. A codeshot agent accepts only
tokens minted for its own id, and will not start without one."""

from __future__ import annotations

import os
import subprocess
import sys

import httpx

from codeshot import ids
from tests.fixie.test_cli import ROOT, agent_dir, running, stack_dir  # noqa: F401 - fixture


def test_a_token_for_one_agent_is_refused_by_another(live_stack_object, stack_dir,  # noqa: F811
                                                    tmp_path):
    auth = live_stack_object.services.auth
    victim = live_stack_object.services.users.get_by_username("local")
    directory = agent_dir(tmp_path, "vault")
    # Served beside the local stack with no CODESHOT_AGENT_ID: the id is the stack user's.
    argv = [sys.executable, "-m", "codeshot.cli", "serve", str(directory), "--port", "0"]
    env = {k: v for k, v in os.environ.items() if k not in ("CODESHOT_AGENT_ID",
                                                           "FIXIE_ALLOWED_AGENT_ID")}
    with running(argv, stack_dir, {**env, "PYTHONPATH": str(ROOT)}, until="Serving") as lines:
        url = lines[0].split(" at ")[1].split()[0]
        # What mallory's agent received from the victim's query, replayed to the vault.
        stolen = auth.agent_token("mallory/spy", victim.user_id, ids.handle())
        body = {"message": {"text": "hello", "embeds": {}}, "access_token": stolen}
        refused = httpx.post(f"{url}/shout", json=body,
                             headers={"Authorization": f"Bearer {stolen}"})
        assert refused.status_code == 403, refused.text
        assert "mallory/spy" in refused.json()["error"]["message"]
        own = auth.agent_token("local/vault", victim.user_id, ids.handle())
        ok = httpx.post(f"{url}/shout", json={**body, "access_token": own},
                        headers={"Authorization": f"Bearer {own}"})
        assert ok.status_code == 200 and ok.json()["message"]["text"] == "HELLO", ok.text


def test_an_agent_without_its_id_does_not_start(tmp_path):
    directory = agent_dir(tmp_path, "loose")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CODESHOT_", "FIXIE_"))}
    out = subprocess.run([sys.executable, "-m", "codeshot.cli", "serve", str(directory),
                          "--port", "0"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=60, check=False,
                         env={**env, "PYTHONPATH": str(ROOT),
                              "CODESHOT_API_URL": "http://127.0.0.1:9"})
    assert out.returncode == 2, out.stdout + out.stderr
    assert "CODESHOT_AGENT_ID is not set" in out.stderr
    assert len(out.stderr.splitlines()) == 1  # one clear line, no traceback
