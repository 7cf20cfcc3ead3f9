# The two commands a new user needs (README): `make demo` and `make test`.
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup demo test unit lint bench benchmarks-doc clean

setup: $(VENV)/.ready

$(VENV)/.ready: pyproject.toml scripts/setup.sh
	bash scripts/setup.sh
	touch $@

demo: setup
	PATH="$(CURDIR)/$(BIN):$$PATH" bash scripts/demo.sh

test: setup
	$(BIN)/python -m pytest -ra --durations=30

unit: setup
	$(BIN)/python -m pytest -ra tests/unit

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
	rm -rf $(VENV) build src/*.egg-info
