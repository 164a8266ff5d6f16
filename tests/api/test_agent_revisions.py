"""Agent revisions over GraphQL, with the operations fixieai 1.0.4's client sends (its
`fixie serve` makes one current while it runs): owner-only, bad input refused with
nothing written, and switching re-reads the handshake."""

import json

import httpx
import pytest

from codeshot.usecases.revisions import MAX_REVISIONS
from tests.api.test_fixie_compat import UPDATE_AGENT, register
from tests.conftest import code, free_port

# fixieai/client/client.py, 1.0.4: create_agent_revision, get_current_agent_revision,
# set_current_agent_revision, delete_agent_revision (the exact texts).
CREATE_REVISION = """mutation CreateAgentRevision(
    $handle: String!,
    $metadata: [RevisionMetadataKeyValuePairInput!]!,
    $makeCurrent: Boolean!,
    $externalDeployment: ExternalDeploymentInput,
    $managedDeployment: ManagedDeploymentInput,
    $reindexCorpora: Boolean!,
) {
    createAgentRevision(agentHandle: $handle, makeCurrent: $makeCurrent, revision: {
        metadata: $metadata
        externalDeployment: $externalDeployment
        managedDeployment: $managedDeployment
    }, reindexCorpora: $reindexCorpora) {
        revision {
            id
        }
    }
}"""
CURRENT_REVISION = """query GetRevisionId($agentId: String!) {
    agentById(agentId: $agentId) {
        currentRevision {
            id
        }
    }
}"""
SET_CURRENT = """mutation SetCurrentAgentRevision(
    $handle: String!,
    $currentRevisionId: ID!) {
    updateAgent(
        agentData: {
            handle: $handle,
            currentRevisionId: $currentRevisionId
        }
    ) {
        agent {
            agentId
        }
    }
}"""
DELETE_REVISION = """mutation DeleteRevision($handle: String!, $revisionId: ID!) {
    deleteAgentRevision(agentHandle: $handle, revisionId: $revisionId) {
        agent {
            agentId
        }
    }
}"""
REVISIONS = """query ($agentId: String!) { agentById(agentId: $agentId) { funcUrl queryUrl
    allRevisions { id isCurrent created metadata { key value } externalDeployment { url } }
} }"""


def create(platform, key, handle, url, make_current=True, metadata=None):
    return platform.gql(key, CREATE_REVISION, {
        "handle": handle, "makeCurrent": make_current, "reindexCorpora": False,
        "metadata": [{"key": k, "value": v} for k, v in (metadata or {}).items()],
        "externalDeployment": {"url": url}, "managedDeployment": None})


def current(platform, key, agent_id):
    return platform.gql(key, CURRENT_REVISION, {"agentId": agent_id})["data"]["agentById"][
        "currentRevision"]


def revisions(platform, key, agent_id):
    return platform.gql(key, REVISIONS, {"agentId": agent_id})["data"]["agentById"]


def test_a_revision_made_current_moves_the_agent_and_back(platform, handshake_agent):
    _, key = platform.user("rita")
    register(platform, key, handshake_agent, handle="rand")
    first = current(platform, key, "rita/rand")["id"]
    assert current(platform, key, "rita/rand")["id"] == first  # one implicit revision
    other = handshake_agent + "/yaml"  # answers the same handshake at another URL

    made = create(platform, key, "rand", other, metadata={"fixie.ai/python-cli/command":
                                                            "serve"})
    second = made["data"]["createAgentRevision"]["revision"]["id"]
    assert current(platform, key, "rita/rand")["id"] == second != first
    agent = revisions(platform, key, "rita/rand")
    assert agent["funcUrl"] == agent["queryUrl"] == other  # where the platform calls it now
    assert [(r["id"], r["isCurrent"], r["externalDeployment"]["url"])
            for r in agent["allRevisions"]] == [(first, False, handshake_agent),
                                                 (second, True, other)]
    assert agent["allRevisions"][1]["metadata"] == [
        {"key": "fixie.ai/python-cli/command", "value": "serve"}]
    # Listings (read once per registry change) say the same.
    listed = platform.gql(key, "{ allAgents { agentId currentRevision { id } } }")
    assert {"agentId": "rita/rand", "currentRevision": {"id": second}} in listed["data"][
        "allAgents"]

    # What `fixie serve` does when it stops: the previous one current, its own deleted.
    assert "errors" not in platform.gql(key, SET_CURRENT, {"handle": "rand",
                                                           "currentRevisionId": first})
    assert "errors" not in platform.gql(key, SET_CURRENT, {"handle": "rand",
                                                           "currentRevisionId": first})
    deleted = platform.gql(key, DELETE_REVISION, {"handle": "rand", "revisionId": second})
    assert deleted["data"]["deleteAgentRevision"]["agent"]["agentId"] == "rita/rand"
    agent = revisions(platform, key, "rita/rand")
    assert agent["funcUrl"] == handshake_agent
    assert [r["id"] for r in agent["allRevisions"]] == [first]
    # Deleting it again (a retry) finds nothing to delete.
    again = platform.gql(key, DELETE_REVISION, {"handle": "rand", "revisionId": second})
    assert code(again) == "NOT_FOUND"


