"""The local stack's .codeshot/local.json, which holds its first user's API key."""

from __future__ import annotations

import json
import os
import stat

from codeshot.local.stack import LocalStack


def test_local_json_is_only_ever_the_owners_and_follows_no_planted_link(tmp_path):
    """It was written at the umask (0644) and then chmodded, through a planted
    .codeshot/local.tmp symlink: the key landed in the file the link named."""
    (tmp_path / ".codeshot").mkdir()
    elsewhere = tmp_path / "readable-by-all"
    elsewhere.write_text("")
    (tmp_path / ".codeshot" / "local.tmp").symlink_to(elsewhere)
    stack = LocalStack(directory=tmp_path)
    stack.state = {"api_url": "http://127.0.0.1:8080", "api_key": "SECRET"}
    umask = os.umask(0o022)  # the usual one: new files readable by everyone
    try:
        stack._write_state()
    finally:
        os.umask(umask)
    state_file = tmp_path / ".codeshot" / "local.json"
    assert json.loads(state_file.read_text()) == stack.state
    assert stat.S_IMODE(state_file.stat().st_mode) == 0o600
    assert elsewhere.read_text() == ""
    assert sorted(p.name for p in state_file.parent.iterdir()) == ["local.json", "local.tmp"]
