import builtins
import math
from array import array

import pytest

from codeshot.models import Agent
from codeshot.routing import index as index_module
from codeshot.routing.calibration import CALIBRATED, Scoring
from codeshot.routing.embedders import HashingEmbedder, StaticEmbedder
from codeshot.routing.index import AgentIndex, with_embeddings
from codeshot.routing.router import Router
from codeshot.routing.text import terms
from codeshot.store.registry import AgentRegistry


def agent(owner, handle, queries, published=True, description="", name=""):
    return Agent(agent_id=f"{owner}/{handle}", owner=owner, handle=handle, published=published,
                 sample_queries=queries, description=description, name=name)


def indexed(*agents, embedder=None):
    e = embedder or HashingEmbedder()
    return AgentIndex([with_embeddings(a, e) for a in agents], e)


def cosine(a, b):
    return sum(x * y for x, y in zip(a, b, strict=True))


def test_hashing_embeddings_are_unit_vectors_and_deterministic():
    e = HashingEmbedder()
    m = e.embed(["roll two dice", "roll two dice", ""])
    assert len(m) == 3 and all(len(row) == e.dim for row in m)
    assert all(math.isclose(math.hypot(*row), 1.0) for row in m[:2])
    assert m[0] == m[1] and not any(m[2])


def test_hashing_matches_word_forms_and_subwords_and_ignores_stop_words():
    assert terms("What is the forecast?") == terms("forecasts") == ["forecast"]
    assert terms("Roll 3d6") == ["roll", "3d6", "3", "d", "6"]  # dice notation meets its parts
    e = HashingEmbedder()
    [translating, translation, weather, crypto, cryptocurrencies] = e.embed(
        ["translating", "translation", "weather", "crypto", "cryptocurrencies"])
    assert cosine(translating, translation) > 0.9  # one stem
    assert cosine(crypto, cryptocurrencies) > 0.05 > abs(cosine(crypto, weather))  # subwords


def test_best_agents_first_with_the_closest_sample_and_visibility():
    index = indexed(
        agent("a", "dice", ["roll a d20", "roll two dice"]),
        agent("a", "stocks", ["stock price of GOOG", "quote for AAPL"]),
        agent("b", "secret-dice", ["roll dice secretly"], published=False),
    )
    found = index.search("please roll two dice", k=5)
    assert [c.agent_id for c in found] == ["a/dice", "a/stocks"]  # b's private agent hidden
    assert found[0].matched_sample == "roll two dice" and found[0].score > found[1].score
    assert "b/secret-dice" in [c.agent_id for c in index.search("roll dice", 5, viewer="b")]
    assert index.search("anything", k=0) == []
    assert AgentIndex([], HashingEmbedder()).search("x") == []


def test_name_and_description_are_indexed():
    index = indexed(
        agent("a", "weather", ["Will it rain tomorrow?"], name="Weather",
              description="Forecasts temperature and humidity for any city."),
        agent("a", "stocks", ["Price of Apple shares"], name="Stock Quotes",
              description="Share prices and market indices."),
    )
    [best] = index.search("how humid is Oslo today?", 1)
    assert best.agent_id == "a/weather" and best.fits
    assert best.matched_sample == "Weather. Forecasts temperature and humidity for any city."
    assert index.search("market indices", 1)[0].agent_id == "a/stocks"


def test_a_word_of_the_description_weighs_more_than_the_same_word_in_a_sample():
    # Mirror images: each agent has "tide" and "ferry" once, one in its description and
    # the other in a sample. The description says what an agent is for; a sample's other
    # words (a city, a ticker) are incidental, so the lexical score weighs it more.
    tides = agent("a", "tides", ["when is the next ferry"], name="Alpha", description="Tides.")
    ferries = agent("a", "ferries", ["when is the next tide"], name="Beta",
                    description="Ferries.")
    e = HashingEmbedder()
    lexical_only = AgentIndex([with_embeddings(a, e) for a in (tides, ferries)], e,
                              Scoring(dense_weight=0.0, floor=0.0))
    for query, want in (("tide timetable", "a/tides"), ("ferries timetable", "a/ferries")):
        first, second = lexical_only.search(query, 2)
        assert first.agent_id == want and first.score > second.score > 0


