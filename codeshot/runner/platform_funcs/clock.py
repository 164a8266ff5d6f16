"""``fixie_local_datetime``: the user's local date and time, as Fixie 1.0 wrote it
(``Friday June 24 2022 01:55 PM UTC-08:00``), in their time-zone setting (UTC default)."""

from __future__ import annotations

from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

if TYPE_CHECKING:
    from codeshot.runner.platform_funcs import FuncContext


def local_datetime(text: str, ctx: FuncContext) -> str:
    """The input is ignored: the few-shots show this Func's result without asking it."""
    now = ctx.now().astimezone(ZoneInfo(ctx.time_zone()))
    offset = now.strftime("%z")  # +HHMM
    return f"{now:%A %B %d %Y %I:%M %p} UTC{offset[:3]}:{offset[3:]}"
