"""The SDK's rules without HTTP: parameter binding, few-shot checks, embeds, Accept."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from codeshot.engine.fewshot import FewShotError
from codeshot.errors import InvalidInput
from codeshot.models import MAX_INT
from codeshot.sdk import AgentQuery, CodeShotAgent, Embed, LlmSettings, Message, UserStorage
from codeshot.sdk.app import prefers_yaml
from codeshot.sdk.auth import Claims
from codeshot.sdk.funcs import make_func
from codeshot.sdk.user_storage import from_json_type, to_json_type

QUERY = AgentQuery(Message("7, 8"))
CLAIMS = Claims("acme/a", None, None, "t")


def first_text(fn) -> str:
    return next(make_func(fn, "f")(QUERY, CLAIMS, "http://p")).message.text


@pytest.mark.parametrize("fn", [
    lambda query: query.text,  # by name: a Message
    lambda message: message.text,
    lambda x: x,  # a lone untyped first parameter: the text (as in fixieai)
])
def test_fixie_style_parameters_get_the_message(fn):
    assert first_text(fn) == "7, 8"


def test_typed_parameters_are_parsed_from_the_text():
    def add(a: int, b: float) -> float:
        return a + b

    def whole(q: AgentQuery) -> str:
        return q.message.text.upper()

    assert first_text(add) == "15.0"
    assert first_text(whole) == "7, 8"
    assert make_func(add, "add").parameters["required"] == ["a", "b"]


def test_a_func_returning_bytes_answers_their_text_or_says_they_are_not_text():
    """It answered the literal b'12'."""
    from codeshot.sdk.wire import AgentException

    def digits(query: Message) -> bytes:
        return b"12"

    def binary(query: Message) -> bytes:
        return b"\x89PNG\r\n"

    assert first_text(digits) == "12"
    with pytest.raises(AgentException) as raised:
        first_text(binary)
    assert (raised.value.error_code, raised.value.response_message) == (
        "AGENT_ERROR", "the Func returned 6 bytes that are not UTF-8 text: return text, or the "
        "bytes as an Embed (Embed.content)")


def test_user_storage_is_injected_by_name_or_type():
    def by_type(store: UserStorage, query: str) -> str: ...
    def by_name(user_storage, query: str) -> str: ...

    assert set(make_func(by_type, "f").injected) == {"store", "query"}
    assert set(make_func(by_name, "f").injected) == {"user_storage", "query"}


async def _async_generator(query: str):
    yield query


def _hidden_hint(when: Unknown) -> str:  # noqa: F821  (imported for type checkers only)
    return str(when)


@pytest.mark.parametrize(("fn", "error"), [
    (lambda *args: None, "cannot take \\*args"),
    (lambda query, n=1: None, "cannot also take typed arguments \\['n'\\]"),
    (_async_generator, "is an async generator: stream replies by yielding from a plain def"),
    # A name imported under TYPE_CHECKING: a bare NameError from typing's insides.
    (_hidden_hint, "the type hint 'Unknown' cannot be resolved; import it"),
])
def test_funcs_it_cannot_call_are_refused_at_registration(fn, error):
    with pytest.raises(TypeError, match=error):
        make_func(fn, "f")


@pytest.mark.parametrize(("base_prompt", "few_shots", "error"), [
    ("I help.", None, "few_shots must be a str or a list of str, got NoneType"),
    ("I help.", [1], "few_shots must be a str or a list of str, got list"),
    (None, "Q: x\nA: y", "base_prompt must be a str, got NoneType"),
])
def test_an_agent_made_with_the_wrong_types_says_which(base_prompt, few_shots, error):
    """'NoneType' object is not iterable, or 'int' object has no attribute 'strip'."""
    with pytest.raises(TypeError, match=error):
        CodeShotAgent(base_prompt, few_shots)


def test_few_shots_are_checked_at_construction_with_line_numbers():
    with pytest.raises(FewShotError, match='few-shot 2, line 3: expected "Func\\[b\\] says:"'):
        CodeShotAgent("I test.", "Q: x\nA: y\n\nQ: z\nAsk Func[b]: 1\nA: w")
    with pytest.raises(FewShotError, match="base prompt must not be empty"):
        CodeShotAgent("  \n ", "Q: x\nA: y")


@pytest.mark.parametrize(("base_prompt", "few_shots", "error"), [
    ("I help. " * 1300, "Q: x\nA: y", "basePrompt is 10399 characters; the limit is 10000"),
    ("I help.", ["Q: x\nA: y"] * 51, "51 few-shots; an agent has at most 50"),
    ("I help.", "Q: x\nA: " + "y" * 4000, "few-shot 1 is 4008 characters; the limit is 4000"),
])
def test_prompts_over_the_platforms_caps_are_refused_when_the_agent_is_made(
        base_prompt, few_shots, error):
    """They were refused only when the agent was registered, after it was written and
    served."""
    with pytest.raises(InvalidInput, match=error):
        CodeShotAgent(base_prompt, few_shots)


def test_prompts_in_indented_strings_are_stripped_as_fixie_does():
    agent = CodeShotAgent("""
        I test.
    """, """
        Q: x
        A: y
    """)
    assert agent.base_prompt == "I test." and agent.few_shots == ["Q: x\nA: y"]


def test_the_app_refuses_few_shots_asking_unregistered_funcs():
    agent = CodeShotAgent("I test.", ["Q: x\nAsk Func[missing]: 1\nFunc[missing] says: 2\nA: 2"])
    with pytest.raises(FewShotError, match=r"^few-shot 1, line 2: the few-shots ask "
                       r"Func\[missing\], which no @agent\.register_func defines; defined: none$"):
        agent.app()


SPLITTER = """
Q: Split 90 dollars 3 ways
Ask Func[split]: {split}
Func[split] says: 30
A: 30 each

