"""How each embedder's scores are fused and where its no-agent floor lies.

Chosen on the dev split of ``benchmarks/router_corpus.json`` (``python -m
benchmarks.router --calibrate`` prints them): the dense weight with the best top-1, and
the floor that declines as many no-agent queries as possible while wrongly declining at
most 3% of the answerable ones. The benchmark reports on the test split, which took no
part in choosing them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Scoring:
    dense_weight: float  # score = w * dense + (1 - w) * lexical
    floor: float  # below it no agent fits the query


CALIBRATED = {
    "hashing-v2-1024": Scoring(dense_weight=0.8, floor=0.057),
    "static-minilm-256-e43a8e0c634a": Scoring(dense_weight=0.9, floor=0.222),
    "all-MiniLM-L6-v2": Scoring(dense_weight=0.9, floor=0.26),
}
# An embedder never calibrated here (Bedrock's): the dense score leads, and nothing is
# declined unless CODESHOT_ROUTER_FLOOR sets a floor.
UNCALIBRATED = Scoring(dense_weight=0.8, floor=0.0)


def scoring_for(model_id: str, floor: float | None = None) -> Scoring:
    scoring = CALIBRATED.get(model_id, UNCALIBRATED)
    return scoring if floor is None else Scoring(scoring.dense_weight, floor)
