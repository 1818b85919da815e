# ddp-lab: two commands do everything on a fresh machine with Python >= 3.11 (the pinned numpy 2.4 needs it; the package alone installs on 3.10).
#   make lab    create .venv, install the pinned requirements and ddp_lab, open JupyterLab
#   make test   same set-up if needed, then the unit tests and nbval over notebooks/ and solutions/

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PORT   ?= 8888
# Tests run in two phases: JOBS pytest-xdist workers share everything that does not time this
# machine (conftest.py keeps each notebook and each test module whole on one worker, long ones
# first), then what is marked measures_time (timings asserted against a model of this machine:
# lessons 02, 07, 11 and 13, tests/test_plan_measured.py, tests/test_load.py) runs alone, so other tests' load
# cannot skew them.
# JOBS=auto (default): a worker per usable core; JOBS=N: N workers; JOBS=0: the first phase serially in
# one process too (for debugging: one test at a time, in collection order).
JOBS   ?= auto
PYTEST := $(BIN)/python -m pytest -p no:cacheprovider
XDIST  := $(if $(filter 0,$(JOBS)),-p no:xdist,-n $(JOBS) --dist loadscope --no-loadscope-reorder)
# $(call two_phases,ARGS): both phases over ARGS; a phase that selects nothing (exit 5) is fine.
# The second phase runs even when the first failed; the result fails if either did.
# In the timing phase every zygote imports launcher/zygote.py's LEARNED_IMPORTS (torch._dynamo, ...) when it
# starts (DDP_LAB_ZYGOTE_IMPORTS, what a successor zygote gets once ranks needed them): otherwise the first
# DDP/FSDP2/DTensor launches of lessons 11 and 13 and tests/test_plan_measured.py make every rank import
# torch._dynamo, then a successor zygote imports it again in the background while later runs are timed.
# Measured on the shared 2-core machine (load 2-3), the whole timing phase: 98-116 s -> 77-83 s of CPU.
# The zygote's learning itself is tested in tests/test_cluster.py, by every test worker's own launches and by lesson
# 00b's notebook (conftest.py starts the other notebooks' kernels with the same variable).
LEARNED_IMPORTS := from ddp_lab.launcher.zygote import LEARNED_IMPORTS; print(",".join(LEARNED_IMPORTS))
two_phases = ( $(PYTEST) $(XDIST) -m "not measures_time" $(1); first=$$?; \
	{ DDP_LAB_ZYGOTE_IMPORTS="$$($(BIN)/python -c '$(LEARNED_IMPORTS)')" \
	  $(PYTEST) -p no:xdist -m measures_time $(1) || test $$? -eq 5; } && exit $$first )
NBVAL  := --nbval --nbval-current-env --nbval-sanitize-with tests/sanitize.cfg --nbval-cell-timeout=180

# torch's own requirements (its METADATA's Requires-Dist, torch 2.13), by name: pip picks versions that satisfy the
# pinned packages; setuptools, which the venv already has in an older version, is upgraded by the third install.
# tests/test_install.py checks that each is still one of torch's.
TORCH_DEPENDENCIES := filelock fsspec jinja2 networkx sympy typing-extensions

ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)

.PHONY: setup browser lab test unit nbval nbval-repeat gpu notebooks exercises bench compat clean site

setup: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "make lab and make test need Python >= 3.11 (the pinned numpy, matplotlib and Sphinx need it); on 3.10 install the package alone: pip install ."'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	@# torch, the largest wheel (about 20 s of a core to unpack and compile here), installs beside the other
	@# pinned packages and its own dependencies (TORCH_DEPENDENCIES) instead of before them; the third install
	@# adds any dependency of torch the list lacks and checks the whole set. A fresh set-up on the 2-core CI
	@# machine: 81 s -> 49 s; with torch's dependencies beside it instead of in the third install, 58 s -> 49 s.
	grep -E '^torch==' requirements.txt > $(VENV)/requirements-torch.txt
	grep -vE '^torch==' requirements.txt > $(VENV)/requirements-rest.txt
	$(BIN)/python -m pip install --quiet --no-deps -r $(VENV)/requirements-torch.txt & torch=$$!; \
	$(BIN)/python -m pip install --quiet --no-warn-conflicts -r $(VENV)/requirements-rest.txt $(TORCH_DEPENDENCIES); \
	rest=$$?; wait $$torch && test $$rest -eq 0
	$(BIN)/python -m pip install --quiet -r requirements.txt
	@# the setuptools torch requires builds ddp_lab in place (2.5 s; an isolated build fetches its own: 7 s)
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e . 2>/dev/null \
		|| $(BIN)/python -m pip install --quiet --no-deps -e .
	@# pip compiles what it installs, not the package installed in place: ddp_lab is compiled here once, so that
	@# where PYTHONDONTWRITEBYTECODE is set every process (ranks' zygotes, kernels, torchrun workers) does not
	@# compile it again (about 0.1 s each; 6 % of tests/test_cluster.py and test_plan_cli.py here). A module edited
	@# later is compiled from its source, as Python does whenever a .pyc no longer matches its source.
	$(BIN)/python -m compileall -q ddp_lab
	touch $(STAMP)

