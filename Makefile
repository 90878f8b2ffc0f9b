# The two commands a new user needs (see README.md):
#   make demo   set up the environment and run the main job
#   make test   set up the environment and run the whole test suite
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: setup demo test bench clean

# setup.py and the C sources too: the optional extensions are built in place, and rebuilt when they change
$(BIN)/stream-nb: pyproject.toml setup.py stream_nb/features/_native.c stream_nb/model/_kernel.c stream_nb/events/_codec.c stream_nb/mail/_native.c
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
	rm -rf $(VENV) build *.egg-info .pytest_cache stream_nb/features/_native*.so stream_nb/model/_kernel*.so stream_nb/events/_codec*.so stream_nb/mail/_native*.so
