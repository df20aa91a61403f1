"""DeepSpeed's MoE layer with a pluggable token exchange (legacy, deepspeed, monta).

``from monta.moe import MoE`` is a drop-in for ``deepspeed.moe.layer.MoE`` plus exchange= and chunks=.
"""

from monta.moe.layer import ExchangeMOELayer, MoE, RoutingPlan

__all__ = ["MoE", "ExchangeMOELayer", "RoutingPlan"]
