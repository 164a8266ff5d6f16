# The README's entry points. Each target sets up what it needs on a fresh clone.
PYTHON ?= python3
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

lint: $(BIN)/.installed
	$(BIN)/ruff check codeshot tests

clean:
	rm -rf $(VENV) .codeshot .pytest_cache
