"""MoNTA's performance model: link and collective costs, exchange timelines, chunk choice, memory,
training-step prediction and the parallel-strategy planner. Pure Python: importing it loads no torch."""

from monta.perfmodel.chunks import choose_chunks
from monta.perfmodel.exchange import exchange_time
from monta.perfmodel.links import Cluster, Link, LinkProfile, get_cluster

__all__ = ["Cluster", "Link", "LinkProfile", "choose_chunks", "exchange_time", "get_cluster"]
