"""What a Func's embeds become (fetched and kept on S3, or refused out loud), what a
conversational agent remembers, and agents with no few-shots, through real sessions."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import httpx
import pytest

import codeshot.sdk as fixieai
from codeshot.devtools.agents import serve
from codeshot.llm.fewshot import NEEDS_LLM
from codeshot.local.poller import QueuePoller
from codeshot.models import Message, MessageType
from codeshot.runner.session_runner import PLANNER_ID, SessionMemory, SessionRunner
from tests.conftest import free_port
from tests.engine.conftest import ScriptedLLM
from tests.fixie.conftest import serving_pages
from tests.runner.conftest import register, send, session

PICTURE = b"\x89PNG\r\n\x1a\n pretend chart"

CHART_FEW_SHOTS = """
Q: Draw the chart at https://charts.example/c/1
Ask Func[chart]: https://charts.example/c/1
Func[chart] says: Here you go! #image1
A: Here you go! #image1
"""


@pytest.fixture
def picture_url() -> Iterator[str]:
    with serving_pages(lambda _path: ("image/png", PICTURE)) as url:
        yield url + "/chart.png"


def chart_agent() -> fixieai.CodeShotAgent:
    """chart's shape: the Func answers with a URL embed (or a data: one Fixie wrote)."""
    agent = fixieai.CodeShotAgent("I make charts.", CHART_FEW_SHOTS)

    @agent.register_func
    def chart(query: fixieai.Message) -> fixieai.Message:
        uri = "data:base64,aGk=" if query.text == "inline" else query.text  # as fixieai writes
        embed = fixieai.Embed(content_type="image/png", uri=uri)
        return fixieai.Message(text="Here you go! #image1", embeds={"image1": embed})

    return agent


REPLY_EMBEDS = """query ($h: String!) { sessionByHandle(handle: $h) { messages {
  type text embeds { key contentType contentHash size url } } } }"""


def answer_of(live, user, agent_id: str, text: str) -> dict:
    handle = session(live, user.key, agent_id)
    send(live, user.key, handle, text)
    out = live.gql(user.key, REPLY_EMBEDS, {"h": handle})["data"]["sessionByHandle"]["messages"]
    return out[-1]


def test_a_url_embed_is_fetched_and_kept_immutable(live, user, deploy, picture_url):
    answer = answer_of(live, user, deploy(chart_agent(), "chart"),
                       f"Draw the chart at {picture_url}")
    assert answer["type"] == "response" and "#image1" in answer["text"]
    [embed] = answer["embeds"]
    assert embed["key"] == "image1" and embed["contentType"] == "image/png"
    assert embed["contentHash"] == hashlib.sha256(PICTURE).hexdigest()
    assert httpx.get(embed["url"]).content == PICTURE  # our copy, not the agent's URL


def test_fixies_own_data_uri_embeds_are_kept(live, user, deploy):
    answer = answer_of(live, user, deploy(chart_agent(), "chart2"), "Draw the chart at inline")
    assert [(e["key"], e["size"]) for e in answer["embeds"]] == [("image1", 2)]


def test_a_url_the_platform_may_not_fetch_is_refused_out_loud(live, user, deploy):
    answer = answer_of(live, user, deploy(chart_agent(), "chart3"),
                       "Draw the chart at http://10.1.2.3/secret.png")
    assert answer["embeds"] == []
    assert "embed #image1 cannot be stored" in answer["text"]
    assert "not a public address" in answer["text"]


def test_a_func_whose_embed_cannot_be_fetched_is_not_called_again(live, user, deploy):
    calls: list[str] = []
    agent = fixieai.CodeShotAgent("I make charts.", CHART_FEW_SHOTS)

    @agent.register_func
    def chart(query: fixieai.Message) -> fixieai.Message:
        calls.append(query.text)  # a chart made (and billed) each time
        return fixieai.Message(text="Here you go! #image1", embeds={
            "image1": fixieai.Embed(content_type="image/png", uri=query.text)})

    answer = answer_of(live, user, deploy(agent, "chart5"),
                       f"Draw the chart at http://127.0.0.1:{free_port()}/gone.png")
    assert answer["embeds"] == [] and "embed #image1 cannot be stored" in answer["text"]
    assert len(calls) == 1, calls  # the Func ran; it was called twice more (retries)


@pytest.fixture
def scripted_runner(platform):
    """The platform with the runner answering from a scripted LLM (the test's model)."""
    llm = ScriptedLLM()
    runner = SessionRunner(platform.services, llm=llm)
    poller = QueuePoller(platform.services.queue, runner.handle)
    poller.start()
    yield platform, llm
    poller.stop()


@pytest.mark.parametrize("conversational", [True, False])
def test_a_conversational_agent_sees_its_earlier_turns(scripted_runner, conversational):
    live, llm = scripted_runner
    user_id, key = live.user()
    username = live.services.users.get(user_id).username
    agent = fixieai.CodeShotAgent("I play twenty questions.", [],
                                  conversational=conversational)
    with serve(agent, live.url, f"{username}/twenty") as url:
        register(live, key, "twenty", url)
        handle = session(live, key, f"{username}/twenty")
        llm.replies += ["A: Is it an animal?", "A: Is it bigger than a cat?"]
        send(live, key, handle, "Let's play! I thought of something.")
        assert send(live, key, handle, "Yes")["reply"]["text"] == "Is it bigger than a cat?"
    second = "\n".join(m.content for m in llm.calls[-1][0])
    remembered = "Q: Let's play! I thought of something.\nA: Is it an animal?"
    assert (remembered in second) is conversational
    assert "I play twenty questions." in llm.calls[-1][0][0].content  # a plain LLM agent


def test_a_zero_shot_agent_answers_honestly_without_a_language_model(live, user, deploy):
    agent_id = deploy(fixieai.CodeShotAgent("I tell jokes.", []), "jokes")
    reply = send(live, user.key, session(live, user.key, agent_id), "Tell me a joke")["reply"]
    assert reply == {"id": reply["id"], "text": NEEDS_LLM, "type": "response"}


def test_an_agent_called_by_the_planner_remembers_its_own_turns_only():
    def msg(n: int, kind: MessageType, text: str, reply_to: str, by: str = PLANNER_ID):
        return Message(session_id="s", message_id=f"m{n}", type=kind, text=text,
                       in_reply_to=reply_to, sent_by=by)

    recent = [
        Message(session_id="s", message_id="q1", text="Roll 2d6 and a joke"),
        msg(1, MessageType.AGENT_CALL, "Ask Agent[me/dice]: Roll 2d6", "q1"),
        msg(2, MessageType.FUNC_CALL, "Ask Func[roll]: 2d6", "q1", by="me/dice"),
        msg(3, MessageType.RESULT, "Agent[me/dice] says: 3 + 4 = 7", "q1"),
        msg(4, MessageType.AGENT_CALL, "Ask Agent[me/jokes]: a joke", "q1"),
        msg(5, MessageType.RESULT, "Agent[me/jokes] says: Knock knock.", "q1"),
        msg(6, MessageType.RESPONSE, "7, and: Knock knock.", "q1"),
    ]
    memory = SessionMemory(recent, PLANNER_ID)
    assert memory.turns_with("me/dice") == [("Roll 2d6", "3 + 4 = 7")]
    assert memory.turns_with("me/jokes") == [("a joke", "Knock knock.")]
    assert memory.turns_with(PLANNER_ID) == [("Roll 2d6 and a joke", "7, and: Knock knock.")]
