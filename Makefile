# The two commands a new user needs (README): `make demo` and `make test`.
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup demo test unit image-test lint bench benchmarks-doc clean

setup: $(VENV)/.ready

$(VENV)/.ready: pyproject.toml scripts/setup.sh
	bash scripts/setup.sh
	touch $@

demo: setup
	PATH="$(CURDIR)/$(BIN):$$PATH" bash scripts/demo.sh

# the unit tests in a worker per core (a file's tests in one worker); the lab's one at a time, as
# they time real queues; both run, whatever the first finds
test: setup
	$(BIN)/python -m pytest -ra -n auto --dist loadfile tests/unit; status=$$?; \
	$(BIN)/python -m pytest -ra --durations=30 tests/lab || status=1; exit $$status

unit: setup
	$(BIN)/python -m pytest -ra -n auto --dist loadfile tests/unit

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
	rm -rf $(VENV) build src/*.egg-info dist
