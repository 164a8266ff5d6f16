"""Code Shot accuracy benchmark (issue #15): 12 agents, 66 queries written here.

    .venv/bin/python -m benchmarks.engine                  # the offline fewshot provider
    CODESHOT_OPENAI_BASE_URL=http://127.0.0.1:8080/v1 CODESHOT_LLM_MODEL=m \\
        .venv/bin/python -m benchmarks.engine [--reprompt off|on|both] [--only dice,quote]

With ``CODESHOT_OPENAI_BASE_URL`` set it runs the ``openai`` provider against that server
too (``CODESHOT_OPENAI_ENDPOINT``: chat or completions), once per re-prompt setting of
the grounding check. Each query runs through the real engine (``Executor`` with the
agent's components) with in-process Funcs and agents; nothing is scripted on the model
side. Scores, separately:

- protocol: the commands that ran are the expected ones with the expected input (Funcs,
  agents; an ``Ask User`` where the query lacks something), in order where it matters;
- grounded: the answer states what the replies returned (every number they gave, or the
  words a case names) and the engine's grounding check flags nothing invented.

Categories: single Func, two Funcs, Ask Agent, Ask User, multi-line answers. Also LLM calls,
tokens and seconds per query, and how many replies needed a corrective re-prompt; for the
offline replay, the seconds of one step after a Func's 80 kB reply (it must stay linear) and
after a repetitive 9 kB one (its word alignment must stay bounded).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation

from codeshot.engine.builtin import AgentTool, code_shot_components, planner_components
from codeshot.engine.components import Command, CommandResult, command
from codeshot.engine.executor import Executor, Status, TraceStep
from codeshot.engine.fewshot import FewShot, Kind, Step, parse_few_shots
from codeshot.engine.grounding import numbers
from codeshot.errors import InvalidInput
from codeshot.llm import get_llm
from codeshot.llm.base import LLM, ChatMessage, Completion
from codeshot.llm.fewshot import FewShotLLM, next_lines
from codeshot.models import MessageType
from codeshot.settings import Settings
from codeshot.text import MAX_REPLY_TEXT_BYTES

Reply = Callable[[str], str]


@dataclass(frozen=True)
class Call:
    """One expected command: ``kind`` func, agent or user; ``inputs`` the acceptable inputs
    (compared normalised; ``re:`` starts a regex; none: any input)."""

    kind: str
    target: str | None = None
    inputs: tuple[str, ...] = ()


@dataclass(frozen=True)
class Case:
    query: str
    calls: tuple[Call, ...]
    ordered: bool = True
    user_answer: str | None = None  # what the user says when the agent asks
    must: tuple[str, ...] | None = None  # the answer holds these; None: every reply number


@dataclass
class BenchAgent:
    handle: str
    category: str
    base_prompt: str
    few_shots: str
    cases: list[Case]
    funcs: dict[str, Command] = field(default_factory=dict)
    agents: dict[str, Reply] = field(default_factory=dict)  # agent id -> its answer
    fresh: Callable[[], None] = lambda: None  # resets the agent's state before each query


def func(name: str, *inputs: str) -> Call:
    return Call("func", name, inputs)


# -- the agents ---------------------------------------------------------------------------


@command
def roll(size: int, count: int) -> str:
    """Roll ``count`` dice with ``size`` sides."""
    if not 1 <= count <= 20 or size < 2:
        raise InvalidInput("roll takes a size of 2 or more and 1-20 dice")
    return " ".join(str((size // 3 + 5 * i) % size + 1) for i in range(count))


DICE = BenchAgent("dice", "single Func", "I roll virtual dice.", """
Q: Roll a d20
Ask Func[roll]: 20 1
Func[roll] says: 12
A: You rolled a 12!

Q: Roll two dice and blow on them first
Ask Func[roll]: 6 2
Func[roll] says: 4 3
A: You rolled a 4 and a 3, 7 in total.

