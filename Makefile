# The two commands of the README:
#   make quickstart   set up .venv from requirements.txt, run chapter 01's pitfall and its fix
#                     on 2 CPU processes (make quickstart CPU=1: CPU-only torch, about 200 MB)
#   make test         set up everything the tests need, then run the whole suite
# make test-gpu     the GPU lane (tests/test_gpu.py): every chapter under nccl as one rank, the
#                   multi-rank pitfalls as 2 ranks sharing the GPUs (--backend gloo-cuda), and
#                   nccl on all GPUs where there are 2+; skipped, with the reason, without CUDA;
#                   in parallel (pytest-xdist): 3 test processes per 4 CPU cores, printed
#                   (16 cores: -n 12), its longest cases first; GPU_LANE_WORKERS=N chooses another number
# make mpi: an MPI from PyPI in .venv (MPICH: its libmpi and mpiexec) for .venv's mpi4py, so that
# the README's `mpiexec -n 4 python ...` runs after `source .venv/bin/activate`. On a cluster
# use the site's MPI instead (docs/launchers.md).
# Other targets: make docs (build the site into site/), make serve (both install only
# requirements-docs.txt), make lint,
# make outputs (re-capture docs/outputs/*.txt and docs/images/, the runs the chapters show),
# make outputs-gpu (on NVIDIA GPUs: record docs/outputs/gpu/*.txt again, the GPU tabs), make clean.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# Each MPI gets its own small venv: both ship an `mpiexec`, and mpi4py must match the one
# that launches it. They see the main venv's packages (torch, ...) through a .pth file.
MPIS   := openmpi mpich

.PHONY: quickstart mpi test test-quick test-gpu lint docs serve outputs outputs-gpu clean

# Chapter 01's pitfall, then its fix, on 2 CPU processes; then what to read next.
QUICKSTART := OMP_NUM_THREADS=1 $(BIN)/torchrun --standalone --nproc_per_node=2 scripts/01_data_parallel_ddp/multinode_ddp_basic.py
quickstart: $(VENV)/.installed
	@echo; echo "== 1/2 The pitfall: no DistributedSampler (--variant bad), 2 processes under torchrun"
	$(QUICKSTART) --variant bad
	@echo; echo "== 2/2 The fix: a DistributedSampler (--variant good)"
	$(QUICKSTART) --variant good
	@echo
	@echo "What you just saw: the same DDP job twice, on 2 processes."
	@echo "  bad:  each process went through the whole data set (samples_per_rank = the data set, work=2.00x):"
	@echo "        2 processes, twice the work, no split."
	@echo "  good: the DistributedSampler gave each process its own half (work=1.00x)."
	@echo "Next: chapter 01 explains it (chapters/01_data_parallel_ddp.md, or make serve for the site);"
	@echo "      your own script: chapters/00_porting.md; every pitfall at a glance: docs/cheatsheet.md."

mpi: $(VENV)/.mpi-installed
	$(BIN)/mpiexec -n 2 $(BIN)/python scripts/01_data_parallel_ddp/multinode_ddp_basic.py

test: $(VENV)/.dev-installed $(MPIS:%=.venv-%/.installed)
	$(BIN)/python -m pytest

# The inner loop (a few minutes): tests that launch nothing, one launch of each chapter's pitfall.
test-quick: $(VENV)/.dev-installed $(MPIS:%=.venv-%/.installed)
	$(BIN)/python -m pytest -m quick

# Each test launches 1 to 4 ranks (plus their loader workers) and waits on them: 3 tests per
# 4 cores kept the H200's 16 cores busy without a launch timing out (-n 12, 2026-11-26).
# The cores are those this process may run on (a job's share of the node), counted by Python:
# `nproc` honours OMP_NUM_THREADS, which job scripts often set to 1. --dist load hands each
# worker a batch of consecutive tests; tests/conftest.py (longest_first) starts each batch with
# one of the longest cases (GPU_LANE_SECONDS).
test-gpu: $(VENV)/.dev-installed
	@cores=$$($(BIN)/python -c 'import os; print(len(os.sched_getaffinity(0)))'); \
	workers=$${GPU_LANE_WORKERS:-$$(( cores * 3 / 4 > 1 ? cores * 3 / 4 : 1 ))}; \
	echo "make test-gpu: $$cores CPU cores -> pytest -n $$workers (GPU_LANE_WORKERS=N to change it)"; \
	$(BIN)/python -m pytest -m gpu -rs -n $$workers --dist load

