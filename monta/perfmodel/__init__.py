"""MoNTA's performance model, in three rooms. Pure Python: importing it loads no torch.

- ``network/``: link costs and cluster presets (``links``), calibrated link profiles and
  ``get_cluster`` (``profile``), collectives, the fluid timeline, the exchanges' timelines, chunk
  choice and the predicted AllToAll sweep.
- ``training/``: compute, parallel strategies, memory, the training-step prediction, the strategy
  planner and the emulated clock.
- ``reports/``: the paper's figures, accuracy against measurements, sweep tables and the CLI
  (``monta plan``, ``monta predict``).
"""

from monta.perfmodel.network.chunks import choose_chunks
from monta.perfmodel.network.exchange import exchange_time
from monta.perfmodel.network.links import Cluster, Link
from monta.perfmodel.network.profile import LinkProfile, get_cluster

__all__ = ["Cluster", "Link", "LinkProfile", "choose_chunks", "exchange_time", "get_cluster"]