Q: Roll 3d8
Ask Func[roll]: 8 3
Func[roll] says: 5 3 8
A: You rolled 5, 3 and 8, 16 in total.""", [
    Case("Roll a d12", (func("roll", "12 1"),)),
    Case("Roll 2d6", (func("roll", "6 2"),)),
    Case("Roll four six-sided dice", (func("roll", "6 4"),)),
    Case("Roll a d100", (func("roll", "100 1"),)),
    Case("Roll 3d10", (func("roll", "10 3"),)),
    Case("Toss a single twenty-sided die", (func("roll", "20 1"),)),
], funcs={"roll": roll})

PRICES = {"GOOG": "171.42", "AAPL": "227.15", "MSFT": "415.60", "NVDA": "118.90",
          "AMZN": "186.33", "TSLA": "251.10", "AMD": "160.20"}


@command
def quote(symbol: str) -> str:
    """The latest price of a stock symbol."""
    price = PRICES.get(symbol.strip().upper())
    if price is None:
        raise InvalidInput(f"unknown symbol {symbol!r}: use a ticker such as AAPL")
    return price


QUOTE = BenchAgent("quote", "single Func", "I look up the latest price of a stock.", """
Q: What is the price of AMZN?
Ask Func[quote]: AMZN
Func[quote] says: 178.25
A: AMZN is trading at $178.25.

Q: How much is Tesla stock?
Ask Func[quote]: TSLA
Func[quote] says: 251.10
A: TSLA is trading at $251.10.

Q: Compare NVDA and AMD
Ask Func[quote]: NVDA
Func[quote] says: 120.50
Ask Func[quote]: AMD
Func[quote] says: 160.20
A: NVDA is at $120.50 and AMD is at $160.20, so AMD is higher.""", [
    Case("What is the price of GOOG?", (func("quote", "GOOG"),)),
    Case("How much is Microsoft stock?", (func("quote", "MSFT"),)),
    Case("What is Apple trading at?", (func("quote", "AAPL"),)),
    Case("Price of NVDA please", (func("quote", "NVDA"),)),
    Case("Compare AAPL and MSFT", (func("quote", "AAPL"), func("quote", "MSFT")), ordered=False),
    Case("Which is higher, GOOG or AMZN?", (func("quote", "GOOG"), func("quote", "AMZN")),
         ordered=False),
], funcs={"quote": quote})

FORECASTS = {("oslo", "tomorrow"): "4C, snow", ("rome", "today"): "26C, sunny",
             ("tokyo", "friday"): "21C, showers", ("madrid", "tomorrow"): "31C, clear",
             ("berlin", "today"): "12C, overcast", ("lisbon", "tomorrow"): "19C, windy"}


@command
def forecast(city: str, day: str) -> str:
    """The forecast for a city on a day (today, tomorrow or a weekday)."""
    found = FORECASTS.get((city.strip().lower(), day.strip().lower()))
    if found is None:
        raise InvalidInput(f"no forecast for {city!r} on {day!r}")
    return found


WEATHER = BenchAgent("weather", "single Func", "I give weather forecasts.", """
Q: What's the weather in Paris tomorrow?
Ask Func[forecast]: Paris, tomorrow
Func[forecast] says: 18C, light rain
A: Tomorrow in Paris: 18C with light rain.

Q: Is it sunny in Athens today?
Ask Func[forecast]: Athens, today
Func[forecast] says: 29C, sunny
A: Yes, Athens is sunny today at 29C.""", [
    Case("Weather in Oslo tomorrow?", (func("forecast", "Oslo, tomorrow"),)),
    Case("Will it rain in Rome today?", (func("forecast", "Rome, today"),)),
    Case("Forecast for Tokyo on Friday", (func("forecast", "Tokyo, Friday"),)),
    Case("How warm will it be in Madrid tomorrow?", (func("forecast", "Madrid, tomorrow"),)),
    Case("What is the weather like in Berlin today?", (func("forecast", "Berlin, today"),)),
    Case("Tomorrow's weather for Lisbon", (func("forecast", "Lisbon, tomorrow"),)),
], funcs={"forecast": forecast})

_FACTORS = {("mi", "km"): Decimal("1.609344"), ("km", "mi"): 1 / Decimal("1.609344"),
            ("kg", "lb"): Decimal("2.2046226"), ("lb", "kg"): 1 / Decimal("2.2046226")}


@command
def convert(value: float, unit: str, to: str) -> str:
    """Convert a value between mi and km, or kg and lb."""
    factor = _FACTORS.get((unit.strip().lower(), to.strip().lower()))
    if factor is None:
        raise InvalidInput("convert knows mi, km, kg and lb")
    return f"{Decimal(str(value)) * factor:.2f}"


CONVERTER = BenchAgent("converter", "single Func", "I convert units of distance and weight.",
                       """
