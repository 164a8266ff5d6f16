"""A standalone (fully custom) agent: no few-shots, it answers each message itself."""

import functools
import re
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, available_timezones

from codeshot.sdk import AgentResponse, Message, StandaloneAgent

# IANA's regions of cities; the legacy names ("US/Eastern", "Brazil/East") name no city.
REGIONS = ("Africa/", "America/", "Antarctica/", "Asia/", "Atlantic/", "Australia/",
           "Europe/", "Indian/", "Pacific/")


@functools.cache
def _zones_by_city() -> dict[str, str]:
    """"tokyo" -> "Asia/Tokyo", "new york" -> "America/New_York": the IANA zones by
    their city."""
    return {name.rsplit("/", 1)[1].replace("_", " ").lower(): name
            for name in available_timezones() if name.startswith(REGIONS)}


def zone_named(text: str) -> str | None:
    """The IANA zone of a city the question names ("in Tokyo"), longest names first."""
    words = re.findall(r"[A-Za-z]+", text.lower())
    for size in (3, 2, 1):
        for start in range(len(words) - size + 1):
            zone = _zones_by_city().get(" ".join(words[start:start + size]))
            if zone:
                return zone
    return None


def handle_message(query: Message) -> AgentResponse:
    zone = zone_named(query.text)
    if zone is None:
        now = datetime.now(UTC)
        return AgentResponse(Message(f"It is {now:%H:%M} UTC on {now:%A, %d %B %Y} (name a "
                                     "city for its local time)."))
    now = datetime.now(ZoneInfo(zone))
    city = zone.rsplit("/", 1)[1].replace("_", " ")
    return AgentResponse(Message(f"It is {now:%H:%M} in {city} ({zone}, {now:%Z}) on "
                                 f"{now:%A, %d %B %Y}."))


agent = StandaloneAgent(
    handle_message, sample_queries=["What time is it?", "What's the date today?",
                                    "What time is it in Tokyo?"]
)
