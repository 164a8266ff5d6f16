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


TUNED_MINILM = "all-MiniLM-L6-v2-tuned"  # `codeshot router tune`'s models, whatever they saw
CALIBRATED = {
    "hashing-v2-1024": Scoring(dense_weight=0.8, floor=0.045, no_agent_margin=0.29),
    "static-minilm-256-e43a8e0c634a": Scoring(dense_weight=0.9, floor=0.11,
                                              no_agent_margin=0.13),
    "all-MiniLM-L6-v2": Scoring(dense_weight=0.9, floor=0.135, no_agent_margin=0.01),
    TUNED_MINILM: Scoring(dense_weight=0.9, floor=0.15, no_agent_margin=-0.01),
}
# An embedder never calibrated here (Bedrock's Titan, the deployed default): no floor,
# since score scales differ between models, but the no-agent examples still decline a
# query nearer one of them than to the agent's nearest row by more than 0.05 of cosine.
# On the dev split that margin alone declines 0.88 of no-agent queries for 0.025 of
# answerable ones wrongly declined with minilm, 0.69 for 0.071 with static (a weaker
# model). `python -m benchmarks.router --calibrate --embedders bedrock` measures Titan's
# own; CODESHOT_ROUTER_FLOOR and CODESHOT_ROUTER_MARGIN set what it prints.
UNCALIBRATED = Scoring(dense_weight=0.8, floor=0.0, no_agent_margin=0.05)


def model_family(model_id: str) -> str:
    """The id calibration knows the model by: a tuned minilm's id ends with its tuning's
    digest (:mod:`codeshot.routing.tune`), and every tuning shares one calibration."""
    return TUNED_MINILM if model_id.startswith(TUNED_MINILM + "-") else model_id


def scoring_for(model_id: str, floor: float | None = None,
                margin: float | None = None) -> Scoring:
    """The calibrated scoring, or the one the settings give: a ``floor`` alone replaces
    the whole no-agent rule (``floor=0`` never declines); a ``margin`` sets the no-agent
    margin, with the calibrated floor unless ``floor`` is given too."""
    scoring = CALIBRATED.get(model_family(model_id), UNCALIBRATED)
    if floor is None and margin is None:
        return scoring
    return Scoring(scoring.dense_weight, scoring.floor if floor is None else floor, margin)