Q: How many km is 5 miles?
Ask Func[convert]: 5, mi, km
Func[convert] says: 8.05
A: 5 miles is 8.05 km.

Q: What is 70 kg in pounds?
Ask Func[convert]: 70, kg, lb
Func[convert] says: 154.32
A: 70 kg is 154.32 lb.""", [
    Case("Convert 10 miles to km", (func("convert", "10, mi, km"),)),
    Case("How many pounds is 3 kg?", (func("convert", "3, kg, lb"),)),
    Case("What is 100 km in miles?", (func("convert", "100, km, mi"),)),
    Case("Convert 2 lb to kg", (func("convert", "2, lb, kg"),)),
    Case("How many kilometres are 26.2 miles?", (func("convert", "26.2, mi, km"),)),
    Case("12 kg in pounds?", (func("convert", "12, kg, lb"),)),
], funcs={"convert": convert})

DISTANCES = {frozenset(("paris", "lyon")): 465, frozenset(("berlin", "munich")): 585,
             frozenset(("madrid", "valencia")): 357, frozenset(("milan", "rome")): 574,
             frozenset(("lyon", "nice")): 471, frozenset(("hamburg", "berlin")): 289,
             frozenset(("porto", "lisbon")): 313}


@command
def distance(start: str, end: str) -> str:
    """Road distance in km between two cities."""
    km = DISTANCES.get(frozenset((start.strip().lower(), end.strip().lower())))
    if km is None:
        raise InvalidInput(f"no road distance for {start!r} to {end!r}")
    return str(km)


@command
def drive_time(km: float) -> str:
    """Driving time for a distance in km, at 100 km/h."""
    minutes = round(km * 0.6)
    return f"{minutes // 60} h {minutes % 60} min"


TRIP = BenchAgent("trip", "two Funcs", "I plan road trips: distances and driving times.", """
Q: How long does it take to drive from Paris to Lyon?
Ask Func[distance]: Paris, Lyon
Func[distance] says: 465
Ask Func[drive_time]: 465
Func[drive_time] says: 4 h 39 min
A: Paris to Lyon is 465 km, about 4 h 39 min by car.

Q: How far is Porto from Lisbon?
Ask Func[distance]: Porto, Lisbon
Func[distance] says: 313
A: Porto is 313 km from Lisbon by road.""", [
    Case("How long is the drive from Berlin to Munich?",
         (func("distance", "Berlin, Munich"), func("drive_time", "585"))),
    Case("Driving time from Madrid to Valencia?",
         (func("distance", "Madrid, Valencia"), func("drive_time", "357"))),
    Case("How many hours to drive Milan to Rome?",
         (func("distance", "Milan, Rome"), func("drive_time", "574"))),
    Case("How far is Nice from Lyon?", (func("distance", "Nice, Lyon", "Lyon, Nice"),)),
    Case("What is the distance from Hamburg to Berlin?", (func("distance", "Hamburg, Berlin"),)),
    Case("How long does it take to drive from Lyon to Nice?",
         (func("distance", "Lyon, Nice"), func("drive_time", "471"))),
], funcs={"distance": distance, "drive_time": drive_time})

NOTES: list[str] = []


def _fresh_notes() -> None:
    NOTES[:] = ["pay rent", "water the plants"]


@command
def add_note(text: str) -> str:
    """Save a note."""
    NOTES.append(text.strip())
    return f"Saved note {len(NOTES)}: {text.strip()}"


@command
def list_notes() -> str:
    """All saved notes."""
    return "\n".join(f"{i}. {n}" for i, n in enumerate(NOTES, start=1))


NOTES_AGENT = BenchAgent("notes", "two Funcs", "I keep the user's notes.", """
Q: Save a note: buy milk
Ask Func[add_note]: buy milk
Func[add_note] says: Saved note 3: buy milk
A: Saved note 3: buy milk.

Q: What notes do I have?
Ask Func[list_notes]:
Func[list_notes] says: 1. call the bank
2. renew passport
A: You have 2 notes:
1. call the bank
2. renew passport

