# The two commands a new user needs (see README.md):
#   make demo   set up the environment and run the main job
#   make test   set up the environment and run the whole test suite (CI's command)
# and, for contributors, make check (lint, the docs and the tests that need no broker, a few minutes),
# make docs (the documentation site, docs/ -> site/), make reference (docs/reference/
# written anew from the code) and, for work on the C extensions alone, make sanitize (below; make test runs it too).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: setup demo check lint docs reference test bench sanitize sanitize-if-possible clean

# setup.py and the C sources too: the optional extensions are built in place, and rebuilt when they change
$(BIN)/stream-nb: pyproject.toml setup.py stream_nb/features/_native.c stream_nb/model/_kernel.c stream_nb/events/_codec.c stream_nb/mail/_native.c
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

setup: $(BIN)/stream-nb

demo: setup
	$(BIN)/stream-nb demo

# Parallel test processes. Most of the suite's time is real brokers and worker processes waiting
# on one another (timeouts, rebalances, transactions), which overlaps well on 2 cores; the
# processes share one broker (tests/conftest.py), and loadgroup keeps a cluster's tests together.
TEST_PROCESSES ?= 3
PYTEST_PARALLEL := -n $(TEST_PROCESSES) --dist loadgroup

lint: setup
	$(BIN)/ruff check .

# The documentation site (mkdocs.yml, docs/) into site/. --strict: any warning (a broken link, a
# page left out of the navigation, an anchor that does not exist) fails the build.
# NO_MKDOCS_2_WARNING: Material 9.x prints a notice about its end of life (May 2027) at every
# build; it is not a warning of the build and would hide real ones.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir site

# docs/reference/ written anew from the code (configuration keys, commands, metrics, dead-letter
# reasons); tests/test_reference_docs.py fails when the committed pages differ from it.
reference: setup
	$(BIN)/python -m stream_nb.reference docs/reference

# The inner loop: lint, the docs, then every test that needs no Kafka broker (tests/integration holds those).
check: lint docs
	$(BIN)/python -m pytest -q -n 2 --ignore=tests/integration -m "not kafka"

# Lint, the documentation build, then the suite (its 30 slowest steps listed: the whole must stay
# within 25 minutes) and,
# beside it, the sanitizer run of the C extensions' tests where gcc's AddressSanitizer is there
# (without it that part is skipped with a line saying so; a failure under CI=true, where it is
# expected). The two run at once: most of the suite's time is brokers and workers waiting on each
# other, so the sanitizer's minutes of CPU fit in it (the suite is also held to pass beside two
# busy loops). The sanitizer's output is printed after the suite's; either failing fails the target.
test: lint docs
	@mkdir -p build
	@( $(MAKE) --no-print-directory sanitize-if-possible > build/sanitize.log 2>&1; echo $$? > build/sanitize.rc ) & \
	$(BIN)/python -m pytest $(PYTEST_PARALLEL) --durations=30; suite=$$?; \
	wait; echo "---- make sanitize-if-possible (run beside the suite) ----"; cat build/sanitize.log; \
	sanitized=$$(cat build/sanitize.rc); \
	if [ $$suite -ne 0 ] || [ $$sanitized -ne 0 ]; then echo "make test: suite exit $$suite, sanitizer exit $$sanitized" >&2; exit 1; fi

sanitize-if-possible:
	@if [ -f "$$(gcc -print-file-name=libasan.so 2>/dev/null)" ]; then $(MAKE) --no-print-directory sanitize; \
	elif [ "$$CI" = true ]; then echo "make test: gcc's libasan is missing, so the sanitizer run cannot be done" >&2; exit 1; \
	else echo "make test: sanitizer run skipped (no gcc with libasan here; the extensions are optional)"; fi

bench: setup
	$(BIN)/python benchmarks/model_throughput.py

# make sanitize: the C extensions built with AddressSanitizer and UndefinedBehaviorSanitizer
# into a scratch copy of the package (build/sanitize; the in-place .so files are not touched),
# and the native tests run on that copy. PYTHONSAFEPATH and PYTHONPATH put the copy before the
# work tree on sys.path (checked before the tests); PYTHONMALLOC=malloc lets ASan see the
# extensions' PyMem buffers; -fno-wrapv undoes Python's -fwrapv, under which UBSan does not
# check signed overflow; CI=true makes a missing extension fail, not skip, and derandomizes
# hypothesis; STREAM_NB_SANITIZED=1 has the tests over whole corpora take every 8th message
# (tests/native.py: corpus_sample). Any report stops the process (halt_on_error, no recovery),
# so pytest exits non-zero and so does the target; --capture=sys leaves the report on the
# terminal.
# The tests run in two processes (they are CPU-bound: hypothesis). Part of make test.
SANITIZE_DIR   := build/sanitize
SANITIZE_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined \
                  -fno-wrapv -g -O1
NATIVE_TESTS   := tests/test_native_codec.py tests/test_native_decoder.py tests/test_native_featurizer.py \
                  tests/test_native_kernel.py tests/test_mail_native.py tests/test_native_properties.py \
                  tests/test_native_personal.py tests/test_native_views.py
SANITIZED      := LD_PRELOAD=$$(gcc -print-file-name=libasan.so) PYTHONSAFEPATH=1 \
                  PYTHONPATH=$(SANITIZE_DIR):$(CURDIR) PYTHONMALLOC=malloc ASAN_OPTIONS=detect_leaks=0:halt_on_error=1 \
                  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 STREAM_NB_SANITIZED=1 STREAM_NB_TEST_CPU=

sanitize: setup
	rm -rf $(SANITIZE_DIR)
	mkdir -p $(SANITIZE_DIR)
	@# setup.py without pyproject.toml: build_ext runs with any setuptools
	cp setup.py $(SANITIZE_DIR)/
	cp -r stream_nb $(SANITIZE_DIR)/
	find $(SANITIZE_DIR)/stream_nb \( -name '*.so' -o -name __pycache__ \) -prune -exec rm -rf {} +
	cd $(SANITIZE_DIR) && CFLAGS="$(SANITIZE_FLAGS)" LDFLAGS="$(SANITIZE_FLAGS)" \
		$(abspath $(BIN))/python setup.py --quiet build_ext --inplace
	@# the extensions are optional (a failed compile is skipped): here all four must be there, and imported
	test $$(ls $(SANITIZE_DIR)/stream_nb/*/*.so | wc -l) -eq 4
	$(SANITIZED) $(BIN)/python -c 'import sys, stream_nb.events._codec as c, stream_nb.features._native as f, \
		stream_nb.model._kernel as k, stream_nb.mail._native as m; \
		sys.exit(any("$(SANITIZE_DIR)/" not in x.__file__ for x in (c, f, k, m)))'
	$(SANITIZED) CI=true $(BIN)/python -m pytest -q -n 2 --capture=sys -p no:cacheprovider --durations=15 $(NATIVE_TESTS)

clean:
	rm -rf $(VENV) build site *.egg-info .pytest_cache stream_nb/features/_native*.so stream_nb/model/_kernel*.so stream_nb/events/_codec*.so stream_nb/mail/_native*.so
