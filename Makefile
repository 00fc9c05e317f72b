# induce — developer entry points. `make reproduce` and `make test` are the README's two commands.
PYTHON ?= python3
# Extra options for pip (e.g. an index serving CPU builds of torch).
PIP_OPTS ?=
# Where the treebank data is (docs/data.md); empty = INDUCE_DATA / corpora/ / NLTK data path / synthetic.
DATA ?=
DATA_OPT := $(if $(DATA),--data $(DATA),)
INDUCE := $(PYTHON) -m induce
# The suite runs in two worker processes (pytest-xdist), a test file per worker at a time (its module
# fixtures, such as the H100 compile check, are built once): PYTEST_WORKERS= runs it in one process.
PYTEST_WORKERS ?= -n 2 --dist loadfile

.PHONY: install test test-fast test-triton reproduce baselines bench gpu-check docs clean

install: .install-stamp

# Exact versions from constraints.txt; setup.cfg states only lower bounds.
.install-stamp: setup.cfg pyproject.toml constraints.txt
	$(PYTHON) -m pip install $(PIP_OPTS) -q -c constraints.txt -e ".[test,triton,plots,slurm]"
	@touch $@

# DATA=DIR: the real-data tests read DIR (as INDUCE_DATA); without it they skip (INDUCE_DATA of the shell, if set).
test: install
	$(if $(DATA),INDUCE_DATA="$(abspath $(DATA))" ,)$(PYTHON) -m pytest -q $(PYTEST_WORKERS)

# The edit-test loop: every test but those marked `slow` (the longest end-to-end runs), about a minute on
# 2 cores. `make test` (and CI) still runs everything.
test-fast: install
	$(PYTHON) -m pytest -q $(PYTEST_WORKERS) -m "not slow"

# Only the Triton kernels, through Triton's CPU interpreter.
test-triton: install
	$(PYTHON) -m pytest -q -m triton

# The main job on the default data: prepare the corpus, train PRPN, ON-LSTM, PaLM-U/S/RB, C-PCFG, TN-PCFG, evaluate them
# and the baselines (on the test split when the data has WSJ 23, else on dev; models selected on dev only),
# write $(OUT)/REPORT.md and $(OUT)/results.json (`induce reproduce`).
# PROFILE=auto (default: gpu when torch sees a CUDA device, else cpu) | gpu (paper-size models, ~25 min of one
# H100) | cpu (small models and paper-size grammars, 75-90 min on 2 idle CPU cores) | cpu-long (cpu over four seeds, the
# PRPN and PaLM models trained longer: ~12-13 h, estimated) | paper (the papers' recipes: days of GPU time, in chunks of
# CHUNK=3h per invocation; run it again until it exits 0 -- status 75 means "not finished, run again") | toy;
# SEEDS=1,2,3, JOBS=N runs at once (default: the profile's). Re-running continues where an interrupted run stopped.
# EXECUTOR=slurm: each run a job of a SLURM cluster (docs/slurm.md).
PROFILE ?= auto
SEEDS ?=
CHUNK ?=
JOBS ?=
EXECUTOR ?=
OUT ?= results
reproduce: install
	$(INDUCE) reproduce --profile $(PROFILE) $(if $(SEEDS),--seeds $(SEEDS),) $(if $(CHUNK),--chunk $(CHUNK),) $(if $(JOBS),--jobs $(JOBS),) $(if $(EXECUTOR),--executor $(EXECUTOR),) $(DATA_OPT) --out $(OUT)

baselines: install
	@for b in right left balanced random; do \
	  for f in "" --wsj10 --wsj40; do \
	    echo "== baseline $$b $$f"; \
	    $(INDUCE) eval --baseline $$b $$f $(DATA_OPT) || exit 1; \
	  done; \
	done

bench: install
	$(PYTHON) bench/kernels.py
	$(PYTHON) bench/models.py

# The first GPU session in one command (bench/gpu_check.py): the compiled-kernel and CUDA-graph tests on the
# GPU, the step benchmark against the original implementations and `induce train` epochs, in at most 9 minutes
# of one H100; results (summary.json, gpu-check.log, gpu_training.json, bench_models.json) in OUT (here:
# gpu-check/ unless OUT is set). Installs nothing from the network: WHEELS=DIR (nltk, pydantic, ... as wheels),
# DATA=DIR (the treebank), ORIGINALS=DIR (bench/originals/prepare.py); bench/results/gpu.md says how to prepare
# them. DRY=1: on CPU, check in about a minute that every step starts (what the tests run).
GPU_CHECK_OUT := $(if $(filter file,$(origin OUT)),gpu-check,$(OUT))
gpu-check:
	$(PYTHON) -u bench/gpu_check.py $(if $(filter 1 yes true,$(DRY)),--dry-run,) $(if $(WHEELS),--wheels $(WHEELS),) \
	  $(DATA_OPT) $(if $(ORIGINALS),--originals $(ORIGINALS),) --out $(GPU_CHECK_OUT)

# The documentation site (mkdocs.yml, docs/) into site/; --strict fails on a broken link or a page left out.
docs: install
	$(PYTHON) -m mkdocs build --strict --site-dir site

clean:
	rm -rf .install-stamp build *.egg-info .pytest_cache site
