"""``codeshot:routerModel``: a deployed platform routes with a model `codeshot router tune`
made. Its tuning and vocabulary go into every function that embeds agents or queries
(API, runner, registration), with onnxruntime; its graph is one S3 asset they read at
their first route. Corpora keep ``codeshot:embedder``. A directory that is not a tuning
fails the synth."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from infra import bundling
from infra.bundling import (
    PLATFORM_FUNCTIONS,
    REGISTER_FUNCTION,
    ROUTER_MODEL_DIR,
    RUNNER_FUNCTION,
    BundlingError,
    dir_size,
    platform_bundle,
)
from infra.settings_env import extra_env
from tests.infra.cfn import text
from tests.infra.conftest import synthesize
from tests.infra.test_bundling import dists
from tests.routing.test_tune import fake_tuning, pooled, table

HANDLERS = ("handlers.api.handler", "handlers.runner.handler", "handlers.register_agent.handler")
ROUTER_FILES = {f"{ROUTER_MODEL_DIR}/{name}" for name in ("codeshot-tuning.json", "vocab.txt")}
TITAN = "amazon.titan-embed-text-v2"


@pytest.fixture
def model(tmp_path: Path) -> Path:
    tuned = fake_tuning(tmp_path / "router-model")
    (tuned / "model.safetensors").write_bytes(b"torch weights")  # never shipped
    return tuned


def asset_hashes(synth) -> dict[str, str]:
    return {h: synth.platform.function(h)[1]["Code"]["S3Key"] for h in HANDLERS}


def embeds_with_titan(synth, handler: str) -> bool:
    return any(TITAN in r for g in synth.platform.grants(handler)
               if "bedrock:InvokeModel" in g.actions for r in g.resource_texts())


def test_each_function_that_embeds_ships_the_tuning_and_onnxruntime(model):
    for function in PLATFORM_FUNCTIONS:
        if not function.routes:  # the eraser: no tuning, nor onnxruntime
            assert platform_bundle(function, router_model=model) == platform_bundle(function)
            continue
        default = platform_bundle(function)
        tuned = platform_bundle(function, router_model=model)
        added = {d for d, _ in tuned.files} - {d for d, _ in default.files}
        assert added == ROUTER_FILES, function.name  # not the graph, nor the torch weights
        assert dists(tuned) - dists(default) >= {"onnxruntime"}
        assert "numpy" in dists(tuned)  # onnxruntime's, and the pooling's
        # Nothing else moves: what both pin, they pin alike (one resolution, seeded by
        # the function's own lock).
        assert set(default.requirements) <= set(tuned.requirements)
        assert "onnxruntime" not in dists(default) and tuned.hash != default.hash
        assert tuned.lock.path.name == f"{function.name}-router.txt"


def test_the_synth_routes_every_function_with_the_bundled_model(tmp_path, model, synth):
    tuned = synthesize(tmp_path / "out", **{"codeshot:routerModel": str(model)})
    # One copy of the graph, staged as a file asset (not in the functions' zips).
    (staged,) = tuned.outdir.glob("asset.*.onnx")
    assert staged.read_bytes() == (model / "model.onnx").read_bytes()
    bucket = '{"Fn::Sub": "cdk-hnb659fds-assets-${AWS::AccountId}-${AWS::Region}"}'
    graph = f"{bucket}/{staged.name.removeprefix('asset.')}"
    for handler in HANDLERS:
        env = tuned.platform.env(handler)
        assert env["CODESHOT_EMBEDDER"] == "minilm", handler
        assert env["CODESHOT_MINILM_MODEL"] == ROUTER_MODEL_DIR  # the bundle's, at /var/task
        assert text(env["CODESHOT_MINILM_GRAPH"]) == f"s3://{graph}"
        # it reads that object, no other
        assert (("s3:GetObject", f"arn:<AWS::Partition>:s3:::{graph}")
                in {(a, r) for g in tuned.platform.grants(handler) for a in g.actions
                    for r in g.resource_texts()}), handler
        assert env["CODESHOT_CORPUS_EMBEDDER"] == "bedrock"  # codeshot:embedder's
        # The default synth routes with codeshot:embedder and names no model.
        default = synth.platform.env(handler)
        assert default["CODESHOT_EMBEDDER"] == "bedrock"
        assert not {"CODESHOT_MINILM_MODEL", "CODESHOT_MINILM_GRAPH",
                    "CODESHOT_CORPUS_EMBEDDER"} & default.keys()
    # Other bundles: each function's asset changes with the model.
    assert not set(asset_hashes(tuned).values()) & set(asset_hashes(synth).values())
    # Titan stays granted: the runner's corpora embed with it.
    assert embeds_with_titan(tuned, "handlers.runner.handler")


def test_a_directory_that_is_not_a_tuning_fails_the_synth(tmp_path, model):
    with pytest.raises(BundlingError, match=r"codeshot:routerModel: .* is not a model "
                                            r"`codeshot router tune` made"):
        synthesize(tmp_path / "a", **{"codeshot:routerModel": str(tmp_path / "nowhere")})
    # The graph changed since the tuning, to one of the same size: its digest, read here
    # (the functions check its size alone, at their first route).
    graph = (model / "model.onnx").read_bytes()
    changed = graph.replace(np.float32(table()[4][0]).tobytes(), np.float32(1.5).tobytes())
    assert len(changed) == len(graph) and changed != graph
    (model / "model.onnx").write_bytes(changed)
    with pytest.raises(BundlingError, match=r"codeshot:routerModel: .*codeshot-tuning\.json "
                                            r"does not match .*model\.onnx \(its sha256\)"):
        synthesize(tmp_path / "c", **{"codeshot:routerModel": str(model)})
    (model / "model.onnx").write_bytes(graph)
    tuning = json.loads((model / "codeshot-tuning.json").read_text())
    (model / "codeshot-tuning.json").write_text(json.dumps(tuning | {"agents": 50}))
    with pytest.raises(BundlingError, match=r"codeshot:routerModel: .*codeshot-tuning\.json was "
                                            r"edited since `codeshot router tune` wrote it"):
        synthesize(tmp_path / "d", **{"codeshot:routerModel": str(model)})
    (model / "codeshot-tuning.json").write_text(json.dumps(tuning))
    (model / "model.onnx").unlink()  # tuned before the graph was exported
    with pytest.raises(BundlingError, match=r"codeshot:routerModel: .* has no model\.onnx: "
                                            r"tune it again"):
        synthesize(tmp_path / "b", **{"codeshot:routerModel": str(model)})
    assert not [p for out in "bcd" for p in (tmp_path / out).glob("*.template.json")]


def test_extra_env_names_the_context_keys_for_the_router_settings(tmp_path, model):
    assert extra_env({"CODESHOT_CORPUS_EMBEDDER": "static"}) == {
        "CODESHOT_CORPUS_EMBEDDER": "static"}
    with pytest.raises(ValueError, match="CODESHOT_CORPUS_EMBEDDER is set by the stack: set "
                                         "codeshot:embedder instead"):
        synthesize(tmp_path / "out", **{"codeshot:routerModel": str(model),
                                        "codeshot:extraEnv": {"CODESHOT_CORPUS_EMBEDDER":
                                                              "static"}})
    with pytest.raises(ValueError, match="CODESHOT_MINILM_GRAPH is set by the stack: set "
                                         "codeshot:routerModel instead"):
        synthesize(tmp_path / "out2", **{"codeshot:routerModel": str(model),
                                         "codeshot:extraEnv": {"CODESHOT_MINILM_GRAPH":
                                                               "s3://b/k"}})


_ROUTE_PROBE = r"""
import json, sys
sys.path[:0] = [sys.argv[1]]
from codeshot.services import Services
from codeshot.settings import Settings