def test_a_revision_not_made_current_changes_nothing_until_it_is(platform, handshake_agent):
    _, key = platform.user("nora")
    register(platform, key, handshake_agent, handle="rand")
    first = current(platform, key, "nora/rand")["id"]
    made = create(platform, key, "rand", handshake_agent + "/yaml", make_current=False)
    later = made["data"]["createAgentRevision"]["revision"]["id"]
    assert current(platform, key, "nora/rand")["id"] == first
    assert revisions(platform, key, "nora/rand")["funcUrl"] == handshake_agent
    platform.gql(key, SET_CURRENT, {"handle": "rand", "currentRevisionId": later})
    assert revisions(platform, key, "nora/rand")["funcUrl"] == handshake_agent + "/yaml"
    # The current revision cannot be deleted: the agent would answer nowhere.
    assert code(platform.gql(key, DELETE_REVISION, {"handle": "rand", "revisionId": later})
                ) == "INVALID_INPUT"


def test_bad_input_is_refused_and_writes_nothing(platform, handshake_agent):
    _, key = platform.user("bea")
    register(platform, key, handshake_agent, handle="rand")
    before = platform.services.registry.get("bea/rand")
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens: no handshake there
    unreachable = create(platform, key, "rand", dead)
    assert code(unreachable) == "AGENT_UNAVAILABLE"
    assert "was not made current (bea/rand answers where it did)" in unreachable["errors"][0][
        "message"]
    for url in ("ftp://example.com/agent", "http://10.0.0.7/", "not a url",
                "http://127.0.0.1/\nx"):
        assert code(create(platform, key, "rand", url)) == "INVALID_INPUT", url
    assert code(create(platform, key, "rand", handshake_agent,
                       metadata={"k": "x" * 2000})) == "INVALID_INPUT"
    assert code(create(platform, key, "nope", handshake_agent)) == "NOT_FOUND"
    assert code(platform.gql(key, SET_CURRENT, {"handle": "rand",
                                                "currentRevisionId": "01NOSUCHREVISION"})
                ) == "NOT_FOUND"
    assert code(platform.gql(key, DELETE_REVISION, {"handle": "rand",
                                                    "revisionId": "01NOSUCHREVISION"})
                ) == "NOT_FOUND"
    # Code to build (`fixie deploy` without a deployment_url) is refused, saying why.
    refused = platform.gql(key, CREATE_REVISION, {
        "handle": "rand", "makeCurrent": True, "reindexCorpora": False, "metadata": [],
        "externalDeployment": None, "managedDeployment": {"environment": "PYTHON"}})
    assert code(refused) == "INVALID_INPUT"
    assert "codeshot serve DIR --register" in refused["errors"][0]["message"]
    # A revision switch goes alone: no other field changes with it.
    both = platform.gql(key, """mutation { updateAgent(agentData: {handle: "rand",
        currentRevisionId: "x", name: "Other"}) { agent { agentId } } }""")
    assert code(both) == "INVALID_INPUT"
    # A new agent has no revision to make current (it used to be ignored silently).
    new = platform.gql(key, """mutation ($u: String!) { createAgent(agentData: {handle:
        "fresh", queryUrl: $u, currentRevisionId: "x"}) { agent { agentId } } }""",
                       {"u": handshake_agent})
    assert code(new) == "INVALID_INPUT" and "updateAgent" in new["errors"][0]["message"]
    assert platform.services.registry.get("bea/rand") == before
    assert [a.agent_id for a in platform.services.registry.scan_all()
            if a.owner == "bea"] == ["bea/rand"]


