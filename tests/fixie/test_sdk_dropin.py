"""``import codeshot.sdk as fixieai`` is a drop-in for fixieai 1.0.4's agent side: every
public name with the same arguments (read from the real fixieai, in its own virtualenv),
and the names whose platform behaviour comes later (corpora, OAuth) load, declare
themselves in the handshake and fail with a clear error when used."""

from __future__ import annotations

import inspect
import json
import subprocess
import urllib.parse

import httpx
import pytest

import codeshot.sdk as fixieai
from codeshot.devtools.agents import serve
from codeshot.models import Agent
from codeshot.runner.handshake import fetch_handshake
from codeshot.sdk.funcs import make_func
from tests.oauth_provider import continue_from_page

# Runs inside fixieai 1.0.4's virtualenv: each public agent-side name's parameters.
SIGNATURES = r'''
import inspect, json
import fixieai.agents
from fixieai.agents import agent_base, api, corpora, oauth

def params(obj):
    if inspect.isclass(obj):  # __init__: @deprecated gives DocumentLoader a bare __new__
        obj = obj.__init__
    simple = (str, int, float, bool, type(None))
    return [[p.name, p.kind.name,
             None if p.default is p.empty else
             repr(p.default) if isinstance(p.default, simple) else "<object>"]
            for p in inspect.signature(obj).parameters.values() if p.name != "self"]

names = {n: getattr(fixieai.agents, n) for n in fixieai.agents.__all__ if n != "AgentBase"}
names |= {"AgentError": api.AgentError, "DocumentLoader": corpora.DocumentLoader}
out = {n: params(o) for n, o in names.items()}
for m in ("register_func", "register_corpus_func", "serve"):
    out["AgentBase." + m] = params(getattr(agent_base.AgentBase, m))
out["OAuthParams.from_client_secrets_file"] = params(oauth.OAuthParams.from_client_secrets_file)
for m in ("get_authorization_url", "user_token", "authorize"):
    out["OAuthHandler." + m] = params(getattr(oauth.OAuthHandler, m))
print(json.dumps({"top": sorted(set(fixieai.__all__)), "agents": fixieai.agents.__all__,
                  "signatures": out}))
'''
# Deliberate differences: codeshot serves on loopback unless told otherwise, and reads the
# platform's URL when storage is used rather than once at import (same value).
DEFAULTS_OURS = {("AgentBase.serve", "host"), ("UserStorage", "userstorage_url")}


@pytest.fixture(scope="module")
def fixie_names(fixie_python) -> dict:
    out = subprocess.run([str(fixie_python), "-c", SIGNATURES], capture_output=True,
                         text=True, timeout=120, check=True,
                         env={"FIXIE_API_URL": "http://127.0.0.1:9", "PATH": "/usr/bin"})
    return json.loads(out.stdout)


def ours(name: str) -> list[list]:
    owner, _, method = name.partition(".")
    obj = getattr(fixieai, owner)
    if method:
        obj = getattr(obj, method)
    simple = (str, int, float, bool, type(None))
    return [[p.name, p.kind.name,
             None if p.default is p.empty else
             repr(p.default) if isinstance(p.default, simple) else "<object>"]
            for p in inspect.signature(obj).parameters.values() if p.name != "self"]


def test_every_public_agent_name_of_fixieai_is_here(fixie_names):
    client_side = {"FixieClient", "FixieEnvironment", "get_agents", "get_client", "get_embeds",
                   "query"}  # the client (issue 23), not the agent side
    for name in set(fixie_names["top"]) - client_side:
        assert hasattr(fixieai, name), name
    for name in fixie_names["agents"]:
        assert hasattr(fixieai.agents, name), f"fixieai.agents.{name}"
    assert fixieai.agents.Message is fixieai.Message  # fixieai.agents.Message, as summarizer
    assert {"AgentError", "DocumentLoader"} <= set(fixieai.__all__)


def test_every_argument_matches_in_name_order_and_default(fixie_names):
    for name, theirs in fixie_names["signatures"].items():
        mine = ours(name)
        assert [p[:2] for p in mine[:len(theirs)]] == [p[:2] for p in theirs], name
        for (arg, _, default), (_, _, our_default) in zip(theirs, mine):
            if default is not None and (name, arg) not in DEFAULTS_OURS:
                assert our_default is not None, f"{name}({arg}) needs a default"
                if default != "<object>":
                    assert our_default == default, f"{name}({arg}): {our_default} != {default}"
        for extra in mine[len(theirs):]:
            assert extra[2] is not None, f"{name}: our extra argument {extra[0]} needs a default"


