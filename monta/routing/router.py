"""What a trained router did, in the same terms as a routing workload: the realized MaxVio of a layer's
per-expert loads and the routes its capacity dropped (``monta bench step`` reports them per MoE layer and
step, docs/routing.md), and the MaxVio the synthetic workloads realize at the same shape, for the line
that sets the two side by side. Pure functions of counts: the step's ranks record them, rank 0 sums them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from monta.routing.stats import maxvio
from monta.routing.workloads import make_routing

# The workloads the step report sets the router next to: the suite, and the log-normal and Zipf loads
# at the MaxVio targets vLLM sweeps (0.2, 1, 4).
REFERENCE_SPECS = (
    "W0",
    "W1",
    "W2",
    "W3",
    "W5",
    "lognormal:maxvio=0.2",
    "lognormal:maxvio=1",
    "lognormal:maxvio=4",
    "zipf:s=1",
)


def layer_figures(
    counts: Sequence[Sequence[int]], dropped_routes: Sequence[int], dropped_tokens: Sequence[int], tokens: int, k: int
) -> dict[str, Any]:
    """One MoE layer in one step over an EP group: ``counts[r][e]`` the routes member r's gate chose for
    expert e (before the capacity), ``dropped_routes[r]`` / ``dropped_tokens[r]`` what r's capacity dropped
    (routes, and tokens that lost at least one route), ``tokens`` rows per member, top-``k``.

    The load is summed over the members, as ``Routing.expert_load`` sums it over ranks, so the MaxVio is
    ``monta.routing.stats.maxvio`` of the same counts a ``Routing`` of these choices would have."""
    if not counts:
        raise ValueError("layer_figures needs the counts of at least one EP member")
    width = {len(c) for c in counts}
    if len(width) != 1:
        raise ValueError(f"every member's counts must cover the same experts (got lengths {sorted(width)})")
    load = [sum(col) for col in zip(*counts)]
    routes = sum(load)  # a route to no expert (a workload's missing token) is in no count
    dropped = int(sum(dropped_routes))
    return {
        "maxvio": maxvio(load),
        "expert_load": load,
        "routes": routes,
        "dropped_routes": dropped,
        "dropped_tokens": int(sum(dropped_tokens)),
        "tokens": tokens * len(counts),
        "drop_fraction": dropped / routes if routes else 0.0,
        "k": k,
    }


def workload_maxvio(
    ranks: int, tokens: int, experts: int, k: int, nodes: int = 1, specs: Sequence[str] = REFERENCE_SPECS
) -> dict[str, float | None]:
    """Each workload's realized MaxVio at this shape (built, not run); None where the shape cannot hold
    it (W0 with tokens x k not a multiple of the experts, a log-normal target past E / k - 1)."""
    out: dict[str, float | None] = {}
    for spec in specs:
        try:
            out[spec] = make_routing(spec, ranks, tokens, experts, k, nodes).maxvio()
        except ValueError:
            out[spec] = None
    return out
