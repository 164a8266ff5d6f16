"""`make rehearse` end to end: the synthesized app stands up from cdk.out and passes its
checks, and it fails, naming what is wrong, when a function lacks a permission it uses,
an environment variable it reads, or a module it imports (each broken in a copy of the
real assembly, as a bad change to infra/ or the bundling would break it)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from infra.rehearsal.assembly import RehearsalError
from infra.rehearsal.checks import run_checks
from infra.rehearsal.main import standing, synthesize

# A rehearsal deploys four stacks and runs a dozen function processes: minutes, not seconds.
pytestmark = [pytest.mark.timeout(900), pytest.mark.slow]

API = "handlers.api.handler"
RUNNER = "handlers.runner.handler"


@pytest.fixture(scope="module")
def assembly(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The app synthesized as `make rehearse` does (this machine's wheels, bundled)."""
    outdir = tmp_path_factory.mktemp("rehearsal") / "cdk.out"
    synthesize(outdir)
    return outdir


def broken_copy(assembly: Path, target: Path, copy_assets: tuple[str, ...] = ()) -> Path:
    """The assembly's manifests and templates copied (to edit), assets linked, except
    ``copy_assets`` (copied, to edit)."""
    target.mkdir()
    for item in assembly.iterdir():
        if item.name.startswith("asset."):
            if item.name in copy_assets:
                shutil.copytree(item, target / item.name, symlinks=True)
            else:
                (target / item.name).symlink_to(item, target_is_directory=True)
        elif item.is_file():
            shutil.copy2(item, target / item.name)
    return target


def platform_template(outdir: Path) -> dict:
    return json.loads((outdir / "Codeshot.template.json").read_text())


def save(outdir: Path, template: dict) -> None:
    (outdir / "Codeshot.template.json").write_text(json.dumps(template))


def function(template: dict, handler: str = API) -> tuple[str, dict]:
    (found,) = [(k, r) for k, r in template["Resources"].items()
                if r["Type"] == "AWS::Lambda::Function" and r["Properties"]["Handler"] == handler]
    return found


def rehearse(outdir: Path, tmp_path: Path) -> str:
    with standing(outdir, tmp_path / "logs") as rehearsal:
        return run_checks(rehearsal)


def test_the_rehearsal_passes_and_reports(assembly, tmp_path):
    report = rehearse(assembly, tmp_path)
    for check in ("agent stacks registered", "codeshot chat: Roll a d20",
                  "fixieai 1.0.4 Session.query", "user storage from an agent",
                  "embed upload and download", "a deleted user's erasure (the eraser)",
                  "MCP server as an agent, asked over /mcp",
                  "agent redeploy", "cdk destroy"):
        assert f"| {check}" in report
    assert "## AWS calls per query" in report and "## Cold starts" in report
    for function in ("api", "runner", "register", "agent:notes"):
        assert f"| {function} | python" in report  # a cold start measured for each


def test_a_permission_the_code_uses_is_missing(assembly, tmp_path):
    outdir = broken_copy(assembly, tmp_path / "out")
    template = platform_template(outdir)
    role = function(template)[1]["Properties"]["Role"]["Fn::GetAtt"][0]
    for resource in template["Resources"].values():
        if resource["Type"] == "AWS::IAM::Policy" and {"Ref": role} in resource[
                "Properties"]["Roles"]:
            for statement in resource["Properties"]["PolicyDocument"]["Statement"]:
                actions = statement["Action"]
                if isinstance(actions, list) and "dynamodb:GetItem" in actions:
                    actions.remove("dynamodb:GetItem")
    save(outdir, template)
    with pytest.raises(RehearsalError) as failure:
        rehearse(outdir, tmp_path)
    message = str(failure.value)
    assert "api may not dynamodb:GetItem on arn:aws:dynamodb:" in message
    assert ":table/Codeshot-TablesUsers" in message


def test_a_condition_of_a_grant_the_calls_do_not_meet(assembly, tmp_path):
    """The API may list the embeds bucket only under its prefixes (``s3:prefix``): with
    the condition narrowed to another prefix, the embed store's listing is refused and the
    rehearsal says so (moto's evaluator, which it used before, passed any StringLike)."""
    outdir = broken_copy(assembly, tmp_path / "out")
    template = platform_template(outdir)
    narrowed = 0
    for resource in template["Resources"].values():
        if resource["Type"] == "AWS::IAM::Policy":
            for statement in resource["Properties"]["PolicyDocument"]["Statement"]:
                like = statement.get("Condition", {}).get("StringLike", {})
                if "s3:prefix" in like:
                    like["s3:prefix"], narrowed = ["elsewhere/*"], narrowed + 1
    assert narrowed
    save(outdir, template)
    with pytest.raises(RehearsalError) as failure:
        rehearse(outdir, tmp_path)
    assert "api may not s3:ListBucket on arn:aws:s3:::codeshot-embedsbucket" in \
        str(failure.value)


def test_an_environment_variable_the_code_reads_is_missing(assembly, tmp_path):
    outdir = broken_copy(assembly, tmp_path / "out")
    template = platform_template(outdir)
    del function(template)[1]["Properties"]["Environment"]["Variables"][
        "CODESHOT_USERS_TABLE"]
    save(outdir, template)
    with pytest.raises(RehearsalError) as failure:
        rehearse(outdir, tmp_path)
    # Without it the API falls back to the local default name, which its role (rightly)
    # cannot touch: the deploy would be broken, and the rehearsal says where.
    assert "api may not dynamodb:GetItem on arn:aws:dynamodb:us-east-1:123456789012:" \
           "table/codeshot-users" in str(failure.value)


def test_a_module_the_code_imports_is_missing(assembly, tmp_path):
    code = function(platform_template(assembly), RUNNER)[1]["Properties"]["Code"]
    asset = "asset." + code["S3Key"].removesuffix(".zip")
    outdir = broken_copy(assembly, tmp_path / "out", copy_assets=(asset,))
    shutil.rmtree(outdir / asset / "httpx")
    with pytest.raises(RehearsalError) as failure:
        rehearse(outdir, tmp_path)
    message = str(failure.value)
    assert "runner: ModuleNotFoundError: No module named 'httpx'" in message
