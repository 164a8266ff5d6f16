"""The real `fixie serve --no-tunnel` (fixieai 1.0.4, its own virtualenv) against the
platform: it serves the agent directory at agent.yaml's deployment_url, makes a revision
there current while it runs, and when stopped makes the previous one current again and
deletes its own."""

from __future__ import annotations

import signal
import subprocess
import textwrap
import time

import pytest

import codeshot.sdk as fixieai
from codeshot.devtools.agents import serve
from tests.conftest import free_port
from tests.fixie.test_fixie_client_cli import fixie_env
from tests.runner.conftest import register, send, session

FEW_SHOTS = """
Q: What is the secret word for apples?
Ask Func[secret]: apples
Func[secret] says: APPLES FROM FIXIE SERVE
A: The secret word for apples is APPLES FROM FIXIE SERVE.
"""
SERVED = textwrap.dedent('''
    import fixieai

    agent = fixieai.CodeShotAgent("I tell the secret word of a thing.", """{few_shots}""")


    @agent.register_func
    def secret(query: fixieai.Message) -> str:
        return query.text.strip().upper() + " FROM FIXIE SERVE"
''')
REVISIONS = """query ($id: String!) { agentById(agentId: $id) { funcUrl
    currentRevision { id } allRevisions { id } } }"""


def revisions(live, key: str, agent_id: str) -> dict:
    return live.gql(key, REVISIONS, {"id": agent_id})["data"]["agentById"]


def ask(live, key: str, agent_id: str, text: str) -> str:
    reply = send(live, key, session(live, key, agent_id), text)["reply"]
    assert reply["type"] == "response", reply
    return str(reply["text"])


# Two processes (fixie serve and the agent it starts) and three queries: about ten seconds.
@pytest.mark.slow
# No agent cache: the query right after a switch goes to the new revision (a runner
# otherwise keeps an agent for CODESHOT_AGENT_CACHE_SECONDS).
@pytest.mark.settings(agent_cache_seconds=0)
def test_fixie_serve_no_tunnel_serves_a_revision_and_restores_the_previous(
        live, user, fixie_python, tmp_path):
    agent_id = f"{user.username}/secret"
    first = fixieai.CodeShotAgent("I tell the secret word of a thing.", FEW_SHOTS)

    @first.register_func
    def secret(query: fixieai.Message) -> str:
        return query.text.strip().upper() + " FROM THE FIRST REVISION"

    with serve(first, live.url, agent_id) as first_url:
        register(live, user.key, "secret", first_url, published=False)
        previous = revisions(live, user.key, agent_id)["currentRevision"]["id"]
        assert "FROM THE FIRST REVISION" in ask(live, user.key, agent_id,
                                                "What is the secret word for pears?")

        port = free_port()
        (tmp_path / "agent.yaml").write_text(
            f"handle: secret\nname: Secret\ndescription: Tells secret words\n"
            f"entry_point: main:agent\ndeployment_url: http://127.0.0.1:{port}\n")
        (tmp_path / "main.py").write_text(SERVED.format(few_shots=FEW_SHOTS))
        log = tmp_path / "serve.log"
        env = fixie_env({"api_url": live.url, "api_key": user.key}, tmp_path)
        with log.open("w") as out:
            served = subprocess.Popen(
                [str(fixie_python.with_name("fixie")), "serve", "--no-tunnel",
                 "--host", "127.0.0.1", "--port", str(port)],
                cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 60
            while (now := revisions(live, user.key, agent_id))["currentRevision"]["id"] \
                    == previous:
                assert served.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.2)
            temporary = now["currentRevision"]["id"]
            assert now["funcUrl"] == f"http://127.0.0.1:{port}"
            assert [r["id"] for r in now["allRevisions"]] == [previous, temporary]
            # The platform now calls the Func of the agent `fixie serve` runs.
            assert "PEARS FROM FIXIE SERVE" in ask(live, user.key, agent_id,
                                                   "What is the secret word for pears?")
        finally:
            served.send_signal(signal.SIGINT)  # Ctrl-C, as its user stops it
            served.wait(timeout=60)
        printed = log.read_text()
        assert f"Now serving temporary revision {temporary}" in printed, printed
        assert f"Restored existing revision {previous}" in printed, printed

        after = revisions(live, user.key, agent_id)
        assert after["currentRevision"]["id"] == previous
        assert [r["id"] for r in after["allRevisions"]] == [previous]  # its own is gone
        assert after["funcUrl"] == first_url
        assert "PLUMS FROM THE FIRST REVISION" in ask(live, user.key, agent_id,
                                                      "What is the secret word for plums?")
