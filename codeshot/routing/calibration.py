"""How each embedder's scores are fused and where its no-agent floor lies.

Chosen on the dev split of ``benchmarks/router_corpus.json`` (``python -m
benchmarks.router --calibrate`` prints them): the dense weight with the best top-1, then
the floor and the no-agent margin that together decline as many no-agent queries as
possible while wrongly declining at most 3% of the answerable ones. The benchmark reports
on the test split, which took no part in choosing them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Scoring:
    dense_weight: float  # score = w * dense + (1 - w) * lexical
    floor: float  # below it no agent fits the query
    # A query whose nearest no-agent example (routing/data/no-agent.txt) is closer than
    # the agent's nearest sample by more than this does not fit it; None: not checked.
    no_agent_margin: float | None = None


CALIBRATED = {
    "hashing-v2-1024": Scoring(dense_weight=0.8, floor=0.045, no_agent_margin=0.29),
    "static-minilm-256-e43a8e0c634a": Scoring(dense_weight=0.9, floor=0.11,
                                              no_agent_margin=0.13),
    "all-MiniLM-L6-v2": Scoring(dense_weight=0.9, floor=0.135, no_agent_margin=0.01),
}
# An embedder never calibrated here (Bedrock's): the dense score leads, and nothing is
# declined unless CODESHOT_ROUTER_FLOOR sets a floor.
UNCALIBRATED = Scoring(dense_weight=0.8, floor=0.0)


def scoring_for(model_id: str, floor: float | None = None) -> Scoring:
    """The calibrated scoring; a ``floor`` given replaces the whole no-agent rule (the
    calibrated floor and margin), so ``floor=0`` never declines."""
    scoring = CALIBRATED.get(model_id, UNCALIBRATED)
    return scoring if floor is None else Scoring(scoring.dense_weight, floor)
