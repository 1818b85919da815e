# ddp-lab: two commands do everything on a fresh machine with Python >= 3.10.
#   make lab    create .venv, install the pinned requirements and ddp_lab, open JupyterLab
#   make test   same set-up if needed, then the unit tests and nbval over notebooks/ and solutions/

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PORT   ?= 8888
NBVAL  := --nbval --nbval-current-env --nbval-sanitize-with tests/sanitize.cfg --nbval-cell-timeout=180

ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)

.PHONY: setup browser lab test unit nbval gpu notebooks exercises bench clean

setup: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 10), "ddp-lab needs Python >= 3.10"'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $(STAMP)

lab: setup
	$(BIN)/jupyter lab --ServerApp.root_dir=notebooks --port=$(PORT) $(ROOT_FLAG)

# Debian's Chromium for tests/test_browser.py (needs root for apt; elsewhere the test skips, except in CI).
browser:
	@if [ -x /usr/bin/chromium ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null; \
	else echo "note: no /usr/bin/chromium and no root apt-get: the browser test will be skipped (it fails in CI)"; fi

test: setup browser
	$(BIN)/python -m pytest -p no:cacheprovider $(NBVAL) tests notebooks solutions

unit: setup
	$(BIN)/python -m pytest -p no:cacheprovider tests

nbval: setup
	$(BIN)/python -m pytest -p no:cacheprovider $(NBVAL) notebooks solutions

# On a GPU machine: the GPU suite, and artifacts/gpu-report.md for the README's Hardware section.
gpu: setup
	$(BIN)/python tools/gpu_report.py

# Re-produce stored outputs: run each lesson and solution top to bottom in a fresh kernel.
notebooks: setup
	$(BIN)/python tools/execute_notebooks.py notebooks/*.ipynb $(wildcard solutions/*.ipynb)

exercises: setup
	$(BIN)/python tools/make_exercises.py

bench: setup
	$(BIN)/python bench/launch.py

clean:
	rm -rf $(VENV) .pytest_cache