def test_an_agent_does_not_win_by_its_number_of_samples():
    focused = agent("a", "dice", ["roll a die", "roll 2d6"], description="Rolls dice.")
    # One sample shares the query's words; nineteen others are about anything else.
    broad = agent("a", "assistant", [
        "roll a die for me", "weather in Paris", "translate hello to French",
        "stock price of Apple", "set a timer for ten minutes", "play some jazz",
        "what's on my calendar", "send an email to Bob", "recipe for pancakes",
        "news headlines", "convert 5 miles to km", "book a hotel in Rome",
        "flights to Tokyo", "track my package", "define serendipity",
        "turn off the lights", "tell me a joke", "who won the game", "find a sushi place",
        "how many calories in an egg"], description="Helps with everyday things.")
    index = indexed(focused, broad)
    found = index.search("roll a die for me", 2)
    assert [c.agent_id for c in found] == ["a/dice", "a/assistant"]
    # The assistant has the query word for word among its many samples, yet the agent
    # about dice wins.
    assert found[1].matched_sample == "roll a die for me"


def test_below_the_floor_no_agent_fits_and_the_closest_is_still_named():
    e = HashingEmbedder()
    index = indexed(agent("local", "dice", ["Roll a d20", "Roll 3d8"], name="Dice",
                          description="Rolls dice for games."),
                    agent("local", "clock", ["What time is it?"], name="Clock",
                          description="Tells the current time."), embedder=e)
    assert index.scoring == CALIBRATED[e.model_id] and index.scoring.floor > 0
    for text in ("hello", "what's 2+2", "write me a poem"):
        found = index.search(text, 2)
        assert len(found) == 2 and not any(c.fits for c in found), (text, found)
        assert all(c.score < index.scoring.floor for c in found)
    assert [c.fits for c in index.search("roll a d12", 2)] == [True, False]


def test_router_reloads_when_the_registry_changes_and_takes_a_floor(aws):
    registry = AgentRegistry(aws)
    e = HashingEmbedder()
    router = Router(registry, e, check_seconds=0)
    assert router.route("roll dice") == []
    registry.create(with_embeddings(agent("a", "dice", ["roll dice"]), e))
    [found] = router.route("roll dice")
    assert found.agent_id == "a/dice" and found.fits and router.floor == CALIBRATED[e.model_id].floor
    strict = Router(registry, e, check_seconds=0, floor=1.0)
    assert strict.floor == 1.0 and not strict.route("roll a die")[0].fits
    registry.delete("a/dice", owner="a")
    assert router.route("roll dice") == []


class Counted:
    """An embedder that records the texts it embeds."""

    def __init__(self, inner):
        self.inner, self.model_id, self.texts = inner, inner.model_id, []

    def embed(self, texts):
        self.texts += texts
        return self.inner.embed(texts)


def test_registering_an_agent_keeps_the_no_agent_rows_for_every_runner(aws, monkeypatch):
    """Registration embeds the no-agent examples once and keeps their rows in the
    registry: a runner container's first route then embeds only its query."""
    from codeshot.models import Principal
    from codeshot.services import Services
    from codeshot.usecases.registration import AgentFields, AgentRegistration, daily_agent_change

    services = Services(aws.replace(local_mode=True))
    AgentRegistration(services, charge=daily_agent_change).create(
        Principal(user_id="u1", username="alice"), "dice",
        AgentFields(base_prompt="I roll dice.", published=True,
                    few_shots=["Q: Roll a d20\nA: You rolled 12."]))
    monkeypatch.setattr(index_module, "_no_agent_rows", {})  # a new container
    embedder = Counted(services.embedder)
    [hello] = Router(services.registry, embedder).route("hello there, how are you today?", 1)
    assert embedder.texts == ["hello there, how are you today?"]
    assert hello.agent_id == "alice/dice" and not hello.fits  # declined as before

    # With a plain floor (CODESHOT_ROUTER_FLOOR alone) the examples are never used: a
    # registration does not embed them (82 Bedrock calls with Titan).
    monkeypatch.setattr(index_module, "_no_agent_rows", {})
    floor_only = Services(aws.replace(local_mode=True, router_floor=0.2))
    floor_only.embedder = Counted(floor_only.embedder)
    AgentRegistration(floor_only, charge=daily_agent_change).create(
        Principal(user_id="u1", username="alice"), "coin",
        AgentFields(base_prompt="I flip coins.", few_shots=["Q: Flip a coin\nA: Heads."]))
    assert floor_only.embedder.texts == ["Flip a coin"]  # the agent's own rows only