Q: Note down "book flights" and then show me my notes
Ask Func[add_note]: book flights
Func[add_note] says: Saved note 2: book flights
Ask Func[list_notes]:
Func[list_notes] says: 1. call the bank
2. book flights
A: Saved. Your notes:
1. call the bank
2. book flights""", [
    Case("Save a note: call mom", (func("add_note", "call mom"),)),
    Case("Please note: the dentist is on Friday",
         (func("add_note", "re:.*dentist.*friday.*"),), must=("dentist",)),
    Case("Show me my notes", (func("list_notes", ""),), must=("pay rent", "water the plants")),
    Case("Which notes have I saved?", (func("list_notes", ""),),
         must=("pay rent", "water the plants")),
    Case("Add 'buy eggs' to my notes and then show all my notes",
         (func("add_note", "buy eggs"), func("list_notes", "")),
         must=("pay rent", "water the plants", "buy eggs")),
    Case("Save a note: renew the car insurance", (func("add_note", "renew the car insurance"),)),
], funcs={"add_note": add_note, "list_notes": list_notes}, fresh=_fresh_notes)


def _weather_agent(text: str) -> str:
    city = next((c for c, _ in FORECASTS if c in text.lower()), None)
    day = "today" if "today" in text.lower() else "tomorrow"
    found = FORECASTS.get((city or "", day)) or FORECASTS.get((city or "", "tomorrow"))
    return f"{(city or 'there').title()} {day}: {found}." if found else "I have no forecast there."


RATES = {("eur", "usd"): Decimal("1.08"), ("chf", "eur"): Decimal("1.05"),
         ("usd", "eur"): Decimal("0.93"), ("gbp", "eur"): Decimal("1.17")}


def _fx_agent(text: str) -> str:
    match = re.search(r"(\d+(?:\.\d+)?)\s*([A-Za-z]{3}).*?\b([A-Za-z]{3})\b\W*$", text.strip())
    if not match:
        return "Tell me an amount and two currencies, e.g. 100 EUR in USD."
    amount, source, target = Decimal(match[1]), match[2].lower(), match[3].lower()
    rate = RATES.get((source, target))
    if rate is None:
        return f"I have no rate for {source.upper()} to {target.upper()}."
    return f"{amount} {source.upper()} is {amount * rate:.2f} {target.upper()}."


CONCIERGE = BenchAgent("concierge", "Ask Agent", "I am a travel concierge. I ask the weather "
                       "agent and the currency agent and combine their answers.", """
Q: What will the weather be in Lisbon tomorrow?
Ask Agent[local/weather]: Weather in Lisbon tomorrow
Agent[local/weather] says: Lisbon tomorrow: 19C, windy.
A: Lisbon tomorrow: 19C and windy.

Q: How much is 40 GBP in EUR?
Ask Agent[local/fx]: 40 GBP in EUR
Agent[local/fx] says: 40 GBP is 46.80 EUR.
A: 40 GBP is 46.80 EUR.

Q: I fly to Oslo tomorrow: weather, and what is 50 EUR in USD?
Ask Agent[local/weather]: Weather in Oslo tomorrow
Agent[local/weather] says: Oslo tomorrow: 4C, snow.
Ask Agent[local/fx]: 50 EUR in USD
Agent[local/fx] says: 50 EUR is 54.00 USD.
A: Oslo tomorrow: 4C with snow. 50 EUR is 54.00 USD.""", [
    Case("Weather in Rome today?", (Call("agent", "local/weather"),)),
    Case("How much is 100 EUR in USD?", (Call("agent", "local/fx"),)),
    Case("Convert 200 CHF to EUR", (Call("agent", "local/fx"),)),
    Case("What's the weather in Madrid tomorrow?", (Call("agent", "local/weather"),)),
    Case("Going to Tokyo tomorrow: weather please, and how much are 30 USD in EUR?",
         (Call("agent", "local/weather"), Call("agent", "local/fx")), ordered=False),
    Case("Berlin today: what's the weather, and what is 10 GBP in EUR?",
         (Call("agent", "local/weather"), Call("agent", "local/fx")), ordered=False),
], agents={"local/weather": _weather_agent, "local/fx": _fx_agent})

TABLES = iter(range(3, 10_000))


@command
def book(when: str, people: int) -> str:
    """Book a table: when, for how many people."""
    if not 1 <= people <= 12:
        raise InvalidInput("tables are for 1 to 12 people")
    return f"Booked table {next(TABLES)} for {people} at {when.strip()}"


BOOKING = BenchAgent("booking", "Ask User", "I book restaurant tables. I need a time and the "
                     "number of people; I ask the user for whatever is missing.", """