def test_only_the_owner_sees_and_changes_revisions(platform, handshake_agent):
    _, owner = platform.user("olga")
    _, other = platform.user("ivan")
    register(platform, owner, handshake_agent, handle="rand", published=True)
    mine = current(platform, owner, "olga/rand")["id"]
    # Ivan sees the published agent, not its revisions.
    assert current(platform, other, "olga/rand") is None
    assert revisions(platform, other, "olga/rand")["allRevisions"] is None
    # His own agent of the same handle is another agent: Olga's revision is not among its.
    register(platform, other, handshake_agent, handle="rand")
    assert code(platform.gql(other, SET_CURRENT, {"handle": "rand",
                                                  "currentRevisionId": mine})) == "NOT_FOUND"
    made = create(platform, other, "rand", handshake_agent + "/yaml")
    assert "errors" not in made
    # Olga's agent is as it was.
    assert current(platform, owner, "olga/rand")["id"] == mine
    assert revisions(platform, owner, "olga/rand")["funcUrl"] == handshake_agent


def test_a_rename_keeps_the_revisions(platform, handshake_agent):
    _, key = platform.user("remy")
    register(platform, key, handshake_agent, handle="rand")
    create(platform, key, "rand", handshake_agent + "/yaml")
    before = [r["id"] for r in revisions(platform, key, "remy/rand")["allRevisions"]]
    platform.gql(key, UPDATE_AGENT, {"handle": "rand", "newHandle": "dice"})
    after = revisions(platform, key, "remy/dice")["allRevisions"]
    # The implicit first revision was made real when another became current: it stays.
    assert [r["id"] for r in after] == before and after[1]["isCurrent"]


def test_multipart_requests_are_authenticated_by_the_bearer_key_only(platform,
                                                                     handshake_agent):
    """fixieai sends createAgentRevision as a multipart form, which a page on another site
    can post too: without the key in Authorization (which such a form cannot set, and no
    cookie stands for) it is refused and changes nothing."""
    _, key = platform.user("mia")
    register(platform, key, handshake_agent, handle="rand")
    before = platform.services.registry.get("mia/rand")
    operations = json.dumps({"query": CREATE_REVISION, "variables": {
        "handle": "rand", "makeCurrent": True, "reindexCorpora": False, "metadata": [],
        "externalDeployment": {"url": handshake_agent + "/yaml"}, "managedDeployment": None}})
    form = {"operations": (None, operations), "map": (None, "{}")}
    refused = httpx.post(f"{platform.url}/graphql", files=form, timeout=30).json()
    assert code(refused) == "UNAUTHENTICATED"
    assert platform.services.registry.get("mia/rand") == before
    made = httpx.post(f"{platform.url}/graphql", files=form, timeout=30,
                      headers={"Authorization": f"Bearer {key}"}).json()
    assert current(platform, key, "mia/rand")["id"] == \
        made["data"]["createAgentRevision"]["revision"]["id"]


@pytest.mark.settings(daily_agent_changes=3)
def test_revision_changes_count_against_the_daily_agent_changes(platform, handshake_agent):
    _, key = platform.user("cora")
    register(platform, key, handshake_agent, handle="rand")  # 1
    first = current(platform, key, "cora/rand")["id"]
    create(platform, key, "rand", handshake_agent + "/yaml")  # 2
    assert "errors" not in platform.gql(key, SET_CURRENT, {"handle": "rand",  # not counted
                                                           "currentRevisionId": first})
    create(platform, key, "rand", handshake_agent + "/yaml")  # 3
    before = platform.services.registry.get("cora/rand")
    assert code(create(platform, key, "rand", handshake_agent + "/yaml")) == "RATE_LIMITED"
    assert platform.services.registry.get("cora/rand") == before


