# Two commands for a fresh clone: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
RUN_STAMP := $(VENV)/.installed-run
HOST ?= 127.0.0.1
PORT ?= 50051

.PHONY: run test lint typecheck unit proto proto-check buf-lint deploy-check bench soak clean
BUF = $(PYTHON) scripts/buf.py

# The project with its development tools (lint, type check, tests, benchmarks).
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install --quiet --upgrade pip
	@$(BIN)/python -m pip install --quiet -e '.[dev,tracing]'
	@touch $(STAMP)

# The project alone, for `make run`: a first start does not wait for the development tools
# (nothing to install when they are already there).
$(RUN_STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@if [ ! $(STAMP) -nt pyproject.toml ]; then \
		$(BIN)/python -m pip install --quiet --upgrade pip && \
		$(BIN)/python -m pip install --quiet -e . ; \
	fi
	@touch $(RUN_STAMP)

run: $(RUN_STAMP)
	@echo "npu-config-resolver: serving gRPC on $(HOST):$(PORT) (built-in defaults; Ctrl-C to stop)"
	@exec $(BIN)/npu-resolve serve --host $(HOST) --port $(PORT)

lint: $(STAMP)
	$(BIN)/ruff check resolver server client tests scripts benchmarks
	$(BIN)/ruff format --check resolver server client tests scripts benchmarks

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/python -m pytest

test: lint typecheck buf-lint proto-check unit

proto: $(STAMP)
	$(BIN)/python scripts/gen_proto.py

proto-check: $(STAMP)
	$(BIN)/python scripts/gen_proto.py --check

buf-lint:
	$(BUF) lint
	$(BUF) format --diff --exit-code --path proto/npu

bench: $(STAMP)
	$(BIN)/python benchmarks/run.py $(if $(FULL),--full,)

soak: $(STAMP)
	$(BIN)/python -m pytest -m 'soak or not soak' --record-figures -p no:randomly tests/reliability

deploy-check: $(STAMP)
	bash scripts/deploy_tools.sh >/dev/null
	$(BIN)/python -m pytest tests/test_deploy.py

clean:
	rm -rf $(VENV) .tools build *.egg-info .mypy_cache .ruff_cache .pytest_cache
