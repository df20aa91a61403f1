"""MoNTA's performance model, in three rooms. Pure Python: importing it loads no torch. The hardware it
prices (links, ``Cluster``, the cluster files, link profiles and ``get_cluster``) is ``monta.hardware``.

- ``network/``: collectives, the fluid timeline, the exchanges' timelines, chunk choice and the predicted
  AllToAll sweep.
- ``training/``: compute, parallel strategies, memory, the training-step prediction, the strategy
  planner and the emulated clock.
- ``reports/``: the paper's figures, accuracy against measurements, sweep tables and the CLI
  (``monta plan``, ``monta predict``).
"""

from monta.perfmodel.network.chunks import choose_chunks
from monta.perfmodel.network.exchange import exchange_time

__all__ = ["choose_chunks", "exchange_time"]
