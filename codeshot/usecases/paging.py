"""How many items one call may list: every list the API returns comes in pages.

``after`` names the last item of the previous page (an agent id, a session handle, a
message id, an embed key); ``limit`` asks for a page size, clamped to the list's maximum.
"""

from __future__ import annotations

from dataclasses import dataclass

from codeshot.errors import InvalidInput
from codeshot.store.sessions import PAGE_READS


@dataclass(frozen=True)
class PageSize:
    default: int
    maximum: int
    reads: int = 1  # the storage reads one page may take

    def of(self, limit: int | None) -> int:
        if limit is None:
            return self.default
        if limit < 1:
            raise InvalidInput("limit must be at least 1")
        return min(limit, self.maximum)


AGENTS = PageSize(50, 100)
SESSIONS = PageSize(50, 200)
MESSAGES = PageSize(1000, 1000, PAGE_READS)  # 1 MB each
EMBEDS = PageSize(100, 1000)
