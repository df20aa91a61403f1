"""A pipeline layout as Megatron-Core states it (``--pipeline-model-parallel-layout``; Megatron-Bridge's
``pipeline_model_parallel_layout``): which layers each virtual pipeline stage holds, and so the work of the
physical stage that paces a 1F1B step.

The string lists the virtual stages separated by ``|``; ``E`` is the embedding, ``t`` a decoder layer, ``m`` an
MTP layer, ``L`` the output layer with its loss; ``X*n`` repeats a symbol and ``(...)*n`` a group (Megatron-LM's
``PipelineParallelLayerLayout.from_str``). Virtual stage ``i`` runs on physical stage ``i mod pp`` (the
interleaved schedule), so a layout of ``pp x vpp`` stages gives each GPU ``vpp`` chunks. Recipes use it to
unload the last stage, which by default also carries the MTP layers and the head: DeepSeek-V3's
``Et|(tt|)*30mL`` at PP8 VPP4 (the GB200 guide's flags, NVIDIA/Megatron-LM
docs/discussions/deepseek-v3-gb200-optimization; Megatron-Bridge's DeepSeek-V3 perf configs), or
``Et*4|(t*4|)*14tmL`` for 16 stages (Megatron-Bridge's ``set_deepseek_v3_pipeline_model_parallel_layout``).
"""

from __future__ import annotations

import re

SYMBOLS = "EtmL"


def parse(text: str) -> list[str]:
    """The virtual stages of a layout string, each a string of :data:`SYMBOLS`; ValueError for another symbol."""
    s = re.sub(r"[\s,]", "", text)
    while True:  # innermost groups first
        expanded = re.sub(r"\(([^()]*)\)\*(\d+)", lambda g: g.group(1) * int(g.group(2)), s)
        if expanded == s:
            break
        s = expanded
    s = re.sub(rf"([{SYMBOLS}])\*(\d+)", lambda g: g.group(1) * int(g.group(2)), s)
    bad = set(s) - set(SYMBOLS) - {"|"}
    if not s:
        raise ValueError(f"pipeline layout {text!r} is empty: write its stages (e.g. 'Et|(tt|)*30mL') or leave it out")
    if bad:
        raise ValueError(
            f"pipeline layout {text!r}: symbols are E, t, m, L, '|', 'X*n' and '(...)*n' (not {''.join(sorted(bad))})"
        )
    # the embedding and the head with its loss run once per micro-batch: a layout without one, or with two,
    # would price a step that drops or doubles them
    for sym, what in (("E", "embedding"), ("L", "output layer with the loss")):
        if s.count(sym) != 1:
            raise ValueError(f"pipeline layout {text!r} holds {s.count(sym)} {sym!r} ({what}): write exactly one")
    return s.split("|")


def stage_loads(text: str, pp: int, layers: int, dense_layers: int, mtp: int) -> list[tuple[float, float, float]]:
    """Per physical stage: (MoE layers + MTP layers, dense layers, output layers) that one micro-batch passes
    through on it. The decoder layers are numbered in order, the first ``dense_layers`` of them dense.
    ValueError where the layout does not fit the model and ``pp``."""
    stages = parse(text)
    if len(stages) % pp:
        raise ValueError(f"pipeline layout {text!r} has {len(stages)} stages, not a multiple of pp={pp}")
    decoder, held_mtp = (sum(v.count(sym) for v in stages) for sym in "tm")
    if decoder != layers:
        raise ValueError(f"pipeline layout {text!r} holds {decoder} decoder layers; the model has {layers}")
    if held_mtp != mtp:
        raise ValueError(f"pipeline layout {text!r} holds {held_mtp} MTP layers; the model has {mtp}")
    loads = [[0.0, 0.0, 0.0] for _ in range(pp)]
    done = 0
    for i, v in enumerate(stages):
        t = v.count("t")
        dense = max(0, min(t, dense_layers - done))
        load = loads[i % pp]
        load[0] += t - dense + v.count("m")
        load[1] += dense
        load[2] += v.count("L")
        done += t
    return [(a, b, c) for a, b, c in loads]