# An agent written as fixie-examples' agents are, using every declaration 1.0.4 offers.
def fixie_style_agent(tmp_path) -> fixieai.CodeShotAgent:
    secrets = tmp_path / "client_secrets.json"
    secrets.write_text(json.dumps({"web": {
        "client_id": "cid", "client_secret": "shh", "auth_uri": "https://auth.example/o",
        "token_uri": "https://auth.example/t"}}))
    with pytest.warns(DeprecationWarning, match="DocumentLoader does nothing"):
        loader = fixieai.DocumentLoader("html")
    agent = fixieai.CodeShotAgent(
        "I keep a reading list and know the manual.",
        """
        Q: What is on my list?
        Ask Func[reading_list]: all
        Func[reading_list] says: Dune
        A: Your list has Dune.
        """,
        [fixieai.DocumentCorpus(urls=["https://docs.example/*"], loader=loader)],
        conversational=True,
        oauth_params=fixieai.OAuthParams.from_client_secrets_file(secrets, ["books.read"]),
        llm_settings=fixieai.LlmSettings(temperature=0.7, maximum_tokens=300),
    )

    @agent.register_func
    def reading_list(query: fixieai.agents.Message, oauth_handler: fixieai.OAuthHandler) -> str:
        return oauth_handler.user_token() or oauth_handler.get_authorization_url()

    @agent.register_corpus_func
    def manual(request: fixieai.CorpusRequest) -> fixieai.CorpusResponse:
        return fixieai.CorpusResponse(page=fixieai.CorpusPage(
            documents=[fixieai.CorpusDocument("intro", b"hello")]))

    return agent


def test_declarations_reach_the_platform_in_the_handshake(platform, tmp_path):
    agent = fixie_style_agent(tmp_path)
    with serve(agent, platform.url, "acme/reader") as url:
        token = platform.services.auth.agent_token("acme/reader", None, None)
        handshake = fetch_handshake(url, token, allow_loopback=True)
        yaml_body = httpx.get(url + "/", headers={"Authorization": f"Bearer {token}",
                                                  "Accept": "application/yaml"}).text
    assert handshake.conversational is True
    assert handshake.llm_settings() == {"model": None, "temperature": 0.7,
                                        "maximum_tokens": 300}
    assert handshake.corpora == [
        {"urls": ["https://docs.example/*"], "exclude_patterns": None, "auth_token_func": None,
         "loader": {"name": "html"}},
        {"func_name": "manual"}]
    assert "response_model:" in yaml_body and "temperature: 0.7" in yaml_body  # Fixie's YAML
    assert {f.name for f in handshake.funcs or []} == {"reading_list", "_oauth"}


def test_a_fixie_oauth_func_gets_the_platforms_authorization_url(platform, tmp_path):
    # fixie-examples' pattern: `user_token() or get_authorization_url()`, for a user who
    # has not authorized the agent yet (tests/protocols/test_oauth.py runs the whole flow).
    user_id, _ = platform.user()
    with serve(fixie_style_agent(tmp_path), platform.url, "acme/reader") as url:
        platform.services.registry.create(Agent(agent_id="acme/reader", owner="acme",
                                                handle="reader", func_url=url))
        token = platform.services.auth.agent_token("acme/reader", user_id, "s_1")
        reply = httpx.post(f"{url}/reading_list", headers={"Authorization": f"Bearer {token}"},
                           json={"message": {"text": "all"}, "access_token": token}, timeout=10)
    assert reply.status_code == 200, reply.text
    # The platform's link, which sends the user's browser on to the provider.
    with httpx.Client(timeout=10) as browser:
        opened = continue_from_page(browser, reply.json()["message"]["text"])
    assert opened.status_code == 303, opened.text
    link = urllib.parse.urlsplit(opened.headers["Location"])
    query = dict(urllib.parse.parse_qsl(link.query))
    assert f"{link.scheme}://{link.netloc}{link.path}" == "https://auth.example/o"
    assert query["client_id"] == "cid" and query["scope"] == "books.read"
    assert query["redirect_uri"] == platform.url + "/api/oauth/callback"
    assert query["code_challenge_method"] == "S256" and "shh" not in reply.text
    browser = opened.cookies["codeshot_oauth"]
    assert platform.services.oauth.take_flow(query["state"], browser).user_id == user_id


def test_an_oauth_handler_needs_oauth_params_as_in_fixie():
    agent = fixieai.CodeShotAgent("I test.", [])

    def events(query, oauth_handler) -> str: ...

    with pytest.raises(TypeError, match="needs oauth_params"):
        agent.register_func(events)


def test_parameters_are_given_as_fixieai_gives_them():
    query = fixieai.AgentQuery(fixieai.Message("hi"))
    claims = fixieai.Claims("acme/a", None, None, "t")

    def lone(x):  # a lone untyped first parameter: the Message (register_func in 1.0.4)
        assert isinstance(x, fixieai.Message)
        return x.text.upper()

    def typed(text: str) -> str:
        return text + "!"

    def nothing() -> str:  # gcalendar's workhours()
        return "09:00 AM to 05:00 PM"

    assert [next(make_func(f, "f")(query, claims, "http://p")).message.text
            for f in (lone, typed, nothing)] == ["HI", "hi!", "09:00 AM to 05:00 PM"]


def test_embed_content_written_by_fixieai_reads_back():
    # fixieai 1.0.4 writes "data:base64,..." (no media type) when a Func sets .content
    embed = fixieai.Embed("text/plain", "data:base64,aGVsbG8=")
    assert embed.text == "hello"
    embed.content = b"bye"
    assert fixieai.Embed("text/plain", embed.uri).text == "bye"


def test_zero_few_shots_make_a_plain_llm_agent():
    agent = fixieai.CodeShotAgent("I play twenty questions.", [], conversational=True,
                                  llm_settings=fixieai.LlmSettings(temperature=1.0))
    assert agent.metadata()["few_shots"] == []
    with pytest.raises(ValueError, match="less than or equal to 2"):
        fixieai.LlmSettings(temperature=3)
