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
DICE = re.compile(r"(\d+|an?|one)?\s*d\s*(\d+)", re.IGNORECASE)


@agent.register_func
def roll(query: Message) -> str:
    """Roll dice written as NdM (up to 100 dice of up to 1000 sides)."""
    match = DICE.search(query.text)
    if not match:
        return f"I can't read {query.text!r} as dice; write them like 2d6."
    count_text, sides = match.group(1) or "1", int(match.group(2))
    count = int(count_text) if count_text.isdigit() else 1
    if not (1 <= count <= 100 and 2 <= sides <= 1000):
        return "I roll 1 to 100 dice of 2 to 1000 sides."
    dice = [random.randint(1, sides) for _ in range(count)]  # noqa: S311 - dice, not keys
    return str(dice[0]) if count == 1 else f"{' + '.join(map(str, dice))} = {sum(dice)}"
