# The two commands a new user needs (see README.md):
#   make demo   set up the environment and run the main job
#   make test   set up the environment and run the whole test suite
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: setup demo test bench clean

$(BIN)/stream-nb: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

setup: $(BIN)/stream-nb

demo: setup
	$(BIN)/stream-nb demo

test: setup
	$(BIN)/python -m pytest

bench: setup
	$(BIN)/python benchmarks/model_throughput.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