Q: Book a table for 2 at 8pm
Ask Func[book]: 8pm, 2
Func[book] says: Booked table 4 for 2 at 8pm
A: Done: table 4 for 2 people at 8pm.

Q: Book me a table tonight at 7pm
Ask User: For how many people?
User says: 3
Ask Func[book]: 7pm, 3
Func[book] says: Booked table 9 for 3 at 7pm
A: Done: table 9 for 3 people at 7pm.

Q: I need a table for 5 people
Ask User: At what time?
User says: 1pm
Ask Func[book]: 1pm, 5
Func[book] says: Booked table 2 for 5 at 1pm
A: Done: table 2 for 5 people at 1pm.""", [
    Case("Book a table for 4 at 7:30pm", (func("book", "7:30pm, 4"),)),
    Case("Reserve a table for 6 people at 9pm", (func("book", "9pm, 6"),)),
    Case("Book a table at 8pm tonight", (Call("user"), func("book", "8pm, 2")), user_answer="2"),
    Case("I'd like a table at noon", (Call("user"), func("book", "noon, 4", "12pm, 4")),
         user_answer="4"),
    Case("Get me a table for 3", (Call("user"), func("book", "6pm, 3")), user_answer="6pm"),
    Case("Table for 8 people please", (Call("user"), func("book", "9pm, 8")),
         user_answer="9pm"),
], funcs={"book": book})

CELLARS = [
    {"Barolo 2016": 4, "Chablis 2020": 9},
    {"Rioja 2018": 2, "Sancerre 2021": 7, "Port 1997": 1},
    {"Chianti 2019": 12, "Riesling 2022": 5},
]
CELLAR: dict[str, int] = {}


@command
def inventory() -> str:
    """The bottles in the user's cellar."""
    return json.dumps(CELLAR)


def _cellar(n: int) -> Callable[[], None]:
    def fresh() -> None:
        CELLAR.clear()
        CELLAR.update(CELLARS[n])
    return fresh


def _cellar_case(query: str, n: int) -> Case:
    return Case(query, (func("inventory", ""),),
                must=tuple(str(x) for item in CELLARS[n].items() for x in item))


CELLAR_AGENT = BenchAgent("cellar", "multi-line", "I manage the user's wine cellar.", """
Q: What is in my cellar?
Ask Func[inventory]:
Func[inventory] says: {"Merlot 2015": 6, "Pinot Noir 2019": 3}
A: Your cellar holds:
Wine | Bottles
--- | ---
Merlot 2015 | 6
Pinot Noir 2019 | 3

Q: How many bottles do I have?
Ask Func[inventory]:
Func[inventory] says: {"Syrah 2017": 2, "Cava 2021": 10}
A: You have 12 bottles:
- Syrah 2017: 2
- Cava 2021: 10""", [
    _cellar_case("Show me my wine cellar", 0),
    _cellar_case("List my wines as a table", 1),
    _cellar_case("What wines do I have?", 2),
], funcs={"inventory": inventory})

LISTS = {"groceries": "eggs, spinach, oat milk, rye bread", "hardware": "nails, wood glue",
         "party": "balloons, candles, lemonade"}


@command
def shopping_list(name: str) -> str:
    """The items on one of the user's shopping lists."""
    items = LISTS.get(name.strip().lower())
    if items is None:
        raise InvalidInput(f"no list named {name!r}: the lists are {', '.join(LISTS)}")
    return items


LISTS_AGENT = BenchAgent("lists", "multi-line", "I read out the user's shopping lists.", """
Q: What's on my camping list?
Ask Func[shopping_list]: camping
Func[shopping_list] says: tent, matches, torch
A: Your camping list:
- tent
- matches
- torch""", [
    Case("What's on my groceries list?", (func("shopping_list", "groceries"),),
         must=("eggs", "spinach", "oat milk", "rye bread")),
    Case("Read me the hardware list", (func("shopping_list", "hardware"),),
         must=("nails", "wood glue")),
    Case("What do I need for the party?", (func("shopping_list", "party"),),
         must=("balloons", "candles", "lemonade")),
], funcs={"shopping_list": shopping_list})


