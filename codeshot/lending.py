"""An agent lent by `codeshot serve --register`, and the record of each lending kept on
disk until it is given back: a serve killed (SIGKILL, a crash, a closed laptop) leaves
its agent lent to a URL nobody serves, and the next serve of it (or `codeshot agent
restore`) finishes the restore from that record.

Records live in ``.codeshot/lent/`` beside the local stack's local.json (else of the
working directory: :meth:`codeshot.client.Target.lending_records`), one file a lending (two
serves of one agent may lend it at once, one on top of the other), named by the platform,
the agent and the lent revision, written whole (a reader never sees half of one).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RECORDS = Path(".codeshot") / "lent"
# A temporary file this old was left by a writer killed mid-write (one writes in
# milliseconds): removed when records are read.
STALE_SECONDS = 600


@dataclass(frozen=True)
class Lent:
    """An agent that was registered already, served at ``url`` for a while: its new
    revision (current while served), the one to make current again after, what described
    it before (``restore``) and what serve_here made of that (``lent_as``; both
    DESCRIBING's fields, as AgentInput takes them). ``home_id``: the revision before any
    serve lent it (``previous_id`` unless it was lent from another serve's), described by
    ``home_restore``; the agent goes back there when the serve it was lent from stopped.
    ``back_id``: the revision give_back began making current again, with the fields the
    owner had ``changed`` then (a restore cut short after that is finished, not taken
    for a switch made meanwhile)."""

    agent_id: str
    handle: str
    url: str
    revision_id: str
    previous_id: str
    previous_url: str | None
    restore: dict[str, Any]
    lent_as: dict[str, Any]
    home_id: str
    home_url: str | None
    home_restore: dict[str, Any]
    back_id: str | None = None
    changed: list[str] = dataclasses.field(default_factory=list)


class LentRecords:
    """The lendings to the platform at ``api_url`` not given back yet, in ``directory``."""

    def __init__(self, api_url: str, directory: Path | None = None) -> None:
        self.api_url = api_url
        self.directory = directory or Path.cwd() / RECORDS
        # What the last :meth:`of` could not read (cut by a power cut, or of another
        # codeshot version's fields): "<path>: <why>", to be told, not taken for none.
        self.unreadable: list[str] = []

    def _path(self, agent_id: str, revision_id: str) -> Path:
        key = "\n".join((self.api_url, agent_id, revision_id))
        return self.directory / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.json"

    def check(self) -> None:
        """Raise OSError if no record can be written here (a read-only checkout,
        ``.codeshot`` a file, a full disk): before anything is lent."""
        self.directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix="lent.", suffix=".tmp")
        os.close(fd)
        os.unlink(tmp)

    def keep(self, lent: Lent) -> None:
        """Write (or replace) ``lent``'s record whole."""
        self.directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix="lent.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as file:
                json.dump({"api_url": self.api_url, **dataclasses.asdict(lent)}, file,
                          indent=2)
                file.flush()
                os.fsync(file.fileno())  # whole on disk before it replaces the last one
            os.replace(tmp, self._path(lent.agent_id, lent.revision_id))
        except BaseException:
            os.unlink(tmp)
            raise

    def drop(self, agent_id: str, revision_id: str) -> None:
        """The lending of ``agent_id`` at its revision ``revision_id`` is given back (or
        there is nothing left to give back)."""
        self._path(agent_id, revision_id).unlink(missing_ok=True)

    def of(self, agent_id: str) -> list[Lent]:
        """The records of ``agent_id``'s lendings, the latest first."""
        found, self.unreadable = [], []
        for tmp in self.directory.glob("lent.*.tmp"):
            with contextlib.suppress(OSError):
                if time.time() - tmp.stat().st_mtime > STALE_SECONDS:
                    tmp.unlink()
        for path in self.directory.glob("*.json"):
            try:
                record = json.loads(path.read_text())
                if not isinstance(record, dict) or (record.pop("api_url", None), record.get(
                        "agent_id")) != (self.api_url, agent_id):
                    continue  # another platform's or agent's: not ours to judge
                lent = Lent(**record)
                if lent.handle != agent_id.split("/")[1]:  # its mutations name the handle
                    raise ValueError(f"its handle {lent.handle!r} is not {agent_id}'s")
                found.append(lent)
            except FileNotFoundError:
                continue  # given back meanwhile
            except (OSError, ValueError, TypeError) as exc:
                self.unreadable.append(f"{path} ({exc})")
        return sorted(found, key=lambda lent: lent.revision_id, reverse=True)
