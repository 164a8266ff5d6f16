"""A dice roller: the platform's LLM passes the dice asked for ("2d6", "two six-sided
dice") to the Func, which does the rolling, so the numbers are real and the LLM never
invents them."""

import random
import re

from codeshot.sdk import CodeShotAgent, Message

BASE_PROMPT = "I am a dice roller. I roll dice written like 2d6 (two six-sided dice) or a d20."

FEW_SHOTS = """
Q: Roll a d20
Ask Func[roll]: a d20
Func[roll] says: 17
A: You rolled 17.

Q: Roll 3d8
Ask Func[roll]: 3d8
Func[roll] says: 4 + 2 + 7 = 13
A: You rolled 4 + 2 + 7 = 13.

Q: Throw two six-sided dice
Ask Func[roll]: two six-sided dice
Func[roll] says: 3 + 5 = 8
A: You rolled 3 + 5 = 8.
"""

agent = CodeShotAgent(BASE_PROMPT, FEW_SHOTS)
# Bounded repeats: a long run of digits or letters costs no more than a short one.
DICE = re.compile(r"(?:\b(\d{1,6})\s{0,3}|\b)d\s{0,3}(\d{1,6})", re.IGNORECASE)
# "a twenty-sided die", "two 6-sided dice", "a pair of dice": how people say it (and what
# the offline replay passes on, where a model might write 1d20); dice of no sides are six
SIDED = re.compile(r"\b(?:(\w{1,12})[ -]sided\s{1,3})?dic?e\b", re.IGNORECASE)
_UNITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
          "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen",
          "eighteen", "nineteen")
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70,
         "eighty": 80, "ninety": 90}
WORDS = {**{word: n for n, word in enumerate(_UNITS)}, **_TENS, "a": 1, "an": 1,
         "hundred": 100, "pair": 2, "couple": 2, "dozen": 12}
# Words that may stand before the dice without counting them: one die ("roll d20",
# "roll the dice", as a model may pass the request on); any other word is refused, as
# "some dice" or "thirty-one dice" would otherwise quietly roll one.
NOT_COUNTS = frozenset({"roll", "throw", "toss", "the", "my", "me", "us", "please", "of",
                        "and", "then", "now", "just", "for"})


def number(word: str) -> int | None:
    """A count or a number of sides, in digits or in words (None: neither)."""
    return int(word) if word.isdecimal() else WORDS.get(word.lower())


def count_before(text: str) -> int | None:
    """The count said just before the dice ("two", "3", "a", "a pair of"; a word of
    :data:`NOT_COUNTS` or none: one), or None for any other word ("some", "a trio of")."""
    words = text.lower().split()
    if words[-2:-1] and words[-1] == "of":  # "a pair of", "a handful of"
        words.pop()
    if not words or words[-1] in NOT_COUNTS:
        return 1
    return number(words[-1])


# "a d20 3 times", "twice", "x3": the dice rolled again (so many more of them)
REPEATS = re.compile(r"\b(?:(\w{1,12})\s{1,3}times|(twice)|(thrice))\b"
                     r"|(?<![a-z])x\s{0,3}(\d{1,6})\b|\b(\d{1,6})\s{0,3}x\b", re.IGNORECASE)


def repeats(text: str) -> int | None:
    """How many times the dice are to be rolled (1 unless said), or None if unreadable."""
    match = REPEATS.search(text)
    if match is None:
        return 1
    times, twice, thrice, x, x_after = match.groups()
    return 2 if twice else 3 if thrice else int(x or x_after) if x or x_after else number(times)


def dice_asked(text: str) -> tuple[int, int] | None:
    """(count, sides) of the dice ``text`` asks for, or None."""
    count: int | None = None
    if match := DICE.search(text):
        count = int(match.group(1)) if match.group(1) else count_before(text[:match.start()])
        sides: int | None = int(match.group(2))
    elif match := SIDED.search(text):
        count, sides = count_before(text[:match.start()]), number(match.group(1) or "6")
    times = repeats(text)
    if count is None or sides is None or times is None:
        return None
    return count * times, sides


@agent.register_func
def roll(query: Message) -> str:
    """Roll dice written as NdM, "N M-sided dice" or "N dice" (six-sided), N in digits or
    words ("two", "a pair of", "a dozen"), perhaps "twice" or "3 times"; up to 100 dice of
    up to 1000 sides."""
    asked = dice_asked(query.text)
    if asked is None:
        return f"I can't read {query.text!r} as dice; write them like 2d6."
    count, sides = asked
    if not (1 <= count <= 100 and 2 <= sides <= 1000):
        return "I roll 1 to 100 dice of 2 to 1000 sides."
    dice = [random.randint(1, sides) for _ in range(count)]  # noqa: S311 - dice, not keys
    return str(dice[0]) if count == 1 else f"{' + '.join(map(str, dice))} = {sum(dice)}"
