# The two commands of the README:
#   make quickstart   set up .venv from requirements.txt, run chapter 01 on 2 CPU processes
#   make test         set up everything the tests need, then run the whole suite
# make test-gpu     the GPU lane (tests/test_gpu.py): every chapter under nccl as one rank, the
#                   multi-rank pitfalls as 2 ranks sharing the GPUs (--backend gloo-cuda), and
#                   nccl on all GPUs where there are 2+; skipped, with the reason, without CUDA
# make mpi: an MPI from PyPI in .venv (MPICH: its libmpi and mpiexec) for .venv's mpi4py, so that
# the README's `mpiexec -n 4 python ...` runs after `source .venv/bin/activate`. On a cluster
# use the site's MPI instead (docs/launchers.md).
# Other targets: make docs (build the site into site/), make serve, make lint,
# make outputs (re-capture docs/outputs/*.txt and docs/images/, the runs the chapters show), make clean.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# Each MPI gets its own small venv: both ship an `mpiexec`, and mpi4py must match the one
# that launches it. They see the main venv's packages (torch, ...) through a .pth file.
MPIS   := openmpi mpich

.PHONY: quickstart mpi test test-quick test-gpu lint docs serve outputs clean

quickstart: $(VENV)/.installed
	$(BIN)/torchrun --standalone --nproc_per_node=2 scripts/01_data_parallel_ddp/multinode_ddp_basic.py

mpi: $(VENV)/.mpi-installed
	$(BIN)/mpiexec -n 2 $(BIN)/python scripts/01_data_parallel_ddp/multinode_ddp_basic.py

test: $(VENV)/.dev-installed $(MPIS:%=.venv-%/.installed)
	$(BIN)/python -m pytest

# The inner loop (a few minutes): tests that launch nothing, one launch of each chapter's pitfall.
test-quick: $(VENV)/.dev-installed $(MPIS:%=.venv-%/.installed)
	$(BIN)/python -m pytest -m quick

test-gpu: $(VENV)/.dev-installed
	$(BIN)/python -m pytest -m gpu -rs

lint: $(VENV)/.dev-installed
	$(BIN)/ruff check .
	$(BIN)/shellcheck -x scripts/*.sh scripts/*/*.sh .ci/run .ci/install-slurm .ci/install-chromium

docs: $(VENV)/.dev-installed
	$(BIN)/mkdocs build --strict

serve: $(VENV)/.dev-installed
	$(BIN)/mkdocs serve

outputs: $(VENV)/.dev-installed
	$(BIN)/python tests/captured_outputs.py
	$(BIN)/torchrun --standalone --nproc_per_node=2 scripts/10_communication_overlap/bucket_sweep.py \
		--plot docs/images/10_bucket_sweep.png
	$(BIN)/torchrun --standalone --nproc_per_node=2 scripts/12_scaling_and_performance/comm_bench.py \
		--plot docs/images/12_comm_bench.png
	$(BIN)/torchrun --standalone --nproc_per_node=2 scripts/12_scaling_and_performance/lr_scaling.py \
		--plot docs/images/12_lr_scaling.png
	$(BIN)/python scripts/12_scaling_and_performance/scaling_study.py --ranks 1 2 --threads 1 --plot docs/images/12_scaling.png
	# chapter 14's elastic run on two simulated nodes (needs root: network namespaces)
	RECORD_OUTPUTS=1 $(BIN)/python -m pytest tests/test_14_fault_tolerance.py -k elastic_a_node_leaves

$(VENV)/.installed: requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements.txt
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
