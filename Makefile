# The README's entry points. Each target sets up what it needs on a fresh clone.
PYTHON ?= python3
export JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION := 1
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: run test bench lint clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $@

run: $(BIN)/.installed  ## the whole platform locally on moto
	$(BIN)/codeshot local up

test: $(BIN)/.installed  ## every test
	$(BIN)/pytest

bench: $(BIN)/.installed  ## every benchmark, printing tables (not part of the tests)
	$(BIN)/python -m benchmarks.cold_start
	$(BIN)/python -m benchmarks.cost_per_query
	$(BIN)/python -m benchmarks.load
	$(BIN)/python -m benchmarks.router

lint: $(BIN)/.installed  ## ruff, mypy --strict (pyproject's [tool.mypy]), import-linter's layer contracts
	$(BIN)/ruff check codeshot tests handlers benchmarks infra
	$(BIN)/mypy
	$(BIN)/lint-imports

clean:
	rm -rf $(VENV) .codeshot .pytest_cache .rehearsal

# --- AWS deployment (infra/): `make synth` needs no AWS account, `npx cdk deploy` does ---
.PHONY: synth cdk-install rehearse lock

$(BIN)/.cdk-installed: $(BIN)/.installed pyproject.toml
	$(BIN)/python -m pip install -q -e '.[cdk]'
	touch $@

node_modules/.package-lock.json: package.json package-lock.json
	npm ci --no-audit --no-fund

cdk-install: $(BIN)/.cdk-installed node_modules/.package-lock.json  ## CDK libraries and the pinned CDK CLI

synth: cdk-install  ## CloudFormation templates in cdk.out, both ways, each linted (cfn-lint, cdk-nag)
	$(BIN)/python -m infra.app
	$(BIN)/python -m infra.lint cdk.out
	CDK_DISABLE_CLI_TELEMETRY=true npx --no-install cdk synth --quiet
	$(BIN)/python -m infra.lint cdk.out

rehearse: cdk-install  ## what `cdk deploy` would ship, run here from cdk.out with its IAM enforced (no AWS, no Docker)
	$(BIN)/python -m infra.rehearsal

lock: $(BIN)/.cdk-installed  ## re-lock each Lambda bundle's dependencies (infra/locks; uv, needs PyPI)
	$(BIN)/python -m infra.locks
