# The two commands a new user needs (README): `make demo` and `make test`.
VENV := .venv
BIN := $(VENV)/bin
# the oldest Python supported, for `make unit-py310`: a venv of its own, without torch
VENV310 := .venv310

.PHONY: setup demo test unit unit-py310 image-test lint bench benchmarks-doc clean

setup: $(VENV)/.ready

$(VENV)/.ready: pyproject.toml scripts/setup.sh
	bash scripts/setup.sh
	touch $@

demo: setup
	PATH="$(CURDIR)/$(BIN):$$PATH" bash scripts/demo.sh

# the unit tests in a worker per core (a file's tests in one worker); the lab's one at a time, as
# they time real queues; both run, whatever the first finds. The lab's timing runs on a shared
# machine, so a lab test that fails is run once more on a fresh lab, and fails `make test` only
# if it fails again; both runs' reports stay in the output
test: setup
	$(BIN)/python -m pytest -ra -n auto --dist loadfile tests/unit; status=$$?; \
	$(BIN)/python -m pytest -ra --durations=30 tests/lab || { \
	  echo "make test: the lab tests that failed, once more, each on a fresh lab"; \
	  $(BIN)/python -m pytest -rA --lf --last-failed-no-failures none tests/lab; } || status=1; exit $$status

unit: setup
	$(BIN)/python -m pytest -ra -n auto --dist loadfile tests/unit

# the unit tests again on Python 3.10 (CI runs them after `make test`); setup brings the system
# packages some tests use. No `job` extra: the tests that need torch skip
unit-py310: setup $(VENV310)/.ready
	$(VENV310)/bin/python -m pytest -ra -n auto --dist loadfile tests/unit

$(VENV310)/.ready: pyproject.toml
	@py=; for c in $$(command -v python3.10) $$(ls -d /root/.pyenv/versions/3.10*/bin/python3.10 2>/dev/null | sort -rV); do \
	  "$$c" -c 'import ensurepip, venv' 2>/dev/null && { py=$$c; break; }; done; \
	[ -n "$$py" ] || { echo "unit-py310: no python3.10 that can make a venv, on PATH or in /root/.pyenv/versions;" \
	  "install one (Ubuntu 22.04: apt-get install python3.10-venv; elsewhere: pyenv install 3.10)" >&2; exit 1; }; \
	echo "unit-py310: a venv in $(VENV310) from $$py"; \
	[ -x $(VENV310)/bin/python ] || "$$py" -m venv $(VENV310) || exit 1; \
	$(VENV310)/bin/pip install -q --disable-pip-version-check -e '.[controller,test]'
	touch $@

# the container image (scripts/build-image.sh) built once and run with podman; apart from `test`,
# as the build alone takes a minute or two
image-test: setup
	$(BIN)/python -m pytest -ra tests/image

# both run, whatever the first finds; configuration in pyproject.toml
lint: setup
	$(BIN)/ruff check src; status=$$?; $(BIN)/mypy || status=1; exit $$status

bench: setup
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/clockfabric bench lab-bringup

# docs/benchmarks.md from the records in bench/results/
benchmarks-doc: setup
	$(BIN)/clockfabric bench report

clean:
	-$(BIN)/clockfabric lab down --all
	rm -rf $(VENV) $(VENV310) build src/*.egg-info dist