# Serves the whole course (links to ../my-work/, ../exercises/ and ../solutions/ must open) and opens on
# my-work/: tools/my_work.py first copies every lesson and exercise there (git-ignored; a copy the learner
# edited is kept, an unedited one refreshed after a git pull), so running and editing never changes a tracked
# file. Saving a course notebook keeps its stored kernel metadata (tools/jupyter-config/, a pre-save hook),
# so opening one on another Python changes nothing. JupyterLab's terminals start the learner's shell with
# .venv/bin first on PATH after its start-up files (tools/lab-terminal/shell.sh), so `python -m ddp_lab grade`
# there runs the course's Python. tests/test_browser.py runs exactly these command lines (`make -n -o setup lab`).
LAB_ENV := DDP_LAB_VENV_BIN="$(CURDIR)/$(BIN)" VIRTUAL_ENV="$(CURDIR)/$(VENV)" PATH="$(CURDIR)/$(BIN):$$PATH" \
	JUPYTER_CONFIG_PATH="$(CURDIR)/tools/jupyter-config"
lab: setup
	$(BIN)/python tools/my_work.py
	$(LAB_ENV) $(BIN)/jupyter lab --ServerApp.root_dir=. --LabApp.default_url=/lab/tree/my-work --port=$(PORT) \
		--ServerApp.terminado_settings='{"shell_command": ["$(CURDIR)/tools/lab-terminal/shell.sh"]}' $(ROOT_FLAG)

