# The README's entry points. Each target sets up what it needs on a fresh clone.
PYTHON ?= python3
export JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION := 1
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
VENV ?= .venv
BIN := $(VENV)/bin

VENDOR := codeshot/api/console/static/vendor
CHROMIUM ?= /usr/bin/chromium

.PHONY: run test bench lint clean assets

# The virtualenv with an extra of codeshot-kit: `make run` needs the platform and moto
# ([local]); the other targets the whole dev set ([dev]: CDK, test and lint tools).
define install
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[$(1)]'
	touch $@
endef

$(BIN)/.installed: pyproject.toml
	$(call install,dev)

$(BIN)/.installed-local: pyproject.toml
	$(call install,local)

# The console's third-party browser files (htmx, GraphiQL, React), pinned by
# web/package-lock.json, copied into the package (and so into the wheel and the API bundle).
$(VENDOR)/versions.json: web/package.json web/package-lock.json web/vendor.mjs
	cd web && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	cd web && node vendor.mjs

assets: $(VENDOR)/versions.json  ## the console's browser files from npm

# The browser tests drive Debian's chromium (Playwright, through its executable path), and
# the README's curl examples pipe into jq: both installed here when missing (as root, or by
# sudo without a password). Where they cannot be, the tests that need them are skipped and
# say so loudly (tests/browser/conftest.py, tests/fixie/test_cli.py).
JQ ?= /usr/bin/jq
$(CHROMIUM) $(JQ):
	@if [ "$$(id -u)" = 0 ]; then sudo=; elif sudo -n true 2>/dev/null; then sudo="sudo -n"; \
	else sudo=none; fi; \
	if [ "$$sudo" != none ] && command -v apt-get >/dev/null && $$sudo apt-get update -q && \
	   $$sudo apt-get install -y -q chromium jq; then :; else \
	echo "!! $@ is missing and could not be installed (apt-get install -y chromium jq" \
	     "needs root or sudo): the tests that need it will be SKIPPED" >&2; fi

run: $(BIN)/.installed-local assets  ## the whole platform locally on moto
	$(BIN)/codeshot local up

test: $(BIN)/.installed assets $(CHROMIUM) $(JQ)  ## every test
	$(BIN)/pytest

bench: $(BIN)/.installed  ## every benchmark, printing tables (not part of the tests)
	$(BIN)/python -m benchmarks.cold_start
	$(BIN)/python -m benchmarks.cost
	$(BIN)/python -m benchmarks.load
	$(BIN)/python -m benchmarks.messages
	$(BIN)/python -m benchmarks.router
	$(BIN)/python -m benchmarks.corpus
	$(BIN)/python -m benchmarks.engine
	$(BIN)/python -m benchmarks.planner

lint: $(BIN)/.installed  ## ruff, mypy --strict (pyproject's [tool.mypy]), import-linter's layer contracts
	$(BIN)/ruff check codeshot tests handlers benchmarks infra
	$(BIN)/mypy
	$(BIN)/lint-imports

clean:
	rm -rf $(VENV) .codeshot .pytest_cache .rehearsal web/node_modules $(VENDOR)

# --- AWS deployment (infra/): `make synth` needs no AWS account, `npx cdk deploy` does ---
.PHONY: synth cdk-install rehearse lock

$(BIN)/.cdk-installed: $(BIN)/.installed pyproject.toml
	$(BIN)/python -m pip install -q -e '.[cdk]'
	touch $@

node_modules/.package-lock.json: package.json package-lock.json
	npm ci --no-audit --no-fund

cdk-install: $(BIN)/.cdk-installed node_modules/.package-lock.json  ## CDK libraries and the pinned CDK CLI

synth: cdk-install assets  ## CloudFormation templates in cdk.out, both ways, each linted (cfn-lint, cdk-nag)
	$(BIN)/python -m infra.app
	$(BIN)/python -m infra.lint cdk.out
	CDK_DISABLE_CLI_TELEMETRY=true npx --no-install cdk synth --quiet
	$(BIN)/python -m infra.lint cdk.out

rehearse: cdk-install assets  ## what `cdk deploy` would ship, run here from cdk.out with its IAM enforced (no AWS, no Docker)
	$(BIN)/python -m infra.rehearsal

lock: $(BIN)/.cdk-installed  ## re-lock each Lambda bundle's dependencies (infra/locks; uv, needs PyPI)
	$(BIN)/python -m infra.locks
