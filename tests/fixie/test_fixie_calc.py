"""fixie_calc: exact answers to a table of expressions; anything not arithmetic refused."""

from __future__ import annotations

import pytest

from codeshot.errors import InvalidInput
from codeshot.runner.platform_funcs.calc import calc

TABLE = [
    ("0.1 + 0.2", "0.3"),  # exact decimals, not binary floats
    ("2 + 3 * 4", "14"),
    ("(2 + 3) * 4", "20"),
    ("2^10", "1024"),
    ("2**3", "8"),
    ("-2^2", "-4"),
    ("2^-2", "0.25"),
    ("10 / 4", "2.5"),
    ("1 / 3", "0.3333333333333333333333333333"),
    ("10 // 3", "3"),
    ("7 % 3", "1"),
    ("15% of 80", "12"),
    ("80 + 15%", "92"),
    ("200 - 10%", "180"),
    ("50%", "0.5"),
    ("12.5% * 8", "1"),
    ("1,234.5 * 2", "2469"),
    ("1_000_000 / 8", "125000"),
    ("1e3 + 1", "1001"),
    ("2.50 * 4", "10"),
    ("3 \u00d7 4 \u00f7 2", "6"),  # the multiplication and division signs
    ("sqrt(2)", "1.414213562373095048801688724"),
    ("sqrt(144)", "12"),
    ("round(2.675, 2)", "2.68"),
    ("round(2.5)", "2"),  # banker's rounding, as Python's round
    ("max(1, 5, 3) - min(4, 2)", "3"),
    ("abs(-7.25)", "7.25"),
    ("floor(-2.5) + ceil(2.1)", "0"),
    ("2 * pi", "6.283185307179586476925286766"),
    ("99999999999999999999 + 1", "100000000000000000000"),
    ("1.10 + 2.20 =", "3.3"),
    # Written out up to 100 digits; beyond, in scientific notation (1e-999999 written out
    # is a million characters: a reply too large to store).
    ("1e-100", "0." + "0" * 99 + "1"),
    ("1e-101", "1E-101"),
    ("1e-999999 * 3", "3E-999999"),
    ("9" * 400 + "e-999999", "1E-999599"),  # 28 digits, as every result
    ("1e-99999999", "1E-99999999"),  # not 0: past the default context's exponents
]


@pytest.mark.parametrize(("expression", "answer"), TABLE)
def test_answers_exactly(expression: str, answer: str) -> None:
    assert calc(expression) == answer


@pytest.mark.parametrize("hostile", [
    "__import__('os').system('id')",
    "__import__(\"os\")",
    "().__class__.__bases__[0].__subclasses__()",
    "open('/etc/passwd').read()",
    "eval('1+1')",
    "lambda: 1",
    "[1, 2]",
    "x = 1",
    "1 if 1 else 2",
    "sqrt.__globals__",
])
def test_refuses_anything_but_arithmetic(hostile: str) -> None:
    with pytest.raises(InvalidInput) as err:
        calc(hostile)
    assert err.value.code == "INVALID_INPUT" and err.value.message.startswith("fixie_calc: ")


@pytest.mark.parametrize(("bad", "says"), [
    ("", "empty"),
    ("2 +", "ends too soon"),
    ("(1 + 2", "not closed"),
    ("1 / 0", "division by zero"),
    ("5 // 0", "division by zero"),
    ("2^100000", "exponents are limited"),
    ("sqrt(-1)", "negative"),
    ("round(1, 2, 3)", "wrong number of arguments"),
    ("(" * 60 + "1" + ")" * 60, "nests too deeply"),
    ("1+" * 300 + "1", "limited to 500 characters"),
    ("1e999999999 * 10", "Overflow"),
    ("floor(1e999999999)", "Overflow"),  # these two were INTERNAL: the run ended
    ("2.5e999999999999999999", "Overflow"),
])
def test_bad_expressions_say_what_is_wrong(bad: str, says: str) -> None:
    with pytest.raises(InvalidInput) as err:
        calc(bad)
    assert says in err.value.message