@command
def local_time() -> str:
    """The user's local date and time."""
    return "Saturday June 7 2025 10:42 AM"


CLOCK = BenchAgent("clock", "single Func", "I tell the user's local date and time.", """
Q: What day is it?
Func[local_time] says: Wednesday March 5 2025 09:12 AM
A: It is Wednesday, March 5.

Q: What time is it?
Func[local_time] says: Monday January 13 2025 04:05 PM
A: It is 4:05 PM.""", [
    Case("What's the date today?", (func("local_time", ""),), must=("June", "7")),
    Case("What time is it now?", (func("local_time", ""),), must=("10:42",)),
    Case("Is it the weekend?", (func("local_time", ""),), must=("Saturday",)),
    Case("Which day of the week is it?", (func("local_time", ""),), must=("Saturday",)),
    Case("What is the time?", (func("local_time", ""),), must=("10:42",)),
    Case("What month is it?", (func("local_time", ""),), must=("June",)),
], funcs={"local_time": local_time})


@command
def calc(expression: str) -> str:
    """Evaluate an arithmetic expression of numbers, + - * / ( ) and %."""
    text = expression.replace("%", "/100").replace("x", "*").replace("^", "**")
    if not re.fullmatch(r"[\d\s.+\-*/()]+", text):
        raise InvalidInput("calc takes numbers and + - * / ( ) %")
    result = eval(text, {"__builtins__": {}})  # noqa: S307 - digits and operators only
    return f"{Decimal(str(result)).quantize(Decimal('0.01')).normalize():f}"


CALCULATOR = BenchAgent("calculator", "single Func", "I do arithmetic with a calculator.", """
Q: What is 15% of 80?
Ask Func[calc]: 80 * 15%
Func[calc] says: 12
A: 15% of 80 is 12.

Q: What is 1234 times 5678?
Ask Func[calc]: 1234 * 5678
Func[calc] says: 7006652
A: 1234 times 5678 is 7006652.""", [
    Case("What is 17% of 230?", (func("calc", "re:.*(230.*17|17.*230).*"),)),
    Case("What is 345 times 67?", (func("calc", "re:.*(345.*67|67.*345).*"),)),
    Case("Divide 1000 by 8", (func("calc", "re:.*1000\\s*/\\s*8.*"),)),
    Case("What is 12.5 plus 7.25?", (func("calc", "re:.*12\\.5.*7\\.25.*|.*7\\.25.*12\\.5.*"),)),
    Case("What's 2 to the power of 10?", (func("calc", "re:.*2\\s*(\\*\\*|\\^)\\s*10.*"),)),
    Case("What is 250 minus 17.5?", (func("calc", "re:.*250\\s*-\\s*17\\.5.*"),)),
], funcs={"calc": calc})

AGENTS = [DICE, QUOTE, WEATHER, CONVERTER, CLOCK, CALCULATOR, TRIP, NOTES_AGENT, CONCIERGE,
          BOOKING, CELLAR_AGENT, LISTS_AGENT]


# -- running and scoring ------------------------------------------------------------------


def _normal(text: str) -> str:
    words = re.split(r"[\s,]+", text.strip().strip("\"'.").lower())
    out = []
    for word in filter(None, words):
        try:
            out.append(format(Decimal(word).normalize(), "f"))
        except InvalidOperation:
            out.append(word.strip("\"'"))
    return " ".join(out)


def _input_ok(expected: Call, given: str) -> bool:
    if not expected.inputs:
        return True
    for option in expected.inputs:
        if option.startswith("re:"):
            if re.fullmatch(option[3:], given.strip(), re.IGNORECASE | re.DOTALL):
                return True
        elif _normal(option) == _normal(given):
            return True
    return False


def protocol_ok(case: Case, made: Sequence[tuple[str, str | None, str]]) -> bool:
    expected = list(case.calls)
    if len(made) != len(expected):
        return False
    if not case.ordered:
        left = list(made)
        for call in expected:
            match = next((m for m in left if m[:2] == (call.kind, call.target)
                          and _input_ok(call, m[2])), None)
            if match is None:
                return False
            left.remove(match)
        return True
    return all(m[:2] == (c.kind, c.target) and _input_ok(c, m[2])
               for m, c in zip(made, expected, strict=True))


