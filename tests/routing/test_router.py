import math
from array import array

from codeshot.models import Agent
from codeshot.routing.embedders import HashingEmbedder
from codeshot.routing.index import AgentIndex, with_embeddings
from codeshot.routing.router import Router
from codeshot.store.registry import AgentRegistry


def agent(owner, handle, queries, published=True, description=""):
    return Agent(agent_id=f"{owner}/{handle}", owner=owner, handle=handle, published=published,
                 sample_queries=queries, description=description)


def test_hashing_embeddings_are_unit_vectors_and_deterministic():
    e = HashingEmbedder()
    m = e.embed(["roll two dice", "roll two dice", ""])
    assert len(m) == 3 and all(len(row) == e.dim for row in m)
    assert all(math.isclose(math.hypot(*row), 1.0) for row in m[:2])
    assert m[0] == m[1] and not any(m[2])


def test_best_row_per_agent_and_visibility():
    e = HashingEmbedder()
    agents = [
        with_embeddings(agent("a", "dice", ["roll a d20", "roll two dice"]), e),
        with_embeddings(agent("a", "stocks", ["stock price of GOOG", "quote for AAPL"]), e),
        with_embeddings(agent("b", "secret-dice", ["roll dice secretly"], published=False), e),
    ]
    index = AgentIndex(agents, e)
    routes = index.search("please roll two dice", k=5)
    assert [r.agent_id for r in routes] == ["a/dice", "a/stocks"]  # b's private agent hidden
    assert routes[0].matched == "roll two dice" and routes[0].score > routes[1].score
    assert "b/secret-dice" in [r.agent_id for r in index.search("roll dice", 5, viewer="b")]
    assert index.search("anything", k=0) == []
    assert AgentIndex([], e).search("x") == []


def test_router_reloads_when_the_registry_changes(aws):
    registry = AgentRegistry(aws)
    e = HashingEmbedder()
    router = Router(registry, e, check_seconds=0)
    assert router.route("roll dice") == []
    registry.create(with_embeddings(agent("a", "dice", ["roll dice"]), e))
    assert [r.agent_id for r in router.route("roll dice")] == ["a/dice"]
    registry.delete("a/dice", owner="a")
    assert router.route("roll dice") == []


def test_embeddings_from_another_model_are_recomputed(aws):
    e = HashingEmbedder()
    stale = agent("a", "dice", ["roll dice"]).replace(
        embeddings=array("f", [1.0] * 16).tobytes(), embedding_model="old-model")
    [route] = AgentIndex([stale], e).search("roll dice", 1)
    assert route.score > 0.99