def test_an_agent_keeps_at_most_its_cap_of_revisions(platform, handshake_agent):
    _, key = platform.user("kim")
    register(platform, key, handshake_agent, handle="rand")
    for _ in range(MAX_REVISIONS - 1):  # beside the one it was registered with
        assert "errors" not in create(platform, key, "rand", handshake_agent + "/yaml",
                                      make_current=False)
    before = platform.services.registry.get("kim/rand")
    over = create(platform, key, "rand", handshake_agent + "/yaml", make_current=False)
    assert code(over) == "INVALID_INPUT" and "deleteAgentRevision" in over["errors"][0][
        "message"]
    assert platform.services.registry.get("kim/rand") == before


@pytest.mark.settings(daily_agent_changes=2)
def test_switching_revisions_is_counted_apart_at_twice_the_changes(platform,
                                                                    handshake_agent):
    """Switching was never counted: past the day's changes, an owner flipped between two
    revisions without end, each switch reading a handshake and, with other corpora,
    starting an ingestion. `fixie serve`'s restore still works past the changes."""
    _, key = platform.user("flip")
    register(platform, key, handshake_agent, handle="rand")
    first = current(platform, key, "flip/rand")["id"]
    second = create(platform, key, "rand", handshake_agent + "/yaml")[
        "data"]["createAgentRevision"]["revision"]["id"]
    assert code(create(platform, key, "rand", handshake_agent + "/yml")) == "RATE_LIMITED"
    switched = [platform.gql(key, SET_CURRENT, {"handle": "rand", "currentRevisionId": r})
                for r in [first, second, first, second, first]]
    assert ["errors" in s and code(s) for s in switched] == [False] * 4 + ["RATE_LIMITED"]
    assert current(platform, key, "flip/rand")["id"] == second  # the refused one: nothing
    again = platform.gql(key, SET_CURRENT, {"handle": "rand", "currentRevisionId": second})
    assert "errors" not in again  # already current: a retry costs nothing


def keyed(platform, key, handle, url, once, metadata=None, header=False):
    """createAgentRevision under the idempotency key ``once``: as its argument, or (as a
    fixieai client whose query text is fixed sends it) in an Idempotency-Key header."""
    variables = {"handle": handle, "makeCurrent": True, "reindexCorpora": False,
                 "metadata": [{"key": k, "value": v} for k, v in (metadata or {}).items()],
                 "externalDeployment": {"url": url}, "managedDeployment": None}
    if header:
        return httpx.post(f"{platform.url}/graphql", timeout=30,
                          json={"query": CREATE_REVISION, "variables": variables},
                          headers={"Authorization": f"Bearer {key}",
                                   "Idempotency-Key": once}).json()
    query = CREATE_REVISION.replace("$reindexCorpora: Boolean!,", "$reindexCorpora: Boolean!, "
                                    "$once: String,").replace(
        "reindexCorpora: $reindexCorpora)", "reindexCorpora: $reindexCorpora, "
        "idempotencyKey: $once)")
    return platform.gql(key, query, {**variables, "once": once})


@pytest.mark.settings(daily_agent_changes=4)
@pytest.mark.parametrize("header", [False, True])
def test_a_retried_revision_is_the_one_the_first_try_made(platform, handshake_agent, header):
    """createAgentRevision sent again after a lost answer (a timeout) made a second
    revision, charged again. Under an idempotency key it is the first one; a different
    request under that key is refused and writes nothing; another key makes another."""
    _, key = platform.user(f"retry{int(header)}")
    register(platform, key, handshake_agent, handle="rand")  # change 1
    other = handshake_agent + "/yaml"
    tried = [keyed(platform, key, "rand", other, "deploy-1", {"v": "1"}, header)
             for _ in range(3)]  # change 2, once
    [made] = {t["data"]["createAgentRevision"]["revision"]["id"] for t in tried}
    agent = revisions(platform, key, f"retry{int(header)}/rand")
    assert [(r["id"], r["isCurrent"]) for r in agent["allRevisions"][1:]] == [(made, True)]
    before = platform.services.registry.get(f"retry{int(header)}/rand")
    for url, metadata in ((handshake_agent, {"v": "1"}), (other, {"v": "2"})):
        refused = keyed(platform, key, "rand", url, "deploy-1", metadata, header)
        assert code(refused) == "INVALID_INPUT" and "another URL or metadata" in \
            refused["errors"][0]["message"], refused
    assert platform.services.registry.get(f"retry{int(header)}/rand") == before
    # Another key is another revision (change 3), and the retries were not charged.
    second = keyed(platform, key, "rand", other, "deploy-2", {"v": "1"}, header)
    assert second["data"]["createAgentRevision"]["revision"]["id"] != made
    assert "errors" not in create(platform, key, "rand", other)  # change 4
    assert len(revisions(platform, key, f"retry{int(header)}/rand")["allRevisions"]) == 4