def test_a_failing_rows_cache_fails_neither_a_registration_nor_a_route(aws, monkeypatch):
    """The stored rows are a cache: when DynamoDB refuses them, registration goes on and
    a route embeds the examples itself."""
    from botocore.exceptions import ClientError

    from codeshot.routing.index import keep_no_agent_rows

    def throttled(*_: object) -> None:
        raise ClientError({"Error": {"Code": "ThrottlingException"}}, "GetItem")

    registry, embedder = AgentRegistry(aws), Counted(StaticEmbedder())
    registry.create(with_embeddings(agent("a", "dice", ["roll two dice"]), embedder))
    monkeypatch.setattr(index_module, "_no_agent_rows", {})
    monkeypatch.setattr(registry, "rows", throttled)
    keep_no_agent_rows(embedder, registry)  # no error
    [hello] = Router(registry, embedder).route("hello there, how are you today?", 1)
    assert not hello.fits and len(embedder.texts) > 80  # the examples, embedded here


def test_agents_stored_under_another_model_are_embedded_once_not_at_each_rebuild(aws):
    """Agents registered before a tuning (or an embedder change) have rows of another
    model: the router embeds them at its first build, and takes those rows at its next
    rebuilds (on every registry change) instead of embedding them again."""
    registry = AgentRegistry(aws)
    before = [agent("a", "dice", ["roll a d20", "roll two dice"]),
              agent("a", "stocks", ["stock price of GOOG"], description="Share prices.")]
    for old in before:
        registry.create(with_embeddings(old, HashingEmbedder()))
    embedder = Counted(StaticEmbedder())
    router = Router(registry, embedder, check_seconds=0, floor=0.0)  # no no-agent rows
    assert router.route("roll two dice", 1)[0].agent_id == "a/dice"
    stale_texts = [t for a in before for t in index_module.agent_texts(a)]
    assert sorted(embedder.texts) == sorted([*stale_texts, "roll two dice"])
    for rebuild in range(2):
        embedder.texts.clear()
        registry.create(with_embeddings(agent("b", f"coin{rebuild}", ["flip a coin"]),
                                        embedder.inner))  # stored under the router's model
        assert router.route("roll two dice", 1)[0].agent_id == "a/dice"
        assert embedder.texts == ["roll two dice"], rebuild  # the query alone
    # An agent whose texts changed has no rows for them yet: those are embedded.
    registry.replace(before[0].replace(sample_queries=["throw a die"]))
    embedder.texts.clear()
    assert router.route("throw a die", 1)[0].agent_id == "a/dice"
    assert sorted(embedder.texts) == sorted(["throw a die", "throw a die"])


def test_embeddings_from_another_model_are_recomputed():
    e = HashingEmbedder()
    stale = agent("a", "dice", ["roll dice"]).replace(
        embeddings=array("f", [1.0] * 16).tobytes(), embedding_model="old-model")
    [found] = AgentIndex([stale], e).search("roll dice", 1)
    assert found.score > 0.9


CORPUS = [
    agent("a", "dice", ["roll a d20", "flip a coin"], description="Rolls dice."),
    agent("a", "weather", ["weather in Paris", "will it rain"], description="Forecasts."),
    agent("a", "stocks", ["stock price of Apple"], description="Share prices."),
    agent("a", "translate", ["translate hello to French"], description="Translates text."),
    agent("b", "notes", ["save a note"], published=False, description="Keeps notes."),
]
QUERIES = ["roll two dice", "is it raining in Rome", "apple shares", "say hi in German",
           "note this down", "hello"]


def results(index, viewer="b"):
    # Agents scoring 0 tie; which of them fill the k places is arbitrary.
    return [[(c.agent_id, round(c.score, 3), c.matched_sample, c.fits)
             for c in index.search(q, 3, viewer) if c.score > 0] for q in QUERIES]


@pytest.mark.parametrize("embedder", [HashingEmbedder(), StaticEmbedder()],
                         ids=["hashing", "static: no-agent examples too"])
def test_plain_python_scores_as_numpy_does(monkeypatch, embedder):
    with_numpy = results(indexed(*CORPUS, embedder=embedder))
    assert any(not fits for found in with_numpy for *_, fits in found)
    real_import = builtins.__import__

    def no_numpy(name, *args, **kwargs):
        if name == "numpy":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_numpy)
    index = indexed(*CORPUS, embedder=embedder)
    assert type(index._scores).__name__ == "_PythonScores"
    assert results(index) == with_numpy


@pytest.mark.parametrize("dim", [96])
def test_a_large_dense_index_shortlists_without_changing_the_answer(monkeypatch, dim):
    e = HashingEmbedder(dim=dim)  # few dimensions: query vectors are dense, as minilm's
    exact = results(indexed(*CORPUS, embedder=e))
    monkeypatch.setattr(index_module, "EXACT_CELLS", 10)
    index = indexed(*CORPUS, embedder=e)
    assert results(index) == exact
    assert index._scores.projection is not None  # the shortlist came from the projection
