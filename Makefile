# ddp-lab: two commands do everything on a fresh machine with Python >= 3.10.
#   make lab    create .venv, install the pinned requirements and ddp_lab, open JupyterLab
#   make test   same set-up if needed, then the unit tests and nbval over notebooks/ and solutions/

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PORT   ?= 8888
NBVAL  := --nbval --nbval-current-env --nbval-sanitize-with tests/sanitize.cfg --nbval-cell-timeout=180

.PHONY: setup lab test unit nbval notebooks exercises bench clean

setup: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 10), "ddp-lab needs Python >= 3.10"'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $(STAMP)

lab: setup
	$(BIN)/jupyter lab --ServerApp.root_dir=notebooks --port=$(PORT)

test: setup
	$(BIN)/python -m pytest -p no:cacheprovider $(NBVAL) tests notebooks solutions

unit: setup
	$(BIN)/python -m pytest -p no:cacheprovider tests

nbval: setup
	$(BIN)/python -m pytest -p no:cacheprovider $(NBVAL) notebooks solutions

# Re-produce stored outputs: run each lesson and solution top to bottom in a fresh kernel.
notebooks: setup
	$(BIN)/python tools/execute_notebooks.py notebooks/*.ipynb $(wildcard solutions/*.ipynb)

exercises: setup
	$(BIN)/python tools/make_exercises.py

bench: setup
	$(BIN)/python bench/launch.py

clean:
	rm -rf $(VENV) .pytest_cache
