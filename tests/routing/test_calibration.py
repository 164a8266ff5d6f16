"""The shipped scoring is what calibration on the dev split chooses: a change to the
router, the embedders or the no-agent examples that moves the choice fails here until
``python -m benchmarks.router --calibrate`` is run and ``CALIBRATED`` updated."""

from __future__ import annotations

import pytest

from benchmarks.router import Cached, calibrate, embed_agents, load_corpus, make_embedder
from codeshot.routing.calibration import scoring_for

EMBEDDERS = ["hashing", "static",  # minilm needs the embeddings extra
             pytest.param("minilm", marks=pytest.mark.slow),
             pytest.param("minilm-tuned", marks=[pytest.mark.slow, pytest.mark.timeout(600)])]


@pytest.mark.parametrize("name", EMBEDDERS)
def test_calibrated_scoring_is_what_the_dev_split_chooses(name: str) -> None:
    embedder, _, why = make_embedder(name)
    if embedder is None:
        pytest.skip(why)
    agents, splits = load_corpus()
    _, chosen = calibrate(embed_agents(agents, embedder), Cached(embedder), splits["dev"],
                          verbose=False)
    assert scoring_for(embedder.model_id) == chosen
