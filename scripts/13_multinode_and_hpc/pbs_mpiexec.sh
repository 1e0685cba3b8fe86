#!/bin/bash
#PBS -N ddp_ch13_mpiexec
#PBS -l select=1:ncpus=16:ngpus=4:mpiprocs=4
#PBS -l walltime=00:15:00
#PBS -j oe
# Add your site's account and queue here if it needs them:  #PBS -A ...  /  #PBS -q ...
#
# Chapter 13 as a PBS job: mpiexec alone starts every rank, NPROC_PER_NODE per node (one per
# GPU); no torchrun. setup_distributed() reads the MPI's variables (Cray PALS, MPICH, Open
# MPI; see RANK_LAUNCHER in scripts/pbs_common.sh for Open MPI's spelling). First
# where_am_i.py (who runs where), then chapter 01's training.
#
# Submit from the repository root (more nodes: -l select=2:ncpus=16:ngpus=4:mpiprocs=4):
#     qsub scripts/13_multinode_and_hpc/pbs_mpiexec.sh
# Without PBS, on one machine (CPU or GPUs), the same script, with an MPI's mpiexec and
# mpi4py in the virtual environment:
#     echo localhost > /tmp/nodes
#     PBS_NODEFILE=/tmp/nodes VENV=.venv-mpich bash scripts/13_multinode_and_hpc/pbs_mpiexec.sh
# Parameters (processes per node, virtual environment, modules): scripts/pbs_common.sh.
set -euo pipefail

# shellcheck source=scripts/pbs_common.sh
source "${REPO_DIR:-${PBS_O_WORKDIR:-$PWD}}/scripts/pbs_common.sh" \
    || { echo "submit from the repository root, or set REPO_DIR to it" >&2; exit 1; }

launch_mpiexec scripts/13_multinode_and_hpc/where_am_i.py
launch_mpiexec scripts/01_data_parallel_ddp/multinode_ddp_basic.py
