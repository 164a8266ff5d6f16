"""The platform's own Funcs, asked by agents written as Fixie's examples are: the user's
local time (fixie_local_datetime) and answers from a session embed (fixie_query_embed,
text and PDF), through real sessions (offline fewshot provider)."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import codeshot.sdk as fixieai
from codeshot.models import Embed
from codeshot.runner.session_runner import PROMPT_EMBEDS
from tests.pdfs import pdf_of
from tests.runner.conftest import messages, session

CLOCK_FEW_SHOTS = """
Q: What time is it?
Ask Func[fixie_local_datetime]: now
Func[fixie_local_datetime] says: Friday June 24 2022 01:55 PM UTC-08:00
A: It is Friday June 24 2022 01:55 PM UTC-08:00.
"""

READER_FEW_SHOTS = """
Q: When is the launch? #doc1
Ask Func[fixie_query_embed]: When is the launch? #doc1
Func[fixie_query_embed] says: The launch is on June 2.
A: The launch is on June 2.
"""

SEND_WITH_EMBEDS = """mutation ($s: String!, $t: String!, $e: [EmbedInput!]) {
  sendSessionMessage(messageData: {session: $s, text: $t, embeds: $e}) {
    reply { text type } } }"""


def clock_agent() -> fixieai.CodeShotAgent:
    return fixieai.CodeShotAgent("I tell the time where you are.", CLOCK_FEW_SHOTS)


def ask(live, user, agent_id: str, text: str,
        embeds: dict[str, tuple[str, bytes]] | None = None):
    uploads = [{"key": k, "contentType": t, "content": base64.b64encode(b).decode()}
               for k, (t, b) in (embeds or {}).items()] or None
    handle = session(live, user.key, agent_id)
    out = live.gql(user.key, SEND_WITH_EMBEDS, {"s": handle, "t": text, "e": uploads},
                   timeout=60)
    assert "errors" not in out, out
    return out["data"]["sendSessionMessage"]["reply"], messages(live, user.key, handle)


def test_local_datetime_is_in_the_users_time_zone(live, user, deploy):
    agent_id = deploy(clock_agent(), "clock")
    reply, _ = ask(live, user, agent_id, "What time is it?")
    assert "UTC+00:00" in reply["text"]  # no setting: UTC

    out = live.gql(user.key, 'mutation { setTimeZone(timeZone: "Asia/Kolkata") { timeZone } }')
    assert out["data"]["setTimeZone"]["timeZone"] == "Asia/Kolkata"
    before = datetime.now(UTC)
    reply, trace = ask(live, user, agent_id, "What time is it?")
    said = next(m["text"] for m in trace if m["text"].startswith("Func[fixie_local_datetime]"))
    stamp = said.removeprefix("Func[fixie_local_datetime] says: ")
    local = datetime.strptime(stamp.removesuffix(" UTC+05:30"), "%A %B %d %Y %I:%M %p")
    local = local.replace(tzinfo=ZoneInfo("Asia/Kolkata"))
    assert stamp.endswith(" UTC+05:30")
    assert before - timedelta(minutes=1) <= local <= datetime.now(UTC)
    assert stamp in reply["text"]


def test_a_bad_time_zone_is_refused_and_changes_nothing(live, user):
    out = live.gql(user.key, 'mutation { setTimeZone(timeZone: "Mars/Olympus") { timeZone } }')
    assert out["errors"][0]["extensions"]["code"] == "INVALID_INPUT"
    assert "Mars/Olympus" in out["errors"][0]["message"]
    assert live.gql(user.key, "{ user { timeZone } }")["data"]["user"]["timeZone"] == "UTC"


def test_an_agents_own_func_of_the_same_name_wins(live, user, deploy):
    agent = clock_agent()

    @agent.register_func
    def fixie_local_datetime(query: fixieai.Message) -> str:
        return "Teatime on Discworld"

    reply, _ = ask(live, user, deploy(agent, "discclock"), "What time is it?")
    assert "Teatime on Discworld" in reply["text"]


def test_query_embed_answers_from_a_text_or_pdf_embed(live, user, deploy):
    agent_id = deploy(fixieai.CodeShotAgent(
        "I answer questions about the document you upload.", READER_FEW_SHOTS,
        conversational=True), "reader")
    notes = (b"Project notes.\n\nThe launch is on May 5 at the harbour.\n\n"
             b"The budget is twelve thousand euros.\n")
    reply, trace = ask(live, user, agent_id, "When is the launch? #doc1",
                       {"doc1": ("text/plain", notes)})
    assert "Ask Func[fixie_query_embed]: When is the launch? #doc1" in [m["text"] for m in trace]
    assert "May 5 at the harbour" in reply["text"]

    pdf = pdf_of("The launch is on October 9 in Lisbon.")
    reply, _ = ask(live, user, agent_id, "When is the launch? #doc1",
                   {"doc1": ("application/pdf", pdf)})
    assert "October 9 in Lisbon" in reply["text"]


def test_query_embed_reads_an_embed_older_than_those_a_query_reads(live, user, deploy):
    """A query reads the newest embeds (those its prompt lists); an older one named by key
    is read by key, as before."""
    agent_id = deploy(fixieai.CodeShotAgent("I read documents.", READER_FEW_SHOTS), "reader3")
    handle = session(live, user.key, agent_id)
    embeds, first = live.services.embeds, datetime.now(UTC) - timedelta(hours=1)
    notes = embeds.put(b"Project notes.\n\nThe launch is on May 5 at the harbour.\n",
                       "text/plain")
    other = embeds.put(b"Nothing about it.", "text/plain")
    for n, (key, digest) in enumerate([("doc1", notes)] + [
            (f"other{n}", other) for n in range(PROMPT_EMBEDS + 10)]):
        assert live.services.sessions.bind_embed(Embed(
            key=key, session_id=handle, owner=user.user_id, content_type="text/plain",
            content_hash=digest, size=1, created=first + timedelta(seconds=n)))
    out = live.gql(user.key, SEND_WITH_EMBEDS, {"s": handle, "t": "When is the launch? #doc1",
                                                "e": None}, timeout=60)
    reply = out["data"]["sendSessionMessage"]["reply"]
    assert "May 5 at the harbour" in reply["text"], reply


def test_query_embed_without_such_an_embed_says_so(live, user, deploy):
    agent_id = deploy(fixieai.CodeShotAgent("I read documents.", READER_FEW_SHOTS), "reader2")
    reply, _ = ask(live, user, agent_id, "When is the launch? #doc1")
    assert "there is no embed #doc1 in this session" in reply["text"]


def test_query_corpus_without_a_declared_corpus_says_so(live, user, deploy):
    """(Agents with corpora: tests/fixie/test_corpora.py.)"""
    agent_id = deploy(fixieai.CodeShotAgent(
        "I answer from the manual.",
        "Q: How do I start?\nAsk Func[fixie_query_corpus]: How do I start?\n"
        "Func[fixie_query_corpus] says: Run the installer.\nA: Run the installer."), "manual")
    reply, _ = ask(live, user, agent_id, "How do I start?")
    assert "this agent declares no document corpus to search" in reply["text"]