services = Services(Settings())  # the function's environment, read at its cold start
vectors = services.embedder.embed(["Roll a die", "time in Tokyo?"])
print(json.dumps({"model": services.embedder.model_id, "vectors": vectors.tolist(),
                  "corpora": services.corpus_embedder.model_id,
                  "onnxruntime": sys.modules["onnxruntime"].__file__,
                  "torch": "torch" in sys.modules}))
"""


@pytest.mark.slow
@pytest.mark.timeout(600)  # installs the bundle's wheels from PyPI the first time
@pytest.mark.parametrize("function", [RUNNER_FUNCTION, REGISTER_FUNCTION], ids=lambda f: f.name)
def test_the_bundle_routes_with_the_model_from_its_own_files(function, tmp_path, model,
                                                            moto_server, monkeypatch):
    """Built for this machine (what ``codeshot:bundleTarget=host`` builds) and run as Lambda
    runs it (the bundle its working directory, the template's routing settings): the
    function reads the graph from S3 (moto's server) into its temporary directory and
    embeds queries with it, as the router would, with the bundle's onnxruntime (less what
    it prunes) and without torch; corpora embed with codeshot:embedder."""
    import boto3

    target = bundling.host_target()
    python = bundling.find_python(target.python_version)
    assert python is not None
    bundle = bundling.ensure_bundle(platform_bundle(function, target=target, router_model=model),
                                    log=lambda _msg: None)
    for name in ROUTER_FILES:
        assert (bundle / name).read_bytes() == (model / Path(name).name).read_bytes()
    assert not [p for p in (bundle / ROUTER_MODEL_DIR).iterdir() if p.name not in
                ("codeshot-tuning.json", "vocab.txt")]  # no graph, no torch weights
    assert list(bundle.glob("onnxruntime-*.dist-info"))
    assert not [p for pattern in bundling.ONNXRUNTIME_UNUSED for p in bundle.glob(pattern)]
    size, files = dir_size(bundle)
    print(f"\n{function.name} bundle with the model: {size / 1e6:.1f} MB unzipped, {files} files")
    # A bundle past Lambda's limit fails the synth, not `cdk deploy` at that function.
    with monkeypatch.context() as patch:
        patch.setattr(bundling, "LAMBDA_UNZIPPED_LIMIT", size - 1)
        with pytest.raises(BundlingError, match=rf"bundle {function.name} is .* MB unzipped: "
                                                r"Lambda takes at most"):
            bundling.ensure_bundle(platform_bundle(function, target=target, router_model=model),
                                   log=lambda _msg: None)

    s3 = boto3.client("s3", endpoint_url=moto_server.endpoint_url, region_name="us-east-1",
                      aws_access_key_id="x", aws_secret_access_key="x")
    bucket = f"assets-{function.name}"
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="graph.onnx", Body=(model / "model.onnx").read_bytes())
    env = {k: str(v) for k, v in synthesize(tmp_path / "out", **{
        "codeshot:routerModel": str(model)}).platform.env(function.handler).items()
        if k in ("CODESHOT_EMBEDDER", "CODESHOT_MINILM_MODEL", "CODESHOT_CORPUS_EMBEDDER")}
    (tmp_path / "tmp").mkdir()
    env |= {"CODESHOT_MINILM_GRAPH": f"s3://{bucket}/graph.onnx", "TMPDIR": str(tmp_path / "tmp"),
            "CODESHOT_AWS_ENDPOINT_URL": moto_server.endpoint_url}
    proc = subprocess.run(
        # -B: the bundle stays as built, as /var/task is read-only.
        [python, "-I", "-S", "-B", "-c", _ROUTE_PROBE, str(bundle)], cwd=bundle,
        env={"PATH": os.environ.get("PATH", ""), **env}, capture_output=True, text=True,
        timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["model"].startswith("all-MiniLM-L6-v2-tuned-")
    expected = np.stack([pooled("roll", "a", "die"), pooled("time", "in", "tokyo", "?")])
    assert np.abs(np.asarray(result["vectors"]) - expected).max() < 1e-5
    assert result["onnxruntime"].startswith(str(bundle)) and not result["torch"]
    assert result["corpora"] == "amazon.titan-embed-text-v2:0"
    assert [p.name for p in (tmp_path / "tmp" / "codeshot-router").iterdir()]  # fetched there
