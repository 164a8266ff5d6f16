"""An agent written against the real Fixie 1.0 SDK (``fixieai==1.0.4``, in its own
virtualenv: it pins FastAPI 0.89 and pydantic 1) talks to our platform unchanged."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator

import httpx
import pytest

from codeshot.errors import AgentFailed
from codeshot.runner.handshake import fetch_handshake
from codeshot.store.user_storage import Holder
from tests.conftest import free_port

AGENT_ID = "acme/fixie-genrand"

AGENT = '''
import sys
from fixieai import CodeShotAgent, Message, UserStorage

agent = CodeShotAgent(
    "I generate random numbers.",
    ["Q: Generate a random number between 0 and 100.\\nAsk Func[genrand]: 0, 100\\n"
     "Func[genrand] says: 42\\nA: The random number is 42."],
)

@agent.register_func
def genrand(query: Message) -> str:
    low, high = (int(x) for x in query.text.split(","))
    return str((low + high) // 2)

@agent.register_func
def remember(query: Message, user_storage: UserStorage) -> str:
    user_storage["last"] = {"text": query.text, "raw": query.text.encode()}
    return f"{user_storage['last']['raw']!r} of {list(user_storage)}"

agent.serve(host="127.0.0.1", port=int(sys.argv[1]))
'''


@pytest.fixture
def fixie_agent(platform, fixie_python, tmp_path) -> Iterator[str]:
    script = tmp_path / "fixie_agent.py"
    script.write_text(AGENT)
    port = free_port()
    env = {**os.environ, "FIXIE_API_URL": platform.url, "FIXIE_ALLOWED_AGENT_ID": AGENT_ID}
    process = subprocess.Popen([str(fixie_python), str(script), str(port)], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(url + "/", timeout=1)
                break
            except httpx.TransportError:
                if process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"the Fixie agent did not start: {process.stderr.read()}")
                time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


def call(platform, url: str, func: str, text: str, agent_id: str = AGENT_ID,
         user_id: str | None = None) -> httpx.Response:
    token = platform.services.auth.agent_token(agent_id, user_id, "s_1")
    return httpx.post(f"{url}/{func}", headers={"Authorization": f"Bearer {token}"},
                      json={"message": {"text": text, "embeds": {}}, "access_token": token},
                      timeout=10)


def test_fixie_agent_accepts_our_tokens_and_answers(platform, fixie_agent):
    token = platform.services.auth.agent_token(AGENT_ID, None, None)
    handshake = fetch_handshake(fixie_agent, token, allow_loopback=True)  # YAML, as the Fixie SDK answers
    assert handshake.type == "code_shot"
    assert handshake.base_prompt == "I generate random numbers."
    assert handshake.few_shots[0].startswith("Q: Generate a random number")

    reply = call(platform, fixie_agent, "genrand", "0, 100")
    assert reply.status_code == 200, reply.text
    assert reply.json() == {"message": {"text": "50", "embeds": {}}, "error": None}

    assert call(platform, fixie_agent, "genrand", "1, 2", agent_id="acme/other").status_code == 403


def test_fixie_agent_uses_our_user_storage(platform, fixie_agent):
    user_id, _ = platform.user()
    reply = call(platform, fixie_agent, "remember", "hi", user_id=user_id)
    assert reply.status_code == 200, reply.text
    assert reply.json()["message"]["text"] == "b'hi' of ['last']"
    assert platform.services.storage.get(Holder(user_id, AGENT_ID, 0), "last") == (
        '{"text": "hi", "raw": {"type": "_bytes_ascii", "data": "aGk="}}')


@pytest.mark.settings(fixie_audiences=False)
def test_without_fixie_audiences_a_fixie_agent_refuses_our_tokens(platform, fixie_agent):
    token = platform.services.auth.agent_token(AGENT_ID, None, None)
    with pytest.raises(AgentFailed, match="answered HTTP 500"):
        fetch_handshake(fixie_agent, token, allow_loopback=True)
    assert call(platform, fixie_agent, "genrand", "0, 100").status_code == 500
