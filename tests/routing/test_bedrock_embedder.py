"""Titan on Bedrock, the deployed default embedder, through botocore against a Bedrock
runtime endpoint on 127.0.0.1 (real signing, requests and error parsing). This Titan's
vectors are the static embedder's, padded to Titan's 1,024 dimensions."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from codeshot.errors import LLMError
from codeshot.routing import index as index_module
from codeshot.routing.calibration import CALIBRATED, UNCALIBRATED
from codeshot.routing.embedders import BedrockEmbedder, StaticEmbedder, get_embedder
from codeshot.routing.index import (
    AgentIndex,
    keep_no_agent_rows,
    no_agent_examples,
    with_embeddings,
)
from codeshot.routing.router import Router
from codeshot.services import Services
from codeshot.settings import Settings
from codeshot.store.registry import AgentRegistry
from tests.routing.test_static_embedder import AGENTS

MODEL = "amazon.titan-embed-text-v2:0"


class Titan:
    """Answers InvokeModel like Titan Text Embeddings v2; records the texts it embedded
    and the most requests it held at once."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.in_flight = self.most_in_flight = 0
        self.fail = False
        self._lock = threading.Lock()

    def answer(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        if self.fail:
            return 400, {"x-amzn-ErrorType": "ValidationException"}, json.dumps(
                {"message": "Malformed input request"}).encode()
        assert path == f"/model/{MODEL}/invoke", path
        with self._lock:
            self.texts.append(body["inputText"])
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        time.sleep(0.02)  # a network round trip: concurrent calls overlap
        with self._lock:
            self.in_flight -= 1
        [row] = StaticEmbedder().embed([body["inputText"]])
        vector = [2.0 * x for x in row] + [0.0] * (1024 - len(row))  # not unit length
        return 200, {}, json.dumps({"embedding": vector,
                                    "inputTextTokenCount": 5}).encode()


@pytest.fixture
def titan() -> Iterator[tuple[Titan, Settings]]:
    model = Titan()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers["Content-Length"])
            status, headers, payload = model.answer(self.path.replace("%3A", ":"),
                                                    json.loads(self.rfile.read(length)))
            self.send_response(status)
            for name, value in {"Content-Type": "application/json", **headers}.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield model, Settings(embedder="bedrock", embedding_model=MODEL,
                              aws_endpoint_url=f"http://127.0.0.1:{server.server_port}")
    finally:
        server.shutdown()
        server.server_close()


def test_titan_embeds_many_texts_concurrently_in_their_order(titan) -> None:
    model, settings = titan
    embedder = get_embedder(settings)
    texts = [f"roll {n} dice for the game" for n in range(24)]
    rows = embedder.embed(texts)
    assert sorted(model.texts) == sorted(texts) and model.most_in_flight > 1
    expected = StaticEmbedder().embed(texts)
    assert len(rows) == 24 and all(len(row) == 1024 for row in rows)
    for row, want in zip(rows, expected, strict=True):  # normalised, each its own text's
        assert row[:len(want)] == pytest.approx(want, abs=1e-6)


def test_a_titan_error_is_an_llm_error_naming_the_model(titan) -> None:
    model, settings = titan
    model.fail = True
    with pytest.raises(LLMError, match=rf"^embedding with {MODEL} failed: .*ValidationException"
                                        r".*Malformed input request"):
        BedrockEmbedder(settings).embed(["one", "two", "three"])


def test_uncalibrated_titan_still_declines_small_talk(titan) -> None:
    """Titan has no calibrated floor, but the no-agent examples still decline a greeting;
    CODESHOT_ROUTER_FLOOR=0 alone turns declining off."""
    _, settings = titan
    embedder = get_embedder(settings)
    assert embedder.model_id not in CALIBRATED
    index = AgentIndex([with_embeddings(a, embedder) for a in AGENTS], embedder)
    assert index.scoring == UNCALIBRATED
    [greeting] = index.search("hello there, nice to meet you", 1)
    assert not greeting.fits and greeting.no_agent_gap > UNCALIBRATED.no_agent_margin
    [time_in_tokyo] = index.search("what's the hour in Tokyo right now", 1)
    assert time_in_tokyo.agent_id == "local/clock" and time_in_tokyo.fits

    never = Services(settings.replace(router_floor=0.0)).router.scoring
    assert never.floor == 0 and never.no_agent_margin is None
    given = Services(settings.replace(router_floor=0.3,
                                    router_margin=0.1)).router.scoring
    assert (given.floor, given.no_agent_margin) == (0.3, 0.1)


def new_process(monkeypatch) -> None:
    """What a fresh container starts with: no rows embedded by this process."""
    monkeypatch.setattr(index_module, "_no_agent_rows", {})


def test_runner_containers_read_the_no_agent_rows_registration_kept(titan, aws, monkeypatch):
    """Each runner container used to embed the 82 no-agent examples at its first route
    (82 Titan calls); registration now keeps their rows in the registry, and a new
    container's first route costs one call: the query's. Its decisions are the same."""
    from codeshot.aws import client

    model, titan_settings = titan
    embedder = BedrockEmbedder(titan_settings, client("bedrock-runtime", titan_settings))
    registry = AgentRegistry(aws)
    for agent in AGENTS:
        registry.create(with_embeddings(agent, embedder))
    new_process(monkeypatch)
    fresh = AgentIndex(registry.scan_all(), embedder)  # embeds the examples itself

    new_process(monkeypatch)  # the register function's container
    model.texts.clear()
    keep_no_agent_rows(embedder, registry)
    assert sorted(model.texts) == sorted(no_agent_examples())
    new_process(monkeypatch)  # another one: the rows are there, nothing is embedded
    model.texts.clear()
    keep_no_agent_rows(embedder, registry)
    assert model.texts == []

    for query in ("hello there, nice to meet you", "what's the hour in Tokyo right now"):
        new_process(monkeypatch)  # a runner container's first route
        model.texts.clear()
        [routed] = Router(registry, embedder).route(query, 1)
        assert model.texts == [query]
        [expected] = fresh.search(query, 1)
        assert (routed.agent_id, routed.fits) == (expected.agent_id, expected.fits)
        assert routed.no_agent_gap == pytest.approx(expected.no_agent_gap, abs=1e-6)
    assert not Router(registry, embedder).route("hello there, nice to meet you", 1)[0].fits


@pytest.mark.slow
def test_the_benchmark_calibrates_titan(titan, monkeypatch, capsys) -> None:
    """What the README tells a deployer with Bedrock access to run: it prints Titan's
    floor and margin. This Titan's vectors are the static embedder's, so calibration must
    choose exactly the static embedder's shipped scoring."""
    from benchmarks.router import main

    _, settings = titan
    monkeypatch.setenv("CODESHOT_AWS_ENDPOINT_URL", settings.aws_endpoint_url)
    monkeypatch.setenv("CODESHOT_EMBEDDING_MODEL", MODEL)
    assert main(["--embedders", "bedrock", "--calibrate", "--sizes", "10",
                 "--queries", "5"]) == 0
    out = capsys.readouterr().out
    static = CALIBRATED[StaticEmbedder.model_id]
    assert f", {static})" in out  # (floor alone, the rule): the rule is static's
    assert "| bedrock | after | " in out
