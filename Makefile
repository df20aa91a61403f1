# Two entry points on a fresh machine: `make reproduce` (the main job) and `make test`.
# Both create .venv with pinned packages first (idempotent: a stamp file skips reinstalls).
PYTHON ?= python3.11
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.monta-installed
export DS_ACCELERATOR ?= cpu
export DS_BUILD_OPS ?= 0
export WANDB_MODE ?= offline
# DeepSpeed's JIT-built CPU op lives in the venv (built once below), not in ~/.cache shared by every clone
export TORCH_EXTENSIONS_DIR ?= $(abspath $(VENV))/torch-extensions
export PYTHONUNBUFFERED := 1
# torch's CPU build comes from PyTorch's CPU index (PyPI's torch==2.13.0 on Linux is the CUDA build, GBs of
# nvidia-* wheels). Where that index is unreachable, pip's own find-links/extra-index-url (pip.conf) still
# apply and supply a local torch-2.13.0+cpu wheel; a mirror of the index: make setup TORCH_INDEX=URL.
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
# Snakemake behind a check for a lock left by a crashed run (monta/pipeline_run.py): a lock no live
# Snakemake holds is cleared with Snakemake's own --unlock and a one-line note; a live one stops the target.
SNAKEMAKE := $(PY) -m monta.pipeline_run

.PHONY: setup doctor test-plugins test test-fast reproduce report pipeline-test exchange-map skew-map bench-alltoall bench-step step-2x8 lint clean slurm-up slurm-down test-slurm faults

setup: $(STAMP)

$(STAMP): requirements.lock pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "error: $(PYTHON) not found; install Python 3.11 or run 'make PYTHON=python3 ...'" >&2; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first and alone, from the CPU index: the pin then stops later resolves from pulling CUDA wheels.
	# --retries 0: where the index does not resolve, pip's backoff retried it for each of torch's 10
	# dependencies (docs/results/make-reproduce.md#timings); one failed lookup per package is enough.
	$(PY) -m pip install -q --retries 0 --index-url $(TORCH_INDEX) torch==2.13.0
	$(PY) -m pip install -q -r requirements.lock
	$(PY) -m pip install -q --no-deps -e .
	# build DeepSpeed's CPU comm op now, in one process, not inside the first rank that loads it (~45 s)
	$(PY) -m monta.extensions --build
	touch $(STAMP)

# What the emulator needs from this machine (user namespaces, ip/tc, unshare/nsenter, python, torch, the
# DeepSpeed CPU op): one line per check with the fix; exit 1 when the emulator cannot run here.
doctor: setup
	$(VENV)/bin/monta doctor

# The test-only variant plugin (tests/plugins/monta_toy_variant), installed as a real package into a
# folder of its own that tests/conftest.py puts on the path: the tests see it, `make reproduce` does not.
TEST_PLUGINS := $(VENV)/test-plugins
TOY_PLUGIN   := tests/plugins/monta_toy_variant
test-plugins: $(TEST_PLUGINS)/.installed

$(TEST_PLUGINS)/.installed: $(STAMP) $(TOY_PLUGIN)/pyproject.toml $(wildcard $(TOY_PLUGIN)/monta_toy_variant/*.py)
	rm -rf $(TEST_PLUGINS)
	$(PY) -m pip install -q --no-deps --target $(TEST_PLUGINS) ./$(TOY_PLUGIN)
	touch $@

# What CI runs (.ci/run is `make test`): lint first (seconds), then every test.
test: lint test-plugins
	$(PY) -m pytest -q tests

test-fast: setup test-plugins
	$(PY) -m pytest -q tests -m "not slow"

# INJECT=monta:0.10: TEST AID, the same pipeline with monta slowed by a measured 10% in the AllToAll
# sweeps, to check `monta regress` against an earlier run (docs/testbed.md, the gate); the report says so.
INJECT ?=
reproduce: setup
	$(SNAKEMAKE) --cores 2 --profile profiles/local $(if $(INJECT),--config 'alltoall={inject_slowdown: $(INJECT)}')

# Snakemake's HTML report of the last `make reproduce` (every figure and table with its caption, the workflow,
# run times): results/report.html, one self-contained file (docs/report.md).
report: setup
	$(SNAKEMAKE) --cores 1 --profile profiles/local --report results/report.html

pipeline-test: setup
	$(SNAKEMAKE) --cores 2 --profile profiles/local --configfile config/test.yaml

# The exchange map: deepspeed, monta, 2dh, allgather and node-dedup over TP 1/2/4, two routings and two sizes
# on the emulated 2 x 4 A800, measured beside the model (results/map/map.md, map.png); not in reproduce
# (its time: docs/results/make-reproduce.md#timings).
exchange-map: setup
	$(SNAKEMAKE) --cores 2 --profile profiles/local results/map/map.md

# The skew map: every exchange under W0, a hot node and log-normal MaxVio 1 and 4 (docs/results/skew-map.md).
skew-map: setup
	$(SNAKEMAKE) --cores 2 --profile profiles/local results/skewmap/skew-map.md

# The pipeline's 2 x 8 sweep as it runs it (config/default.yaml: 8 and 16 MiB, 1-8 chunks of 2 MiB and up, adaptive).
bench-alltoall: setup
	$(VENV)/bin/monta bench alltoall --nodes 2 --gpus-per-node 8 --topology a800-4nic@0.0625 --sizes 8M:16M:2 --chunks 1,2,4,8 --min-chunk 2M --warmup 1 --adaptive --max-iters 40 --budget-s 20 --check

# The paper's layout on the emulator: the step at 2 x 8 TP8 (16 ranks; the mini with 8 KV heads so TP8 divides
# them) at half the 2 x 4 step's rates, the three exchanges; not in reproduce (docs/results/training-step.md; its
# time: docs/results/make-reproduce.md#timings).
step-2x8: setup
	$(VENV)/bin/monta bench step --nodes 2 --gpus-per-node 8 --tp 8 --kv-heads 8 --launcher emulate --topology a800-4nic@0.0625 --micro-batch 32 --compute modeled --steps 2 --warmup 1 --variants deepspeed,legacy,monta --out results/step-2x8.jsonl $(if $(FORCE),--force)

bench-step: setup
	$(VENV)/bin/monta bench step --nodes 2 --gpus-per-node 4 --launcher emulate --topology a800-4nic@0.125 --micro-batch 32 --compute modeled --steps 6 --warmup 2

# Fault injection as a user meets faults (bad flags, corrupt inputs, damaged files, bad configs,
# stopped/killed/unprivileged ranks, killed runs): one line per case, then `N/M handled`.
faults: setup
	$(PY) tools/faults.py

# ruff's rules and excludes live in pyproject.toml; `$(VENV)/bin/ruff format .` fixes what the format check reports.
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/snakemake --lint

# A real SLURM on this machine (root; installs Debian's slurmctld, slurmd, slurmdbd, munge, mariadb-server
# when missing): nodes n1, n2 on this host, state in MONTA_SLURM_DIR (default /tmp/monta-slurm). Then
#   SLURM_CONF=/tmp/monta-slurm/etc/slurm.conf snakemake --profile profiles/slurm --configfile config/slurm-local.yaml
# slurm-down stops exactly what slurm-up started (its jobs, daemons and their leftovers).
slurm-up:
	bash tools/slurm/up.sh

slurm-down:
	bash tools/slurm/down.sh

# The SLURM pipeline test alone (installs the packages if needed; stops the cluster unless slurm-up started it).
test-slurm: setup
	MONTA_SLURM_INSTALL=1 $(PY) -m pytest -q tests/test_slurm.py

clean:
	rm -rf results .snakemake