def grounded_ok(case: Case, answer: str, replies: Sequence[str], flags: Sequence[str]) -> bool:
    if flags or not replies:
        return False
    if case.must is not None:
        return all(word.lower() in answer.lower() for word in case.must)
    stated = numbers(answer)
    return all(n in stated for reply in replies for n in numbers(reply))


class Counting:
    """The provider, with its calls, tokens and time counted."""

    def __init__(self, llm: LLM) -> None:
        self.llm, self.calls, self.tokens_in, self.tokens_out, self.seconds = llm, 0, 0, 0, 0.0

    def complete(self, messages: list[ChatMessage], stop: list[str], max_tokens: int
                 ) -> Completion:
        started = time.monotonic()
        try:
            completion = self.llm.complete(messages, stop, max_tokens)
        finally:
            self.seconds += time.monotonic() - started
            self.calls += 1
        self.tokens_in += completion.input_tokens
        self.tokens_out += completion.output_tokens
        return completion


@dataclass
class Result:
    agent: str
    category: str
    query: str
    protocol: bool
    grounded: bool
    answer: str
    calls: int
    tokens_in: int
    tokens_out: int
    seconds: float
    reprompts: int
    made: list[tuple[str, str | None, str]]


def run_case(agent: BenchAgent, case: Case, llm: LLM, reprompt: bool) -> Result:
    agent.fresh()
    made: list[tuple[str, str | None, str]] = []
    replies: list[str] = []

    def call_func(name: str, text: str) -> CommandResult | str:
        result = agent.funcs[name].call(text)
        made.append(("func", name, text))
        replies.append(result.text if isinstance(result, CommandResult) else result)
        return result

    def call_agent(agent_id: str, text: str) -> CommandResult | str:
        answer = agent.agents[agent_id](text)
        made.append(("agent", agent_id, text))
        replies.append(answer)
        return answer

    if agent.agents:
        tools = [AgentTool(a) for a in agent.agents]
        components = planner_components(agent.base_prompt, agent.few_shots, tools, call_agent,
                                        reprompt_ungrounded=reprompt)
    else:
        components = code_shot_components(agent.base_prompt, agent.few_shots, call_func,
                                          reprompt_ungrounded=reprompt)
    counting = Counting(llm)
    trace: list[TraceStep] = []
    executor = Executor(components, counting, trace=trace.append, sleep=lambda _: None)
    started = time.monotonic()
    outcome = executor.run(case.query)
    if outcome.status is Status.AWAITING_INPUT:
        made.append(("user", None, outcome.text))
        replies.append(case.user_answer or "")
        if case.user_answer is not None and outcome.state is not None:
            outcome = executor.resume(outcome.state, case.user_answer)
    elapsed = time.monotonic() - started
    answer = outcome.text if outcome.status is Status.DONE else ""
    command_replies = [r for r, m in zip(replies, made, strict=True) if m[0] != "user"]
    reprompts = sum(1 for t in trace if t.type is MessageType.THOUGHT
                    and t.text.startswith("The language model's reply was not used"))
    return Result(agent.handle, agent.category, case.query, protocol_ok(case, made),
                  bool(answer) and not answer.startswith("Sorry")
                  and grounded_ok(case, answer, command_replies, outcome.flags),
                  outcome.text, counting.calls, counting.tokens_in, counting.tokens_out,
                  elapsed, reprompts, made)


def _row(label: str, results: Sequence[Result]) -> str:
    n = len(results)
    both = sum(r.protocol and r.grounded for r in results)
    return (f"| {label} | {n} | {sum(r.protocol for r in results) / n:.0%} | "
            f"{sum(r.grounded for r in results) / n:.0%} | {both / n:.0%} | "
            f"{statistics.mean(r.calls for r in results):.2f} | "
            f"{statistics.mean(r.tokens_in for r in results):.0f} / "
            f"{statistics.mean(r.tokens_out for r in results):.0f} | "
            f"{sum(r.reprompts for r in results)} | "
            f"{statistics.mean(r.seconds for r in results):.2f} |")