lint: $(VENV)/.dev-installed
	$(BIN)/ruff check .
	$(BIN)/shellcheck -x scripts/*.sh scripts/*/*.sh .ci/run .ci/install-slurm .ci/install-chromium

docs: $(VENV)/.docs-installed
	$(BIN)/mkdocs build --strict

serve: $(VENV)/.docs-installed
	$(BIN)/mkdocs serve

outputs: $(VENV)/.dev-installed
	$(BIN)/python tests/captured_outputs.py
	$(BIN)/torchrun --standalone --nproc_per_node=2 scripts/10_communication_overlap/bucket_sweep.py \
		--plot docs/images/10_bucket_sweep.png
	$(BIN)/torchrun --standalone --nproc_per_node=2 scripts/12_scaling_and_performance/lr_scaling.py \
		--plot docs/images/12_lr_scaling.png
	# chapter 12b's plot, drawn from the table of the captured run (one run, table and plot)
	$(BIN)/python scripts/12_scaling_and_performance/scaling_study.py --replot docs/outputs/12b_scaling.txt \
		--plot docs/images/12b_scaling.png
	# chapter 14's elastic run on two simulated nodes (needs root: network namespaces)
	RECORD_OUTPUTS=1 $(BIN)/python -m pytest tests/test_14_fault_tolerance.py -k elastic_a_node_leaves

# The GPU tabs of the chapters: every docs/outputs/gpu/ file's command again on this machine's
# GPUs (nccl with a GPU per rank, else DDP_BACKEND=gloo-cuda), each with its header (card,
# driver, torch, CUDA, NCCL, date, commit, duration); stops with a message without CUDA. It says
# how long it will take, records the most useful files first, and skips those already recorded
# at this commit on this card: run it again to go on where it stopped (FORCE=1: all again).
outputs-gpu: $(VENV)/.dev-installed
	$(BIN)/python tests/captured_outputs.py --gpu $(if $(FORCE),--force)

# CPU=1: torch and torchvision from PyTorch's CPU-only index first (about 200 MB, not 3 GB).
TORCH_CPU_INDEX := https://download.pytorch.org/whl/cpu
$(VENV)/.installed: requirements.txt
	@echo "Installing into .venv: requirements.txt (torch, torchvision, matplotlib, nvitop, mpi4py)."
	@if [ -n "$(CPU)" ]; then 	  echo "  CPU=1: torch and torchvision first, CPU-only, from $(TORCH_CPU_INDEX): about 200 MB."; 	else 	  echo "  On Linux, pip's default torch brings NVIDIA's CUDA libraries: about 3 GB to download"; 	  echo "  (torch's CUDA wheel is about 550 MB; the libraries it pulls in, about 2.5 GB)."; 	  echo "  No NVIDIA GPU? Ctrl-C now, then: make quickstart CPU=1 (CPU-only torch, about 200 MB)."; 	fi
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(if $(CPU),$(BIN)/pip install torch torchvision --index-url $(TORCH_CPU_INDEX))
	$(BIN)/pip install -r requirements.txt
	touch $@

# The site alone (make docs, make serve): mkdocs-material, no torch.
$(VENV)/.docs-installed: requirements-docs.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet -r requirements-docs.txt
	touch $@

$(VENV)/.mpi-installed: $(VENV)/.installed
	$(BIN)/pip install --quiet mpich mpi4py
	touch $@

$(VENV)/.dev-installed: requirements-dev.txt $(VENV)/.installed
	$(BIN)/pip install --quiet -r requirements-dev.txt
	touch $@

.venv-%/.installed: $(VENV)/.installed
	$(BIN)/python -m venv .venv-$*
	.venv-$*/bin/pip install --quiet $* mpi4py
	$(BIN)/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])" \
	  > "$$(.venv-$*/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/main_venv.pth"
	touch $@

clean:
	rm -rf $(VENV) $(MPIS:%=.venv-%) site .pytest_cache .ruff_cache
