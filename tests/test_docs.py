"""The README's configuration table and the code must not drift apart."""

from pathlib import Path

from codeshot.settings import FIELDS

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


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
