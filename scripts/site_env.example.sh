# shellcheck shell=bash
# Your site's settings for every job script, in one place. Copy this file to
# scripts/site_env.sh and edit it there (scripts/site_env.sh is ignored by git):
#     cp scripts/site_env.example.sh scripts/site_env.sh
#
# scripts/job_common.sh sources scripts/site_env.sh when it exists (SITE_ENV names another
# file), so every PBS and Slurm job script, and torchrun_node.sh, reads it before it loads
# modules, activates the virtual environment or launches anything. This example itself is
# never sourced. What it exports reaches the ranks on the first node; on other nodes it
# reaches them when the launcher forwards the environment: srun, Cray PALS and MPICH's
# mpiexec do; Open MPI forwards only what `-x NAME` names (put those in NODE_LAUNCHER /
# RANK_LAUNCHER, see scripts/pbs_common.sh). Chapter 13 ("Network interfaces and
# transports") says what each setting does; your site's user guide has the right values.
#
# Everything below is commented out: uncomment what your site needs.

# --- software: modules to load (space-separated) and the virtual environment
# MODULES="${MODULES:-cudatoolkit/12.4 gcc}"
# VENV="${VENV:-$HOME/venvs/ddp}"

# --- job parameters (scripts/pbs_common.sh and scripts/slurm_common.sh list them all)
# NPROC_PER_NODE="${NPROC_PER_NODE:-4}"
# CPU_BIND="${CPU_BIND:-auto}"

# --- which network interface the bootstrap and the CPU-side (gloo) groups use
# export NCCL_SOCKET_IFNAME=hsn          # Slingshot: hsn0, hsn1, ...;  InfiniBand: ib0
# export GLOO_SOCKET_IFNAME=hsn0

# --- HPE Slingshot (Cray EX): NCCL over libfabric through the aws-ofi-nccl plugin
# export LD_LIBRARY_PATH=/path/to/aws-ofi-nccl/lib:${LD_LIBRARY_PATH:-}
# export NCCL_NET="AWS Libfabric"        # fail rather than fall back to TCP sockets
# export FI_PROVIDER=cxi
# export NCCL_CROSS_NIC=1
# export NCCL_NET_GDR_LEVEL=PHB
# export FI_CXI_DISABLE_HOST_REGISTER=1
# export FI_MR_CACHE_MONITOR=userfaultfd

# --- InfiniBand / RoCE
# export NCCL_IB_HCA=mlx5_0,mlx5_1
# export NCCL_IB_GID_INDEX=3             # RoCE v2 only

# --- while debugging (remove once it works)
# export NCCL_DEBUG=INFO
# export NCCL_DEBUG_SUBSYS=INIT,NET