Q: What is 2+2?
Ask Func[{calc}]: 2+2
Func[{calc}] says: 4
A: 4
"""


@pytest.mark.parametrize(("split", "calc", "says"), [
    # A mistyped platform Func passed as one (every fixie_* name did).
    ("90, 3", "fixie_cacl", "few-shot 2, line 2: the few-shots ask Func[fixie_cacl], which no "
     "@agent.register_func defines (did you mean Func[fixie_calc]?); defined: split, tip"),
    # An example its own Func cannot read: the model, copying it, failed every query.
    ("ninety dollars for 3", "fixie_calc", "few-shot 1, line 2: split expects (amount, "
     "people), got 'ninety dollars for 3', so Func[split]'s typed parameters cannot read "
     "this example's arguments"),
    ("ninety, 3", "fixie_calc", "few-shot 1, line 2: argument amount must be number, got "
     "'ninety', so Func[split]'s typed parameters cannot read this example's arguments"),
])
def test_few_shots_a_func_cannot_answer_are_refused_when_the_agent_is_built(split, calc, says):
    agent = CodeShotAgent("I split bills.", SPLITTER.format(split=split, calc=calc))

    @agent.register_func
    def split(amount: float, people: int) -> float:
        return amount / people

    @agent.register_func
    def tip(percent: float, amount: float) -> float:
        return percent * amount / 100

    with pytest.raises(FewShotError) as raised:
        agent.validate()
    assert raised.value.message == says


def test_few_shots_its_funcs_read_and_the_platforms_funcs_are_accepted():
    agent = CodeShotAgent("I split bills.", SPLITTER.format(split='{"amount": 90, "people": 3}',
                                                            calc="fixie_calc"))
    agent.register_func(lambda amount, people: "30", func_name="split")
    agent.validate()


def test_register_func_keeps_the_function_and_refuses_duplicates():
    agent = CodeShotAgent("I test.", "Q: x\nA: y")

    @agent.register_func(func_name="other")
    def f(query):
        return "ok"

    assert f(None) == "ok" and list(agent.funcs) == ["other"]
    with pytest.raises(ValueError, match="already registered"):
        agent.register_func(f, func_name="other")
    with pytest.raises(ValueError, match="letters, digits"):
        agent.register_func(f, func_name="bad-name")


def test_embed_content_from_a_data_uri_both_ways():
    embed = Embed("text/plain", "data:text/plain,caf%C3%A9")
    assert embed.text == "café"
    embed.content = b"\x00\x01"
    assert embed.uri == "data:text/plain;base64,AAE=" and embed.content == b"\x00\x01"


def test_embed_content_from_a_signed_url(platform):
    # any reachable URL will do; the platform's JWKS is one
    assert b'"keys"' in Embed("application/json", platform.url + "/.well-known/jwks.json").content


@pytest.mark.parametrize(("accept", "yaml"), [
    (None, False), ("*/*", False), ("application/yaml", True),
    ("application/json, application/yaml;q=0.9", False), ("application/json;q=0.5, text/yaml", True),
])
def test_yaml_only_when_ranked_above_json(accept, yaml):
    assert prefers_yaml(accept) is yaml


def test_bytes_round_trip_in_storage_values():
    value = {"a": [b"\xff", 1, None], "b": {"type": "x", "data": "y"}}
    encoded = to_json_type(value)
    assert encoded["a"][0] == {"type": "_bytes_ascii", "data": "/w=="}
    assert from_json_type(encoded) == value


@pytest.fixture
def agent_dirs(tmp_path, monkeypatch):
    """A fresh loader state, and sys.path and sys.modules as they were afterwards."""
    import sys

    from codeshot.sdk import project

    monkeypatch.setattr(project, "_ROOTS", set())
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        del sys.modules[name]


def write_agent(directory, yaml_text: str, agent_py: str = "") -> None:
    directory.mkdir()
    (directory / "agent.yaml").write_text(yaml_text)
    (directory / "agent.py").write_text(agent_py)


def test_each_agent_directory_gets_its_own_helper_modules(agent_dirs):
    from codeshot.sdk.project import load_agent, read_config

    answers = {}
    for name in ("one", "two"):
        directory = agent_dirs / name
        write_agent(directory, f"handle: {name}\n",
                    "import codeshot.sdk as fixieai\nimport helpers\nfrom pkg import who\n"
                    "agent = fixieai.StandaloneAgent(lambda query: helpers.WHO + who.WHO)\n")
        (directory / "helpers.py").write_text(f"WHO = {name!r}\n")
        (directory / "pkg").mkdir()
        (directory / "pkg" / "__init__.py").write_text("")
        (directory / "pkg" / "who.py").write_text(f"WHO = '/{name}'\n")
        agent = load_agent(directory, read_config(directory))
        answers[name] = next(agent.query_func(QUERY, CLAIMS, "http://p")).message.text
    assert answers == {"one": "one/one", "two": "two/two"}


@pytest.mark.parametrize("line", ['public: "false"', "public: 'no'", 'published: "False"',
                                  "public: 0", "published: [true]"])
def test_public_is_only_yaml_true_or_false(agent_dirs, line):
    from codeshot.errors import InvalidInput
    from codeshot.sdk.project import read_config

    write_agent(agent_dirs / "a", f"handle: a\n{line}\n")
    with pytest.raises(InvalidInput, match="must be true or false"):
        read_config(agent_dirs / "a")


@pytest.mark.parametrize(("lines", "published"), [
    ("", False), ("public: false", False), ("public: true", True), ("published: true", True),
    ("public: no\npublished: yes", True), ("public: null", False)])
def test_public_and_published_read_as_yaml_booleans(agent_dirs, lines, published):
    from codeshot.sdk.project import read_config

    write_agent(agent_dirs / "a", f"handle: a\n{lines}\n")
    assert read_config(agent_dirs / "a").published is published


def test_an_agent_yaml_that_is_not_utf8_or_not_a_file_is_invalid_input(agent_dirs):
    from codeshot.errors import InvalidInput
    from codeshot.sdk.project import read_config

    write_agent(agent_dirs / "latin1", "")
    (agent_dirs / "latin1" / "agent.yaml").write_bytes("handle: café\n".encode("latin-1"))
    with pytest.raises(InvalidInput, match="is not UTF-8 text"):
        read_config(agent_dirs / "latin1")
    (agent_dirs / "dir").mkdir()
    (agent_dirs / "dir" / "agent.yaml").mkdir()
    with pytest.raises(InvalidInput, match="is a directory"):
        read_config(agent_dirs / "dir")


def test_llm_settings_ask_no_more_tokens_than_the_platform_takes():
    """The platform refuses a handshake asking more than GraphQL's Int: the author hears
    it when the agent is made, not when it is registered."""
    assert LlmSettings(maximum_tokens=MAX_INT).to_wire()["maximum_tokens"] == MAX_INT
    with pytest.raises(ValidationError, match="maximum_tokens"):
        LlmSettings(maximum_tokens=MAX_INT + 1)


def test_funcs_the_platform_would_refuse_are_refused_when_registered():
    """A Func name over 128 characters, or a 101st Func, failed only at registration."""
    agent = CodeShotAgent("I help.", "Q: x\nA: y")
    with pytest.raises(ValueError, match="Func names are 1-128 letters"):
        agent.register_func(lambda query: "", func_name="f" * 129)
    for n in range(100):
        agent.register_func(lambda query: "", func_name=f"f{n}")
    with pytest.raises(ValueError, match="an agent has at most 100 Funcs"):
        agent.register_func(lambda query: "", func_name="one_more")


def test_only_the_agents_own_code_failing_to_import_is_called_its_error(tmp_path, monkeypatch):
    """An error raised in a library the agent calls, or in an installed package under the
    agent's directory, keeps its traceback (it was called the agent's INVALID_INPUT at the
    agent's line); one in the agent's own file is one line naming it."""
    from codeshot.sdk.project import _import_entry

    (tmp_path / "mine.py").write_text("x = 1\nraise KeyError('mine')\n")
    (tmp_path / "calls_a_library.py").write_text("import json\njson.loads('{')\n")
    vendored = tmp_path / ".venv" / "lib" / "site-packages"
    vendored.mkdir(parents=True)
    (vendored / "broken_lib.py").write_text("raise RuntimeError('library bug')\n")
    (tmp_path / "uses_vendored.py").write_text(
        f"import sys\nsys.path.insert(0, {str(vendored)!r})\nimport broken_lib\n")
    monkeypatch.syspath_prepend(str(tmp_path))  # as load_agent puts the agent's directory
    with pytest.raises(InvalidInput, match=r"^mine.py line 2: KeyError: 'mine'$"):
        _import_entry("mine", tmp_path.resolve())
    # Raised by the SDK or importlib for the agent's own line: that line is named.
    (tmp_path / "bad_func.py").write_text(
        "from codeshot.sdk import CodeShotAgent\nagent = CodeShotAgent('I test.', 'Q: x\\nA: y')"
        "\nagent.register_func(lambda query: '', func_name='bad name')\n")
    (tmp_path / "plugin.py").write_text("import importlib\nimportlib.import_module('no_plugin')\n")
    with pytest.raises(InvalidInput, match=r"^bad_func.py line 3: ValueError: Func names are"):
        _import_entry("bad_func", tmp_path.resolve())
    with pytest.raises(InvalidInput, match=r"^plugin.py line 2: ModuleNotFoundError: No module"):
        _import_entry("plugin", tmp_path.resolve())
    with pytest.raises(ValueError, match="Expecting property name"):  # json's, not INVALID_INPUT
        _import_entry("calls_a_library", tmp_path.resolve())
    with pytest.raises(RuntimeError, match="library bug"):
        _import_entry("uses_vendored", tmp_path.resolve())


def test_what_the_sdk_and_engine_refuse_while_the_agent_loads_names_its_line(tmp_path,
                                                                             monkeypatch):
    """A Func parameter's type and a few-shot's grammar: a 40-line traceback ending in
    codeshot/engine/components.py, and "few-shot 2, line 3: ..." naming no file."""
    from codeshot.sdk.project import _import_entry

    (tmp_path / "typed.py").write_text(
        "from decimal import Decimal\nfrom codeshot.sdk import CodeShotAgent\n"
        "agent = CodeShotAgent('I tip.', 'Q: Tip\\nAsk Func[tip]: 15\\nFunc[tip] says: 3\\n"
        "A: 3')\n\n@agent.register_func\ndef tip(percent: Decimal) -> str:\n    return ''\n")
    (tmp_path / "grammar.py").write_text(
        "from codeshot.sdk import CodeShotAgent\n\nagent = CodeShotAgent('I tip.', [\n"
        "    'Q: Tip 15% on 20\\nA: 3',\n    'Q: Tip 10% on 20\\nAsk Func[tip]: 10, 20\\n"
        "Func[tip] says: 2'])\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(InvalidInput, match=r"^typed.py line 5: TypeError: Func tip: parameter "
                       r"percent has type <class 'decimal.Decimal'>; Funcs take str"):
        _import_entry("typed", tmp_path.resolve())
    with pytest.raises(InvalidInput) as raised:
        _import_entry("grammar", tmp_path.resolve())
    assert raised.value.message == ('grammar.py line 3: few-shot 2, line 3: a few-shot must '
                                    'end with "A:", got "Func[tip] says: 2"')


def test_an_oauth_client_missing_from_the_environment_names_the_agents_line(tmp_path,
                                                                           monkeypatch):
    """OAuthParams.from_env raised a KeyError of its own, which a bug of codeshot's also
    raises: it is a refusal (still a KeyError, as Fixie's was), so the line is named."""
    from codeshot.sdk.project import _import_entry

    (tmp_path / "mailer.py").write_text(
        "from codeshot.sdk import OAuthParams\n\n"
        "params = OAuthParams.from_env('GMAIL_', ['mail'])\n")
    monkeypatch.delenv("GMAIL_CLIENT_ID", raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(InvalidInput, match=r"^mailer.py line 3: MissingOAuthSetting: "
                       r"OAuthParams.from_env: GMAIL_CLIENT_ID is not set$") as raised:
        _import_entry("mailer", tmp_path.resolve())
    assert isinstance(raised.value.__cause__, KeyError)


CLIENT = {"client_id": "id", "client_secret": "s", "auth_uri": "https://a.example/auth",
          "token_uri": "https://a.example/token"}


@pytest.mark.parametrize(("text", "says"), [
    ("", "secrets.json is not JSON (Expecting value: line 1 column 1 (char 0))"),
    ("<html>", "secrets.json is not JSON (Expecting value: line 1 column 1 (char 0))"),
    ("[]", "secrets.json holds a JSON list, not an object with a 'web' or 'installed' client"),
    (json.dumps({"client_id": "id"}), "secrets.json has neither 'web' nor 'installed' (it has "
                                      "['client_id']): download the OAuth client's JSON again"),
    (json.dumps({"installed": "id"}), "secrets.json is not a client secrets file: its "
                                       "'installed' is not an object"),
    (json.dumps({"web": None}), "secrets.json is not a client secrets file: its 'web' is "
                                "not an object"),
    (json.dumps({"web": {**CLIENT, "client_secret": ""}}),
     "secrets.json is not a client secrets file: its 'web' needs non-empty strings for "
     "'client_secret'"),
    (json.dumps({"web": {"client_id": "id", "auth_uri": "https://a.example/auth"}}),
     "secrets.json's 'web' has no 'client_secret', 'token_uri'"),
])
def test_a_malformed_client_secrets_file_names_the_file_and_what_is_wrong(tmp_path, monkeypatch,
                                                                         text, says):
    """Each was an AttributeError ('list' object has no attribute 'get'), a TypeError, a bare
    JSONDecodeError naming no file, or "has no 'installed'" for a file with neither client:
    a traceback or a riddle when the agent loads."""
    from codeshot.sdk.project import _import_entry

    (tmp_path / "secrets.json").write_text(text)
    (tmp_path / "booker.py").write_text(
        "from codeshot.sdk import OAuthParams\n\n"
        f"params = OAuthParams.from_client_secrets_file({str(tmp_path / 'secrets.json')!r}, "
        "['books'])\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(InvalidInput) as raised:
        _import_entry("booker", tmp_path.resolve())
    assert raised.value.message.startswith("booker.py line 3: ")
    assert raised.value.message.endswith(
        f": OAuthParams.from_client_secrets_file: {tmp_path}/{says}"), raised.value.message


def test_a_client_secrets_file_reads_web_before_installed(tmp_path):
    from codeshot.sdk import OAuthParams

    secrets = tmp_path / "secrets.json"
    secrets.write_text(json.dumps({"installed": {**CLIENT, "client_id": "app"},
                                   "web": CLIENT}))
    assert OAuthParams.from_client_secrets_file(secrets, ["b"]) == OAuthParams(
        "id", "s", "https://a.example/auth", "https://a.example/token", ["b"])


@pytest.mark.parametrize("web", [None, {}])
def test_a_client_secrets_file_with_an_empty_web_reads_installed(tmp_path, web):
    """Refused ("its 'web' is not an object") once "web" was read whenever present."""
    from codeshot.sdk import OAuthParams

    secrets = tmp_path / "secrets.json"
    secrets.write_text(json.dumps({"web": web, "installed": CLIENT}))
    assert OAuthParams.from_client_secrets_file(secrets, ["b"]) == OAuthParams(
        "id", "s", "https://a.example/auth", "https://a.example/token", ["b"])


def test_codeshot_bundled_in_the_agents_directory_still_raises_on_its_behalf(tmp_path,
                                                                            monkeypatch):
    """A Lambda bundle holds codeshot beside agent.py: its frames are not the agent's. But
    only its refusals raise on the agent's behalf: any other error in codeshot is a bug of
    ours, which kept its traceback no longer once every codeshot frame was skipped."""
    from codeshot.sdk import project

    bundled = tmp_path / "bundled_sdk"
    bundled.mkdir()
    (bundled / "refusing.py").write_text("def refuse():\n    raise TypeError('refused')\n\n"
                                         "def bug():\n    return {}['integer']\n")
    for name, call in (("bundle_agent", "refuse"), ("bundle_bug", "bug")):
        (tmp_path / f"{name}.py").write_text(
            f"import sys\nsys.path.insert(0, {str(bundled)!r})\nimport refusing\n"
            f"refusing.{call}()\n")
    monkeypatch.setattr(project, "_CODESHOT", bundled.resolve())
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(InvalidInput, match=r"^bundle_agent.py line 4: TypeError: refused$"):
        project._import_entry("bundle_agent", tmp_path.resolve())
    with pytest.raises(KeyError, match="integer"):  # not "bundle_bug.py line 4: KeyError"
        project._import_entry("bundle_bug", tmp_path.resolve())


@pytest.mark.parametrize(("text", "says"), [
    ("hadnle: a\n", ["handle: Field required",
                     "hadnle: unknown field 'hadnle' (did you mean 'handle'?)"]),
    ("handle: a\ndescripton: Tips.\nsample_querys: [Tip 15%]\n",
     ["descripton: unknown field 'descripton' (did you mean 'description'?)",
      "sample_querys: unknown field 'sample_querys' (did you mean 'sample_queries'?)"]),
    ("handle: a\ntests:\n  - query: Tip\n    expeted: 15\n",
     ["tests[0].expeted: unknown field 'expeted' (did you mean 'expected'?)"]),
    ("handle: a\nname: [1]\n", ["name: Input should be a valid string"]),
    ("handle: a\nsample_queries: [Tip 15%, '']\n",
     ["sample_queries: a sample query must not be empty"]),
])
def test_agent_yaml_mistakes_are_one_line_each_naming_the_field(agent_dirs, text, says):
    """A misspelt key was ignored (its field left empty), and pydantic's dump
    (input_value=..., its URL) was the message."""
    from codeshot.errors import InvalidInput
    from codeshot.sdk.project import read_config

    write_agent(agent_dirs / "a", text)
    with pytest.raises(InvalidInput) as raised:
        read_config(agent_dirs / "a")
    path = agent_dirs / "a" / "agent.yaml"
    assert raised.value.message.splitlines() == [f"{path}: {line}" for line in says]


def test_a_key_written_twice_in_agent_yaml_is_refused(agent_dirs):
    """YAML keeps the last one: which handle was meant?"""
    from codeshot.errors import InvalidInput
    from codeshot.sdk.project import read_config

    write_agent(agent_dirs / "a", "handle: a\nname: A\nhandle: b\n")
    with pytest.raises(InvalidInput) as raised:
        read_config(agent_dirs / "a")
    assert raised.value.message == (f"{agent_dirs / 'a' / 'agent.yaml'} line 3: not valid "
                                    "YAML: duplicate key 'handle'")


@pytest.mark.parametrize("key", ["? [a, b]\n: 1\n", "? {a: 1}\n: x\n"])
def test_a_list_or_mapping_as_a_key_in_agent_yaml_is_refused(agent_dirs, key):
    """The duplicate-key check hashed it: a TypeError, and `agent test` printed a traceback."""
    from codeshot.errors import InvalidInput
    from codeshot.sdk.project import read_config

    write_agent(agent_dirs / "a", "handle: a\n" + key)
    with pytest.raises(InvalidInput) as raised:
        read_config(agent_dirs / "a")
    assert raised.value.message == (f"{agent_dirs / 'a' / 'agent.yaml'} line 2: not valid "
                                    "YAML: found unhashable key")


def test_yaml_merge_keys_still_load_in_agent_yaml(agent_dirs):
    """The duplicate-key check read "<<" as a key and refused YAML's merge keys."""
    from codeshot.sdk.project import read_config

    write_agent(agent_dirs / "a", "handle: a\ntests:\n  - &roll\n    query: Roll a d20\n"
                "    regex: '^You rolled'\n  - <<: *roll\n    query: Roll a d6\n")
    assert [t.query for t in read_config(agent_dirs / "a").tests] == ["Roll a d20", "Roll a d6"]


def test_every_key_of_the_fixie_examples_agent_yaml_files_still_loads(agent_dirs):
    """fixie-examples' agent.yaml files (all their versions) use only these keys."""
    from codeshot.sdk.project import read_config

    write_agent(agent_dirs / "a", "handle: a\nname: A\ndescription: |\n  Rolls dice.\n"
                "more_info_url: https://example.com\nentry_point: main:agent\npublic: false\n"
                "deployment_url: https://example.com/a\ntests:\n  - query: Roll\n"
                "    expected: The response should name a number.\n")
    config = read_config(agent_dirs / "a")
    assert (config.handle, config.description, config.deployment_url) == (
        "a", "Rolls dice.\n", "https://example.com/a")


def test_loading_an_agent_refuses_a_func_its_few_shots_ask_and_it_lacks(agent_dirs):
    """Found when it is loaded (`agent test`, `serve`), in its file, not when served."""
    from codeshot.sdk.project import load_agent, read_config

    write_agent(agent_dirs / "a", "handle: a\n", "from codeshot.sdk import CodeShotAgent\n"
                "agent = CodeShotAgent('I add.', 'Q: 2+2?\\nAsk Func[fixie_cacl]: 2+2\\n"
                "Func[fixie_cacl] says: 4\\nA: 4')\n")
    with pytest.raises(InvalidInput) as raised:
        load_agent(agent_dirs / "a", read_config(agent_dirs / "a"))
    assert raised.value.message == (
        "agent.py: few-shot 1, line 2: the few-shots ask Func[fixie_cacl], which no "
        "@agent.register_func defines (did you mean Func[fixie_calc]?); defined: none")


def test_a_blank_or_long_sample_query_stored_before_they_were_refused_is_given_back_valid():
    """`codeshot serve --register` sets back what it read: a blank stored query, or a
    few-shot's Q line over the 500 characters stored whole, sent back, was refused
    (INVALID_INPUT) and the agent's other fields were left lent."""
    from codeshot.client import _described

    long = "Roll " + "d20 " * 200
    stored = {"name": "Dice", "description": "Rolls dice.", "moreInfoUrl": None,
              "queries": ["Roll a d20", "", " ", long], "published": False}
    assert _described(stored) == {"name": "Dice", "description": "Rolls dice.",
                                  "moreInfoUrl": "", "sampleQueries": [
                                      "Roll a d20", long[:499] + "…"], "published": False}


def test_lending_records_are_one_file_a_lending_read_per_platform_and_agent(tmp_path):
    """`serve --register` keeps each lending until it is given back; the next serve of
    the agent reads its own platform's and agent's, the latest first, past what is not
    a record (another tool's file, one half written by a writer that died)."""
    import dataclasses

    from codeshot.lending import Lent, LentRecords

    def lent(revision_id: str, agent_id: str = "local/dice") -> Lent:
        return Lent(agent_id, agent_id.split("/")[1], "http://127.0.0.1:8181", revision_id,
                    "01HOME", "http://127.0.0.1:9000", {"name": "Dice"}, {}, "01HOME",
                    "http://127.0.0.1:9000", {"name": "Dice"})

    here = LentRecords("http://127.0.0.1:8080", tmp_path)
    older, newer = lent("01J0000000000000000000000A"), lent("01J0000000000000000000000B")
    for each in (newer, older, lent("01J0000000000000000000000C", "local/notes")):
        here.keep(each)
    LentRecords("https://api.example.com", tmp_path).keep(lent("01J0000000000000000000000D"))
    (tmp_path / "junk.json").write_text("[1, 2")
    (tmp_path / "other.json").write_text("[1, 2]")
    named = dataclasses.replace(newer, lent_as={"name": "Whisperer"})
    here.keep(named)  # the same lending again: its record replaced
    assert here.of("local/dice") == [named, older]
    assert len(list(tmp_path.iterdir())) == 6  # no temporary file left
    here.drop("local/dice", named.revision_id)
    here.drop("local/dice", named.revision_id)  # a retry: nothing left to drop
    assert here.of("local/dice") == [older]


def test_a_lending_record_that_cannot_be_read_is_told_not_skipped(tmp_path):
    """A record cut short (a power cut) or written with another codeshot version's fields
    was skipped silently: `agent restore` said "Nothing to restore" with it right there.
    Another agent's or platform's is still not ours to judge; one whose handle is not its
    agent's (its restore would act on another agent) is not read either."""
    import dataclasses
    import json

    from codeshot.lending import Lent, LentRecords

    here = LentRecords("http://127.0.0.1:8080", tmp_path)
    record = {"api_url": here.api_url, **dataclasses.asdict(Lent(
        "local/dice", "dice", "http://127.0.0.1:8181", "01J0000000000000000000000A", "01HOME",
        None, {}, {}, "01HOME", None, {})), "machine": "laptop"}
    (tmp_path / "newer.json").write_text(json.dumps(record))
    (tmp_path / "notes.json").write_text(json.dumps({**record, "agent_id": "local/notes"}))
    (tmp_path / "cut.json").write_text(json.dumps(record)[:60])
    del record["machine"]
    (tmp_path / "other.json").write_text(json.dumps({**record, "handle": "notes"}))
    assert here.of("local/dice") == []
    cut, newer, other = sorted(here.unreadable)
    assert other == f"{tmp_path / 'other.json'} (its handle 'notes' is not local/dice's)"
    assert cut.startswith(f"{tmp_path / 'cut.json'} (Unterminated string starting at"), cut
    assert newer == f"{tmp_path / 'newer.json'} (Lent.__init__() got an unexpected keyword " \
        "argument 'machine')"


def test_a_temporary_record_a_killed_writer_left_is_removed(tmp_path):
    """A writer killed mid-write left its temporary file for good: they piled up."""
    import os
    import time

    from codeshot.lending import STALE_SECONDS, LentRecords

    left, writing = tmp_path / "lent.abc.tmp", tmp_path / "lent.def.tmp"
    for each in (left, writing):
        each.write_text("{")
    then = time.time() - STALE_SECONDS - 60
    os.utime(left, (then, then))
    assert LentRecords("http://127.0.0.1:8080", tmp_path).of("local/dice") == []
    assert list(tmp_path.iterdir()) == [writing]