def test_a_retry_at_the_most_revisions_is_the_one_made(platform, handshake_agent):
    """The retry of the revision that reached an agent's cap is that revision, not
    refused for the cap it reached."""
    _, key = platform.user("capped")
    register(platform, key, handshake_agent, handle="rand")
    for _ in range(MAX_REVISIONS - 2):
        create(platform, key, "rand", handshake_agent + "/yaml", make_current=False)
    first = keyed(platform, key, "rand", handshake_agent + "/yaml", "last")
    again = keyed(platform, key, "rand", handshake_agent + "/yaml", "last")
    assert again == first and "errors" not in first, (first, again)
    assert len(revisions(platform, key, "capped/rand")["allRevisions"]) == MAX_REVISIONS


def test_the_key_and_its_header_must_agree(platform, handshake_agent):
    _, key = platform.user("twokeys")
    register(platform, key, handshake_agent, handle="rand")
    before = platform.services.registry.get("twokeys/rand")
    query = CREATE_REVISION.replace("reindexCorpora: $reindexCorpora)",
                                    "reindexCorpora: $reindexCorpora, idempotencyKey: \"a\")")
    out = httpx.post(f"{platform.url}/graphql", timeout=30, headers={
        "Authorization": f"Bearer {key}", "Idempotency-Key": "b"}, json={
        "query": query, "variables": {
            "handle": "rand", "makeCurrent": True, "reindexCorpora": False, "metadata": [],
            "externalDeployment": {"url": handshake_agent + "/yaml"},
            "managedDeployment": None}}).json()
    assert code(out) == "INVALID_INPUT" and "differ" in out["errors"][0]["message"]
    assert platform.services.registry.get("twokeys/rand") == before


def test_fixieais_client_retries_safely_with_the_header_and_serves_as_before(
        platform, handshake_agent, fixie_python):
    """The real fixieai 1.0.4 client, unchanged: with an Idempotency-Key header added to
    its transport, create_agent_revision sent again is the same revision; without one
    (what `fixie serve` sends for each reload, at the same URL) each call makes one, and
    so does the call after the key is removed, as the README shows."""
    from tests.api.test_fixie_compat import fixieai

    _, key = platform.user("fixer")
    register(platform, key, handshake_agent, handle="rand")
    url = handshake_agent + "/yaml"
    script = ("import json\nfrom fixieai.client.client import FixieClient\nc = FixieClient()\n"
              "def make(): return c.create_agent_revision('rand', make_current=True, "
              f"metadata={{'fixie.ai/python-cli/command': 'serve'}}, external_url={url!r})\n"
              "plain = [make(), make()]\n"
              "headers = c.gqlclient.transport.headers\n"
              "headers['Idempotency-Key'] = 'deploy-7'\n"
              "keyed = [make(), make()]\n"
              "del headers['Idempotency-Key']\n"
              "print(json.dumps([plain, keyed, make()]))")
    plain, keyed_ids, after = json.loads(fixieai(fixie_python, platform, key, script))
    assert plain[0] != plain[1] and keyed_ids[0] == keyed_ids[1] not in plain
    assert after not in [*plain, keyed_ids[0]]  # a revision of its own, not the keyed one
    ids_kept = [r["id"] for r in revisions(platform, key, "fixer/rand")["allRevisions"]]
    assert ids_kept[1:] == [*plain, keyed_ids[0], after]
