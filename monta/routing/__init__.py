"""Routing workloads: who sends which token to which expert (docs/routing.md)."""

from monta.routing.spec import RoutingSpec, parse_spec
from monta.routing.stats import Routing, capacity, maxvio
from monta.routing.workloads import make_routing

__all__ = ["Routing", "RoutingSpec", "capacity", "make_routing", "maxvio", "parse_spec"]
