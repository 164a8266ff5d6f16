"""The README's configuration table, docs/errors.md and the code must not drift apart."""

import re
from pathlib import Path

from codeshot import errors
from codeshot.settings import FIELDS

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
ERRORS = (ROOT / "docs" / "errors.md").read_text()


def test_every_setting_is_documented_with_its_default():
    for field in FIELDS:
        env = f"CODESHOT_{field.name.upper()}"
        rows = [line for line in README.splitlines() if line.startswith(f"| `{env}` |")]
        assert rows, f"{env} is missing from the README configuration table"
        default = field.default
        shown = rows[0].split("|")[2].strip().strip("`")
        expected = "unset" if default is None else str(default).lower() \
            if isinstance(default, bool) else str(default)
        assert shown == expected or (isinstance(default, float) and shown == f"{default:g}"), \
            (env, shown, expected)


def error_codes() -> set[str]:
    """Every code a CodeshotError of codeshot/errors.py carries."""
    return {cls.code for cls in vars(errors).values()
            if isinstance(cls, type) and issubclass(cls, errors.CodeshotError)}


def test_every_error_code_is_documented_in_docs_errors_and_named_in_the_readme():
    documented = {line.split("|")[1].strip().strip("`") for line in ERRORS.splitlines()
                  if line.startswith("| `")}
    assert error_codes() - documented == set(), "missing from docs/errors.md's table"
    # The README's list of codes says "all in docs/errors.md": it names each one.
    assert {code for code in error_codes()
            if not re.search(rf"\b{code}\b", README)} == set(), "missing from the README"


def test_the_readme_names_each_mcp_tools_arguments_as_its_schema_has_them():
    """find_agents takes `text`, ask `query`: a new user guessed one from the other."""
    from codeshot.api.mcp import ASK, FIND_AGENTS

    for tool in (FIND_AGENTS, ASK):
        schema = tool.input_schema
        [required] = schema["required"]
        optional = [name for name in schema["properties"] if name != required]
        names = " and ".join(f"`{name}`" for name in optional)
        assert f"`{tool.name}` (`{required}`, optional {names}" in " ".join(README.split()), \
            tool.name