# Debian's Chromium for tests/test_browser.py and zsh for the zsh terminal test in tests/test_make_lab.py (needs
# root for apt; elsewhere those tests skip, except in CI). zsh adds about 10 s to a fresh set-up (measured here).
BROWSER_PACKAGES = $(strip $(if $(wildcard /usr/bin/chromium),,chromium) $(if $(wildcard /usr/bin/zsh),,zsh))
browser:
	@if [ -z "$(BROWSER_PACKAGES)" ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(BROWSER_PACKAGES) >/dev/null; \
	else echo "note: no $(BROWSER_PACKAGES) and no root apt-get: the browser and zsh terminal tests will be skipped (they fail in CI)"; fi

# set-up and the browser packages install side by side (pip and apt-get: on a fresh machine apt's ~10 s
# hide behind pip's ~45 s)
test:
	@$(MAKE) --no-print-directory -j2 setup browser
	$(call two_phases,--durations=25 $(NBVAL) tests notebooks solutions)

unit: setup
	$(call two_phases,tests)

nbval: setup
	$(call two_phases,$(NBVAL) notebooks solutions)

# nbval RUNS times in a row (default 3), stopping at the first failure: stored outputs must match
# on every run, not by luck. `taskset -c 0 make nbval-repeat RUNS=1` checks a 1-core machine.
RUNS ?= 3
nbval-repeat: setup
	@for run in $$(seq 1 $(RUNS)); do \
		echo "== nbval run $$run of $(RUNS)"; \
		$(call two_phases,-q $(NBVAL) notebooks solutions) || exit 1; \
	done

# On a GPU machine: the GPU suite, and artifacts/gpu-report.md for docs/hardware-and-gpu.md.
# With wheels/ (from `make gpu-wheels`) it needs no network and keeps the machine's own torch:
# a venv that sees PYTHON's packages gets everything else from wheels/ and never installs torch.
# Without wheels/ it installs the pinned requirements (torch included) with `setup`.
GPU_VENV := .venv-gpu
# extra pytest arguments, e.g. GPU_PYTEST='-k "not notebook or 11-perf or 13-plan"' to run part of the suite where
# GPU time is limited
# (the whole suite took more than 6 minutes on one H100 host: every lesson and solution notebook, 12-54 s each)
GPU_PYTEST ?=
WHEELS   := wheels

ifneq ($(wildcard $(WHEELS)/requirements.txt),)
gpu: $(GPU_VENV)/.installed
	$(GPU_VENV)/bin/python tools/gpu_report.py $(GPU_PYTEST)
else
gpu: setup
	$(BIN)/python tools/gpu_report.py $(GPU_PYTEST)
endif

# --system-site-packages shows the venv a system Python's torch; the .pth file also shows it
# the packages of a PYTHON that is itself a venv (whose own packages --system-site-packages skips).
$(GPU_VENV)/.installed: $(WHEELS)/requirements.txt pyproject.toml
	@$(PYTHON) -c 'import torch' 2>/dev/null || { echo "make gpu: $(PYTHON) cannot import torch. It uses the machine's own torch: name the Python that has it, e.g. make gpu PYTHON=/opt/conda/bin/python"; exit 1; }
	rm -rf $(GPU_VENV)
	$(PYTHON) -m venv --system-site-packages $(GPU_VENV)
	$(PYTHON) -c 'import sys; print(*(p for p in sys.path if p.endswith(("site-packages", "dist-packages"))), sep="\n")' \
		> "$$($(GPU_VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/machine-packages.pth"
	$(GPU_VENV)/bin/python -m pip install --quiet --no-index --find-links $(WHEELS) -r $(WHEELS)/requirements.txt \
		|| { echo "make gpu: wheels/ lacks wheels for this Python: where the index is reachable, run make gpu-wheels PY=$$($(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')"; exit 1; }
	$(GPU_VENV)/bin/python -m pip install --quiet --no-index --find-links $(WHEELS) --no-deps -e .
	$(GPU_VENV)/bin/python -c 'import torch, ddp_lab; print("make gpu: torch", torch.__version__, "from", torch.__file__)'
	touch $@

# Where the package index is reachable: wheels of everything `make gpu` needs except torch, pinned
# as in requirements.txt, for CPython $(PY) on x86-64 Linux, into wheels/ (git-ignored). Then copy
# the checkout with wheels/ to the GPU machine. Run again with PY=3.11 etc. to add other Pythons.
PY            ?= 3.12
GPU_PACKAGES  := cloudpickle numpy matplotlib psutil tqdm ipykernel nbformat nbclient nbval pytest pytest-timeout
GPU_PLATFORMS := manylinux_2_28_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux2010_x86_64 manylinux1_x86_64

.PHONY: gpu-wheels
gpu-wheels:
	mkdir -p $(WHEELS)
	grep -E $(foreach name,$(GPU_PACKAGES),-e '^$(name)==') requirements.txt > $(WHEELS)/requirements.partial
	test "$$(wc -l < $(WHEELS)/requirements.partial)" -eq $(words $(GPU_PACKAGES)) \
		|| { echo "gpu-wheels: requirements.txt must pin each of $(GPU_PACKAGES) with =="; exit 1; }
	$(PYTHON) -m pip download --quiet --only-binary=:all: --python-version $(PY) $(GPU_PLATFORMS:%=--platform %) \
		-d $(WHEELS) -r $(WHEELS)/requirements.partial 'setuptools>=64'
	mv $(WHEELS)/requirements.partial $(WHEELS)/requirements.txt
	@echo "$(WHEELS)/: $$(ls $(WHEELS)/*.whl | wc -l) wheels, $$(du -sh $(WHEELS) | cut -f1); on the GPU machine: make gpu"

# Re-produce stored outputs: run each lesson and solution top to bottom in a fresh kernel.
notebooks: setup
	$(BIN)/python tools/execute_notebooks.py notebooks/*.ipynb $(wildcard solutions/*.ipynb)

# Every lesson and solution under another torch, in its own venv (~/.cache/ddp-lab/compat):
#   make compat TORCH=2.4.1   -> table on screen and in artifacts/compat-torch-2.4.1.md
compat:
	@test -n "$(TORCH)" || { echo "usage: make compat TORCH=X.Y.Z (a torch release, e.g. 2.4.1)"; exit 2; }
	$(PYTHON) tools/compat.py $(TORCH)

exercises: setup
	$(BIN)/python tools/make_exercises.py

# The course as a static website in site/_build/html (git-ignored; open its index.html): the home page site/index.md,
# every lesson and exercise with its stored outputs (nothing is run) and the documents of docs/, built by Sphinx with
# MyST-NB from copies of the files (site/conf.py says why and what differs from them). `make site SITE_DIR=DIR` builds
# in DIR.
SITE_DIR := site/_build
site: setup
	rm -rf $(SITE_DIR)/source && mkdir -p $(SITE_DIR)/source/notebooks $(SITE_DIR)/source/exercises $(SITE_DIR)/source/docs
	cp -p site/index.md README.md $(SITE_DIR)/source/ && cp -p notebooks/*.ipynb $(SITE_DIR)/source/notebooks/ \
		&& cp -p exercises/*.ipynb $(SITE_DIR)/source/exercises/ && cp -p docs/*.md $(SITE_DIR)/source/docs/
	$(BIN)/python -m sphinx -q -W --keep-going -j auto -c site $(SITE_DIR)/source $(SITE_DIR)/html -d $(SITE_DIR)/doctrees

bench: setup
	$(BIN)/python bench/launch.py

clean:
	rm -rf $(VENV) $(GPU_VENV) .pytest_cache
