#!/bin/sh
# Prints the rendezvous address of the SLURM job this runs in: the address (NodeAddr) of the first
# node of its allocation, which is its hostname on most clusters. Snakemake's slurm-jobstep keeps
# only SLURM_JOB_ID of the job's SLURM_* variables, so the node list is asked from squeue when needed.
set -eu
: "${SLURM_JOB_ID:?master_addr.sh: not inside a SLURM job (SLURM_JOB_ID is unset)}"
nodes=${SLURM_JOB_NODELIST:-$(squeue -h -j "$SLURM_JOB_ID" -o %N)}
first=$(scontrol show hostnames "$nodes" | head -n 1)
[ -n "$first" ] || { echo "master_addr.sh: job $SLURM_JOB_ID has no nodes (squeue -j $SLURM_JOB_ID)" >&2; exit 1; }
addr=$(sinfo -h -N -n "$first" -o %o | head -n 1)
echo "master_addr.sh: job $SLURM_JOB_ID on $nodes: rendezvous on $first (${addr:-$first})" >&2
echo "${addr:-$first}"
