"""DeepSpeed's MoE layer with a pluggable token exchange (legacy, deepspeed, monta).

``from monta.moe import MoE`` is a drop-in for ``deepspeed.moe.layer.MoE`` plus exchange= and chunks=;
the routing source (``choices=``, a ``WorkloadChoices``) and what watches it (``observers=``, an
``Observers``) are given at construction.
"""

from monta.moe.gate_routing import WorkloadChoices
from monta.moe.layer import ExchangeMOELayer, MoE, RoutingPlan
from monta.moe.observers import Observers

__all__ = ["MoE", "ExchangeMOELayer", "RoutingPlan", "Observers", "WorkloadChoices"]