HEADER = ("| {0} | queries | protocol | grounded | both | LLM calls/query | tokens in / out "
          "per query | re-prompts | s/query |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|")


def report(title: str, results: Sequence[Result], verbose: bool) -> None:
    print(f"\n### {title}\n")
    print(HEADER.format("category"))
    for category in dict.fromkeys(r.category for r in results):
        print(_row(category, [r for r in results if r.category == category]))
    print(_row("**all**", results))
    if verbose:
        for r in results:
            marks = ("P" if r.protocol else "-") + ("G" if r.grounded else "-")
            print(f"  {marks} {r.agent:10} {r.query[:44]:44} calls={r.calls} made={r.made} "
                  f"-> {r.answer[:100]!r}")


def long_reply() -> str:
    """The replay's next step after the dice Func replied "3 + 3 + ... = N" (80 kB, under
    MAX_REPLY_TEXT_BYTES): its cost must grow with the reply, not its square (it took 10 s
    a step, once)."""
    terms = MAX_REPLY_TEXT_BYTES // 5
    reply = " + ".join(["3"] * terms) + f" = {3 * terms}"
    transcript = [Step(Kind.Q, "Roll 3d8"), Step(Kind.ASK_FUNC, "8 3", "roll"),
                  Step(Kind.FUNC_SAYS, reply, "roll")]
    return (f"fewshot replay after a Func reply of {len(reply) // 1000} kB: "
            f"{_seconds(parse_few_shots(DICE.few_shots), transcript):.2f} s")


WALK = ("Q: How far is the walk?\nAsk Func[distance]: the walk\n"
        "Func[distance] says: {legs}\nA: The walk is {legs}.")


def repetitive_reply() -> str:
    """The replay's next step after a Func replied 1,000 x "10 miles" where its few-shot
    replied 200 x "5 miles": difflib's alignment of repetitive words grows with their cube,
    so the replay aligns MAX_ALIGNED pairs of words at most (it took 3.0 s a step before)."""
    reply = " ".join(["10 miles"] * 1000)
    transcript = [Step(Kind.Q, "How far is the walk?"),
                  Step(Kind.ASK_FUNC, "the walk", "distance"), Step(Kind.FUNC_SAYS, reply, "distance")]
    walk = parse_few_shots(WALK.format(legs=" ".join(["5 miles"] * 200)))
    return (f'fewshot replay after a Func reply of 1,000 x "10 miles" ({len(reply) / 1000:.0f} kB) '
            f'to a few-shot\'s 200 x "5 miles": {_seconds(walk, transcript):.2f} s (3.0 s with '
            "its alignment unbounded)")


def _seconds(few_shots: Sequence[FewShot], transcript: Sequence[Step]) -> float:
    """The seconds of the replay's next step."""
    started = time.perf_counter()
    next_lines(few_shots, transcript)
    return time.perf_counter() - started


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reprompt", choices=("off", "on", "both"), default="both",
                        help="the grounding check's re-prompt, for the openai provider runs")
    parser.add_argument("--only", help="comma-separated agent handles")
    parser.add_argument("--verbose", action="store_true", help="one line per query")
    args = parser.parse_args(argv)
    agents = [a for a in AGENTS if not args.only or a.handle in args.only.split(",")]
    print(f"Code Shot benchmark: {len(agents)} agents, "
          f"{sum(len(a.cases) for a in agents)} queries.")
    runs: list[tuple[str, LLM, bool]] = [("fewshot (offline replay)", FewShotLLM(), False)]
    if os.environ.get("CODESHOT_OPENAI_BASE_URL"):
        settings = Settings(llm="openai")
        for reprompt in {"off": [False], "on": [True], "both": [False, True]}[args.reprompt]:
            label = (f"openai {settings.llm_model} ({settings.openai_endpoint}) at "
                     f"{settings.openai_base_url}, grounding re-prompt {'on' if reprompt else 'off'}")
            runs.append((label, get_llm(settings), reprompt))
    for label, llm, reprompt in runs:
        results = [run_case(agent, case, llm, reprompt) for agent in agents for case in agent.cases]
        report(label, results, args.verbose)
        if isinstance(llm, FewShotLLM):
            print(f"\n{long_reply()}\n{repetitive_reply()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
