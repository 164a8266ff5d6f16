"""A standalone (fully custom) agent: no few-shots, it answers each message itself."""

import functools
import re
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, available_timezones

from codeshot.sdk import AgentResponse, Message, StandaloneAgent

# IANA's regions of cities; the legacy names ("US/Eastern", "Brazil/East") name no city,
# nor do these ("Australia/South", "Australia/ACT", "America/North_Dakota/Center").
REGIONS = ("Africa/", "America/", "Asia/", "Atlantic/", "Australia/", "Europe/", "Indian/",
           "Pacific/")
NOT_CITIES = frozenset({"north", "south", "east", "west", "center", "act", "nsw"})


@functools.cache
def _zones_by_city() -> dict[str, str]:
    """"tokyo" -> "Asia/Tokyo", "new york" -> "America/New_York": the IANA zones by
    their city (in name order: a city of two zones always gets the same one)."""
    zones: dict[str, str] = {}
    for name in sorted(available_timezones()):
        city = name.rsplit("/", 1)[-1].replace("_", " ").lower()
        if name.startswith(REGIONS) and city not in NOT_CITIES:
            zones.setdefault(city, name)
    return zones


def zone_named(text: str) -> str | None:
    """The IANA zone of the city the question names after "in", "at" or "for" ("in
    Tokyo", "in New York"): longest names first."""
    words = re.findall(r"[A-Za-z]+", text.lower())
    for i, word in enumerate(words[:-1]):
        if word not in ("in", "at", "for"):
            continue
        for size in (3, 2, 1):
            zone = _zones_by_city().get(" ".join(words[i + 1:i + 1 + size]))
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
