"""A dice roller: the platform's LLM turns "roll two six-sided dice" into ``2d6``, and the
Func does the rolling, so the numbers are real and the LLM never invents them."""

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
Ask Func[roll]: 2d6
Func[roll] says: 3 + 5 = 8
A: You rolled 3 + 5 = 8.
"""

agent = CodeShotAgent(BASE_PROMPT, FEW_SHOTS)
# Bounded repeats: a long run of digits or letters costs no more than a short one.
DICE = re.compile(r"(\d{1,6}|an?|one)?\s{0,3}d\s{0,3}(\d{1,6})", re.IGNORECASE)
# "a twenty-sided die", "two 6-sided dice": how people say it (and what the offline
# replay passes on, where a model would have written 1d20)
SIDED = re.compile(r"(?:\b(\w{1,12})\s{1,3})?\b(\w{1,12})[ -]sided\s+dic?e\b",
                   re.IGNORECASE)
WORDS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
         "seven": 7, "eight": 8, "nine": 9, "ten": 10, "twelve": 12, "twenty": 20,
         "hundred": 100}


def number(word: str) -> int | None:
    """A count or a number of sides, in digits or in words (None: neither)."""
    return int(word) if word.isdecimal() else WORDS.get(word.lower())


def dice_asked(text: str) -> tuple[int, int] | None:
    """(count, sides) of the dice ``text`` asks for, or None."""
    if match := DICE.search(text):
        return number(match.group(1) or "1") or 0, int(match.group(2))
    if match := SIDED.search(text):
        # a word before that is no number ("roll six-sided dice"): one die
        count, sides = number(match.group(1) or "1"), number(match.group(2))
        if sides is not None:
            return 1 if count is None else count, sides
    return None


@agent.register_func
def roll(query: Message) -> str:
    """Roll dice written as NdM or "N M-sided dice" (up to 100 dice of up to 1000 sides)."""
    asked = dice_asked(query.text)
    if asked is None:
        return f"I can't read {query.text!r} as dice; write them like 2d6."
    count, sides = asked
    if not (1 <= count <= 100 and 2 <= sides <= 1000):
        return "I roll 1 to 100 dice of 2 to 1000 sides."
    dice = [random.randint(1, sides) for _ in range(count)]  # noqa: S311 - dice, not keys
    return str(dice[0]) if count == 1 else f"{' + '.join(map(str, dice))} = {sum(dice)}"
