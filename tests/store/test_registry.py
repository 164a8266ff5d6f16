import struct

import pytest

from codeshot.errors import Conflict, NotFound
from codeshot.models import Agent, AgentKind, Revision
from codeshot.store.registry import AgentRegistry


def agent(owner: str, handle: str, **kw) -> Agent:
    return Agent(agent_id=Agent.make_id(owner, handle), owner=owner, handle=handle, **kw)


def test_round_trip_keeps_every_field(aws):
    reg = AgentRegistry(aws)
    vectors = struct.pack("<4f", 0.5, -1.0, 2.25, 0.0)
    created = reg.create(
        agent(
            "alice", "quotes", name="Quotes", kind=AgentKind.CODE_SHOT,
            base_prompt="I quote stocks.", few_shots=["Q: a\nA: b"],
            sample_queries=["price of GOOG?"], embeddings=vectors, embedding_model="hashing",
            func_url="https://example.com/f", published=True,
        )
    )
    got = reg.get("alice/quotes")
    assert got == created
    assert got.embeddings == vectors and got.kind is AgentKind.CODE_SHOT


def test_create_twice_is_a_conflict_and_keeps_the_first(aws):
    reg = AgentRegistry(aws)
    reg.create(agent("alice", "a", name="first"))
    with pytest.raises(Conflict):
        reg.create(agent("alice", "a", name="second"))
    assert reg.get("alice/a").name == "first"


def test_replace_requires_existing_and_renames_atomically(aws):
    reg = AgentRegistry(aws)
    with pytest.raises(NotFound):
        reg.replace(agent("alice", "ghost"))
    reg.create(agent("alice", "old"))
    reg.create(agent("alice", "taken"))
    with pytest.raises(Conflict):
        reg.replace(agent("alice", "taken"), previous_id="alice/old")
    assert reg.get("alice/old")  # nothing moved
    reg.replace(agent("alice", "new"), previous_id="alice/old")
    assert reg.get("alice/new").handle == "new"
    with pytest.raises(NotFound):
        reg.get("alice/old")


def test_only_the_owner_deletes(aws):
    reg = AgentRegistry(aws)
    reg.create(agent("alice", "a"))
    with pytest.raises(NotFound):
        reg.delete("alice/a", owner="bob")
    reg.delete("alice/a", owner="alice")
    with pytest.raises(NotFound):
        reg.get("alice/a")


def test_the_visible_listing_is_the_published_agents_and_the_viewers_own(aws):
    reg = AgentRegistry(aws)
    for i in range(7):
        reg.create(agent("alice", f"a{i}"))
    reg.create(agent("bob", "public", published=True))
    reg.create(agent("bob", "private"))
    visible = {a.agent_id for a in reg.all_agents("alice")}
    assert visible == {"bob/public"} | {f"alice/a{i}" for i in range(7)}
    assert {a.agent_id for a in reg.all_agents(None)} == {"bob/public"}


def test_rows_are_kept_in_parts_and_never_listed_as_agents(aws, monkeypatch):
    """The router's stored vectors (the no-agent examples' rows) live beside the agents:
    they round-trip whole across parts, and no agent listing, scan or lookup meets them."""
    import codeshot.store.registry as registry_module

    monkeypatch.setattr(registry_module, "ROWS_PART_BYTES", 1000)
    reg = AgentRegistry(aws)
    reg.create(agent("alice", "a", published=True))
    data = bytes(range(256)) * 10  # 2,560 bytes: three parts
    assert reg.rows("no-agent#m", "v1") is None
    reg.put_rows("no-agent#m", "v1", data)
    assert reg.rows("no-agent#m", "v1") == data and reg.rows("no-agent#n", "v1") is None
    reg.put_rows("no-agent#m", "v1", data[:10])  # rewritten shorter: the first part decides
    assert reg.rows("no-agent#m", "v1") == data[:10]

    assert [a.agent_id for a in reg.scan_all()] == ["alice/a"]
    assert [a.agent_id for a in reg.all_agents("alice")] == ["alice/a"]
    assert [a.agent_id for a in reg.listed()] == ["alice/a"]
    for key in ("#rows#no-agent#m#0", "#version"):
        with pytest.raises(NotFound):
            reg.get(key)


def test_rows_of_a_new_version_replace_the_old_in_place(aws, monkeypatch):
    """A release with a new example list rewrites the same items (nothing of the old
    list is left in the table), and a reader never gets a matrix mixing the two."""
    import codeshot.store.registry as registry_module

    monkeypatch.setattr(registry_module, "ROWS_PART_BYTES", 1000)
    reg = AgentRegistry(aws)
    reg.put_rows("k", "old", b"o" * 2500)
    assert reg.rows("k", "new") is None  # another version: not these rows
    put = reg.db.put_item
    seen: list[bytes | None] = []

    def put_watching(**kwargs: object) -> object:  # a reader between the writer's parts
        out = put(**kwargs)
        seen.append(reg.rows("k", "new") or reg.rows("k", "old"))
        return out

    monkeypatch.setattr(reg.db, "put_item", put_watching)
    reg.put_rows("k", "new", b"n" * 2500)
    assert seen[:-1] == [None, None] and seen[-1] == b"n" * 2500
    assert reg.rows("k", "old") is None
    items = reg.db.scan(TableName=reg.table_name)["Items"]
    assert sorted(i["agent_id"]["S"] for i in items) == ["#rows#k#0", "#rows#k#1", "#rows#k#2"]


def test_rows_whose_later_part_is_gone_are_not_returned(aws, monkeypatch):
    import codeshot.store.registry as registry_module

    monkeypatch.setattr(registry_module, "ROWS_PART_BYTES", 1000)
    reg = AgentRegistry(aws)
    reg.put_rows("k", "v", b"x" * 2500)
    reg.db.delete_item(TableName=reg.table_name, Key={"agent_id": {"S": "#rows#k#2"}})
    assert reg.rows("k", "v") is None  # never a truncated matrix


def test_revisions_round_trip_and_a_write_from_a_stale_read_is_a_conflict(aws):
    reg = AgentRegistry(aws)
    read = reg.create(agent("alice", "rev", func_url="https://example.com/a"))
    kept = Revision(revision_id="01REV", func_url="https://example.com/b",
                    metadata={"fixie.ai/python-cli/command": "serve"})
    written = reg.replace(read.replace(revisions=[kept], current_revision=None), read_as=read)
    assert reg.get("alice/rev") == written and written.revisions == [kept]
    # A second writer that read the agent before that write changes nothing.
    with pytest.raises(Conflict):
        reg.replace(read.replace(name="stale"), read_as=read)
    assert reg.get("alice/rev") == written
