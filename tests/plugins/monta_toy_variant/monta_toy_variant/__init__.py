"""A toy monta variant plugin: the schedule ``toy-phases`` runs DeepSpeed's MoE forward phase by
phase itself (gate, encode, dispatch, experts, combine, decode) and counts the MoE layers it ran;
the variant ``toy`` puts it on MoNTA's exchange with DeepSpeed's gradient reduction.

Torch-free at import: ``register`` only describes the parts; ``_build`` imports the rest when a
rank builds the variant.
"""

from __future__ import annotations


class ToyPhases:
    """The MoE forward (``monta.model.transformer.stock_schedule``'s ops), counting its calls."""

    def __init__(self):
        self.calls = 0

    def __call__(self, moe, x):
        from monta.model.transformer import timed_exchange

        self.calls += 1
        layer = moe.deepspeed_moe
        x_SM = x.reshape(-1, x.shape[-1])
        plan = layer._timed("gate", layer.route, x_SM)
        layer.l_aux, layer.exp_counts = plan.l_aux, plan.exp_counts
        x_ECM = layer.encode(x_SM, plan)
        dispatched = layer._timed("dispatch", timed_exchange, layer, "dispatch", x_ECM)
        expert_out = layer._timed("experts", layer.run_experts, dispatched)
        combined = layer._timed("combine", timed_exchange, layer, "combine", expert_out)
        return layer.decode(combined, plan).reshape(x.shape), plan.l_aux


def _build(ctx):
    return ToyPhases()


def _hidden(o):
    """Performance model: the toy hides nothing (its phases run one after another)."""
    return 0.0, 0.0


def register(registry) -> None:
    registry.add_schedule("toy-phases", build=_build, hidden_us=_hidden,
                          about="toy plugin: DeepSpeed's MoE forward phase by phase, calls counted")
    registry.add_variant("toy", exchange="monta", schedule="toy-phases", sync="after-backward",
                         about="toy plugin variant: MoNTA's exchange under the toy-phases schedule")
