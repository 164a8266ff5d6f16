"""cfn-lint and cdk-nag on the synthesized templates, and proof both checks can fail."""

from __future__ import annotations

import json

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_s3 as s3

from infra import lint
from infra.app import cdk_json_context
from infra.nag import apply_checks

pytestmark = pytest.mark.slow


def test_cfn_lint_passes_on_every_template(synth):
    assert len(lint.templates(synth.outdir)) == 2
    assert lint.cfn_lint(synth.outdir) == []


def test_cfn_lint_reports_a_broken_template(tmp_path):
    (tmp_path / "Broken.template.json").write_text(json.dumps({"Resources": {"Fn": {
        "Type": "AWS::Lambda::Function",
        "Properties": {"Runtime": "python2.0", "Handler": "x.y", "Code": {"ZipFile": "x"},
                       "Role": "arn:aws:iam::123456789012:role/r"}}}}))
    assert any("python2.0" in p for p in lint.cfn_lint(tmp_path))


def test_cdk_nag_ran_and_left_nothing_unsuppressed(synth):
    assert lint.nag_problems(synth.outdir) == []
    reports = sorted(p.name for p in synth.outdir.glob("AwsSolutions-*-NagReport.csv"))
    assert reports == ["AwsSolutions--Codeshot-NagReport.csv",
                       "AwsSolutions--CodeshotAgent-notes-NagReport.csv"]
    suppressed = {line.split(",")[0].strip('"')
                  for r in synth.outdir.glob("*NagReport.csv")
                  for line in r.read_text().splitlines() if ',"Suppressed",' in line}
    # Exactly the accepted findings, each explained in infra/ (see the report).
    assert suppressed == {"AwsSolutions-APIG4", "AwsSolutions-IAM5", "AwsSolutions-L1",
                          "AwsSolutions-SMG4", "AwsSolutions-COG2", "AwsSolutions-COG8"}


def test_cdk_nag_fails_the_synth_on_an_unsuppressed_error(tmp_path):
    # cdk.json's @aws-cdk/core:annotationsInValidationReport turns nag errors into a failed
    # synth, so `cdk synth` / `python -m infra.app` refuse to write unsuppressed findings.
    app = App(outdir=str(tmp_path), context=cdk_json_context())
    stack = Stack(app, "Careless")
    s3.Bucket(stack, "Open")  # no TLS enforcement, no access logs
    apply_checks(app)
    with pytest.raises(RuntimeError, match="AwsSolutions-S10"):
        app.synth()
    report = (tmp_path / "AwsSolutions--Careless-NagReport.csv").read_text()
    assert "AwsSolutions-S10" in report
    (tmp_path / "Careless.template.json").write_text("{}")
    assert any("AwsSolutions-S10" in p for p in lint.nag_problems(tmp_path))
