"""``fixie_calc``: arithmetic on exact decimals, parsed here, never evaluated as Python.

A small recursive-descent parser over a tokenizer of its own: numbers (``1_000``,
``1,234.5``, ``2.5e3``), ``+ - * / // % ^ **`` and the times and divided-by signs,
parentheses, percentages (``15%``, ``15% of 80``, ``80 + 15%``) and a few functions
(``sqrt abs round min max floor ceil``; arguments separated by ", ", since "1,234" is a
number). Anything else (a name, a quote, an attribute) is refused with INVALID_INPUT, so
``__import__('os')`` is a parse error, not a call. Results are ``Decimal`` with 28
significant digits: ``0.1 + 0.2`` is ``0.3``; beyond 100 digits they are written in
scientific notation.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from decimal import (
    MAX_EMAX,
    MIN_EMIN,
    ROUND_CEILING,
    ROUND_FLOOR,
    ROUND_HALF_EVEN,
    Context,
    Decimal,
    InvalidOperation,
    localcontext,
)
from typing import TYPE_CHECKING

from codeshot.errors import InvalidInput

if TYPE_CHECKING:
    from codeshot.runner.platform_funcs import FuncContext

MAX_INPUT = 500  # characters of one expression
MAX_EXPONENT = 1_000  # ``2^1000000`` would take the runner's time and memory
MAX_DEPTH = 50  # nested parentheses and unary signs
MAX_PLAIN = 100  # digits a result is written out with; beyond, in scientific notation
# Dropping a result's trailing zeros with no exponent limit: in the default context
# (exponents down to -999,999) 1e-99999999 would come out as 0.
_WIDE = Context(prec=28, Emin=MIN_EMIN, Emax=MAX_EMAX)

_TOKEN = re.compile(r"""
    (?P<number>(?:\d[\d_]*(?:,\d{3})*(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<op>\*\*|//|[-+*/%^(),\u00d7\u00f7])
  | (?P<word>[A-Za-z_]+)
  | (?P<space>\s+)
""", re.VERBOSE)


def _sqrt(x: Decimal) -> Decimal:
    if x < 0:
        raise InvalidInput("sqrt of a negative number")
    return x.sqrt()


def _round(x: Decimal, places: Decimal = Decimal(0)) -> Decimal:
    return x.quantize(Decimal(1).scaleb(-int(places)), rounding=ROUND_HALF_EVEN)


FUNCTIONS: dict[str, Callable[..., Decimal]] = {
    "sqrt": _sqrt,
    "abs": abs,
    "round": _round,
    "floor": lambda x: x.to_integral_value(rounding=ROUND_FLOOR),
    "ceil": lambda x: x.to_integral_value(rounding=ROUND_CEILING),
    "min": min,
    "max": max,
}


def tokenize(text: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    position = 0
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:
            raise InvalidInput(f"fixie_calc: unexpected {text[position]!r} at {position + 1}")
        kind = match.lastgroup or ""
        if kind == "number":
            tokens.append(("number", match.group().replace("_", "").replace(",", "")))
        elif kind == "op":
            tokens.append(("op", {"\u00d7": "*", "\u00f7": "/", "**": "^"}.get(match.group(),
                                                                        match.group())))
        elif kind == "word":
            tokens.append(("word", match.group().lower()))
        position = match.end()
    return tokens


class _Parser:
    """expr := term (('+'|'-') term)* ; a ``+ 15%`` term is 15% of the left side.
    term := unary (('*'|'/'|'//'|'%'-as-mod) unary)* ; unary := ('-'|'+') unary | power
    power := postfix ('^' unary)? ; postfix := atom '%'? ('of' unary)?"""

    def __init__(self, tokens: list[tuple[str, str]]) -> None:
        self.tokens, self.at, self.depth = tokens, 0, 0

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def take(self, value: str | None = None) -> bool:
        token = self.peek()
        if token is not None and (value is None or token[1] == value):
            self.at += 1
            return True
        return False

    def parse(self) -> Decimal:
        if not self.tokens:
            raise InvalidInput("fixie_calc: the expression is empty")
        value, _ = self.expr()
        if self.peek() is not None:
            raise InvalidInput(f"fixie_calc: unexpected {self.peek()[1]!r}")  # type: ignore[index]
        return value

    def expr(self) -> tuple[Decimal, bool]:
        value, percent = self.term()
        while (token := self.peek()) and token[1] in "+-" and token[0] == "op":
            self.at += 1
            right, right_percent = self.term()
            if right_percent:  # "80 + 15%": 15% of 80
                right = value * right
            value = value + right if token[1] == "+" else value - right
            percent = False
        return value, percent

    def term(self) -> tuple[Decimal, bool]:
        value, percent = self.unary()
        while (token := self.peek()) and token[0] == "op" and token[1] in ("*", "/", "//", "%"):
            self.at += 1
            right, _ = self.unary()
            if token[1] == "*":
                value = value * right
            elif right == 0:
                raise InvalidInput("fixie_calc: division by zero")
            elif token[1] == "/":
                value = value / right
            elif token[1] == "//":
                value = (value / right).to_integral_value(rounding=ROUND_FLOOR)
            else:
                value = value - right * (value / right).to_integral_value(rounding=ROUND_FLOOR)
            percent = False
        return value, percent

    def unary(self) -> tuple[Decimal, bool]:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise InvalidInput("fixie_calc: the expression nests too deeply")
        try:
            if self.take("-"):
                value, percent = self.unary()
                return -value, percent
            if self.take("+"):
                return self.unary()
            return self.power()
        finally:
            self.depth -= 1

    def power(self) -> tuple[Decimal, bool]:
        base, percent = self.postfix()
        if self.take("^"):
            exponent, _ = self.unary()
            if abs(exponent) > MAX_EXPONENT:
                raise InvalidInput(f"fixie_calc: exponents are limited to ±{MAX_EXPONENT}")
            return base ** exponent, False
        return base, percent

    def postfix(self) -> tuple[Decimal, bool]:
        value = self.atom()
        percent = False
        after = self.tokens[self.at + 1] if self.at + 1 < len(self.tokens) else None
        # "15%" is a percentage unless another operand follows ("7 % 3" is modulo).
        if self.peek() == ("op", "%") and (after is None or after[0] == "word"
                                           or after[1] in ("+", "-", "*", "/", ")", ",")):
            self.at += 1
            value, percent = value / 100, True
        if self.take("of"):
            right, _ = self.unary()
            value, percent = value * right, False
        return value, percent

    def atom(self) -> Decimal:
        token = self.peek()
        if token is None:
            raise InvalidInput("fixie_calc: the expression ends too soon")
        self.at += 1
        kind, text = token
        if kind == "number":
            return Decimal(text)
        if text == "(":
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise InvalidInput("fixie_calc: the expression nests too deeply")
            value, _ = self.expr()
            self.depth -= 1
            if not self.take(")"):
                raise InvalidInput("fixie_calc: a '(' is not closed")
            return value
        if kind == "word" and text in ("pi", "e"):
            return Decimal("3.141592653589793238462643383") if text == "pi" \
                else Decimal(1).exp()
        if kind == "word" and text in FUNCTIONS and self.take("("):
            args = [self.expr()[0]]
            while self.take(","):
                args.append(self.expr()[0])
            if not self.take(")"):
                raise InvalidInput(f"fixie_calc: {text}( is not closed")
            try:
                return FUNCTIONS[text](*args)
            except TypeError:
                raise InvalidInput(f"fixie_calc: wrong number of arguments to {text}") from None
        raise InvalidInput(f"fixie_calc: unexpected {text!r} (only numbers, + - * / ^ %, "
                           f"parentheses and {', '.join(FUNCTIONS)})")


def evaluate(text: str) -> Decimal:
    """The exact value of ``text``; INVALID_INPUT for anything that is not arithmetic."""
    if len(text) > MAX_INPUT:
        raise InvalidInput(f"fixie_calc: expressions are limited to {MAX_INPUT} characters")
    with localcontext() as context:
        context.prec = 28
        try:
            return _Parser(tokenize(text.strip().rstrip("=").strip())).parse()
        except (InvalidOperation, OverflowError, ArithmeticError) as exc:
            raise InvalidInput(f"fixie_calc: {type(exc).__name__}") from None


def render(value: Decimal) -> str:
    """A plain number: no exponent for ordinary sizes, no trailing zeros. A number whose
    plain form is longer than ``MAX_PLAIN`` (``1e-999999`` is a million characters) is in
    scientific notation (``1E-999999``): its digits are 28 at most."""
    if value == value.to_integral_value():
        return f"{value.quantize(Decimal(1)):f}" if abs(value) < Decimal("1e28") else str(value)
    normal = value.normalize(_WIDE)
    # Without writing it: a plain form's length is about its exponent's size.
    return f"{normal:f}" if abs(normal.adjusted()) <= MAX_PLAIN else str(normal)


def calc(text: str, _ctx: FuncContext | None = None) -> str:
    """The Func: the expression's value as text (it needs nothing from the context)."""
    value = evaluate(text)
    try:
        return render(value)
    except ArithmeticError as exc:  # a value no context can write (floor(1e999999999))
        raise InvalidInput(f"fixie_calc: {type(exc).__name__}") from None
