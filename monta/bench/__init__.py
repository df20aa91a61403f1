"""Benchmarks: the TP AllToAll exchange sweep (nccl-tests style) and the MoE training step.

Each runs on every rank of a world (emulated, torchrun or SLURM) and writes monta.results records.
"""
