"""The real `fixie serve --no-tunnel` (fixieai 1.0.4, its own virtualenv) against the
platform: it serves the agent directory at agent.yaml's deployment_url, makes a revision
there current while it runs, and when stopped makes the previous one current again and
deletes its own."""

from __future__ import annotations

import signal
import subprocess
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import codeshot.sdk as fixieai
from codeshot.devtools.agents import serve
from tests.conftest import free_port
from tests.fixie.test_fixie_client_cli import fixie, fixie_env
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


@dataclass
class Registered:
    agent_id: str
    url: str  # where its first revision answers
    revision: str  # that revision's id


@pytest.fixture
def registered(live, user) -> Iterator[Registered]:
    """The user's agent `secret` registered the usual way (a URL: one revision)."""
    agent_id = f"{user.username}/secret"
    first = fixieai.CodeShotAgent("I tell the secret word of a thing.", FEW_SHOTS)

    @first.register_func
    def secret(query: fixieai.Message) -> str:
        return query.text.strip().upper() + " FROM THE FIRST REVISION"

    with serve(first, live.url, agent_id) as url:
        register(live, user.key, "secret", url, published=False)
        yield Registered(agent_id, url, revisions(live, user.key, agent_id)[
            "currentRevision"]["id"])


def agent_dir(directory: Path, deployment_url: str | None) -> None:
    """The agent as Fixie's CLI finds it: agent.yaml and the module it names."""
    (directory / "agent.yaml").write_text(
        "handle: secret\nname: Secret\ndescription: Tells secret words\n"
        "entry_point: main:agent\n"
        + (f"deployment_url: {deployment_url}\n" if deployment_url else ""))
    (directory / "main.py").write_text(SERVED.format(few_shots=FEW_SHOTS))


def refused(fixie_python: Path, live, user, directory: Path, *args: str) -> str:
    """`fixie *args` in the agent's ``directory`` fails, saying what to do instead; its
    stderr."""
    out = subprocess.run([str(fixie_python.with_name("fixie")), *args], cwd=directory,
                         env=fixie_env({"api_url": live.url, "api_key": user.key}, directory),
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode != 0
    assert "INVALID_INPUT" in out.stderr and "codeshot serve DIR --register" in out.stderr
    return out.stderr


# The query right after a switch goes to the new revision: a runner keeps an agent only
# until the registry changes.
def test_fixie_serve_no_tunnel_serves_a_revision_and_restores_the_previous(
        live, user, registered, fixie_python, tmp_path):
    agent_id, previous = registered.agent_id, registered.revision
    assert "PEARS FROM THE FIRST REVISION" in ask(live, user.key, agent_id,
                                                  "What is the secret word for pears?")
    port = free_port()
    agent_dir(tmp_path, f"http://127.0.0.1:{port}")
    log = tmp_path / "serve.log"
    env = fixie_env({"api_url": live.url, "api_key": user.key}, tmp_path)
    with log.open("w") as out:
        served = subprocess.Popen(
            [str(fixie_python.with_name("fixie")), "serve", "--no-tunnel",
             "--host", "127.0.0.1", "--port", str(port)],
            cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT)
    def revision_after(revision: str) -> dict:
        """The agent once `fixie serve` made another revision than ``revision`` current and
        deleted the one it replaced, if any."""
        deadline = time.monotonic() + 60
        while True:
            now = revisions(live, user.key, agent_id)
            if now["currentRevision"]["id"] != revision and len(now["allRevisions"]) == 2:
                return now
            assert served.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)

    try:
        now = revision_after(previous)
        temporary = now["currentRevision"]["id"]
        assert now["funcUrl"] == f"http://127.0.0.1:{port}"
        assert [r["id"] for r in now["allRevisions"]] == [previous, temporary]
        # The platform now calls the Func of the agent `fixie serve` runs.
        assert "PEARS FROM FIXIE SERVE" in ask(live, user.key, agent_id,
                                               "What is the secret word for pears?")
        # An edit restarts it (--reload, the default): a new revision at the same URL
        # replaces the one it made before.
        edited = (tmp_path / "main.py").read_text().replace('" FROM FIXIE SERVE"',
                                                            '" FROM THE EDITED AGENT"')
        (tmp_path / "main.py").write_text(edited)
        reloaded = revision_after(temporary)["currentRevision"]["id"]
        assert [r["id"] for r in revisions(live, user.key, agent_id)["allRevisions"]] == [
            previous, reloaded]
        assert "FIGS FROM THE EDITED AGENT" in ask(live, user.key, agent_id,
                                                   "What is the secret word for figs?")
    finally:
        served.send_signal(signal.SIGINT)  # Ctrl-C, as its user stops it
        served.wait(timeout=60)
    printed = log.read_text()
    assert f"Now serving temporary revision {temporary}" in printed, printed
    assert f"Now serving temporary revision {reloaded}" in printed, printed
    assert f"Restored existing revision {previous}" in printed, printed

    after = revisions(live, user.key, agent_id)
    assert after["currentRevision"]["id"] == previous
    assert [r["id"] for r in after["allRevisions"]] == [previous]  # its own is gone
    assert after["funcUrl"] == registered.url
    assert "PLUMS FROM THE FIRST REVISION" in ask(live, user.key, agent_id,
                                                  "What is the secret word for plums?")


def test_fixie_deploy_of_code_is_refused_and_changes_nothing(live, user, registered,
                                                             fixie_python, tmp_path):
    agent_dir(tmp_path, None)  # no deployment_url: fixie uploads the code (multipart)
    before = revisions(live, user.key, registered.agent_id)
    refused(fixie_python, live, user, tmp_path, "deploy", "--no-validate")
    assert revisions(live, user.key, registered.agent_id) == before


def test_fixie_deploy_with_a_deployment_url_makes_a_revision_there_current(
        live, user, registered, fixie_python, tmp_path):
    agent_dir(tmp_path, registered.url)  # served elsewhere: here, where the first one is
    fixie(fixie_python, fixie_env({"api_url": live.url, "api_key": user.key}, tmp_path),
          "deploy", "--no-validate", str(tmp_path))
    now = revisions(live, user.key, registered.agent_id)
    assert now["currentRevision"]["id"] != registered.revision
    assert [r["id"] for r in now["allRevisions"]] == [registered.revision,
                                                      now["currentRevision"]["id"]]


def test_fixie_serve_of_an_unregistered_agent_says_to_register_it_first(
        live, user, fixie_python, tmp_path):
    agent_dir(tmp_path, f"http://127.0.0.1:{free_port()}")
    said = refused(fixie_python, live, user, tmp_path, "serve", "--no-tunnel", "--host",
                   "127.0.0.1", "--port", str(free_port()))
    # It began "`fixie deploy` uploads code ...", which the user never ran.
    assert "an agent is registered where it answers: createAgent without a URL (what " \
        "`fixie deploy` and `fixie serve` send for a new agent)" in said, said
    assert live.gql(user.key, REVISIONS, {"id": f"{user.username}/secret"})["data"] == {
        "agentById": None}
