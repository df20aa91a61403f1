"""Cross-section rules of the pipeline config: settings that each pass their own key's check but contradict
each other, so a job would fail at run time (modeled compute on hand-set links, a regression check of a
cluster no sweep measures) or a sweep would run no row of an exchange (a chunk floor above every chunk).

Each rule returns the one-line message of its first contradiction, or None; configcheck raises it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any


def first_problem(cfg: Mapping[str, Any]) -> str | None:
    for rule in (modeled_compute, regress_cluster, step_layout, chunk_floor):
        message = rule(cfg)
        if message:
            return message
    return None


def _steps_run(cfg: Mapping[str, Any]) -> bool:
    """Whether any `monta bench step` runs: the step experiment, or a step ablation (top-k, capacity)."""
    abl = cfg["ablation"]
    return bool(
        (cfg["step"]["enabled"] and cfg["step"]["clusters"])
        or (abl["enabled"] and (abl["topk"] or abl["capacity_factor"]))
    )


def modeled_compute(cfg: Mapping[str, Any]) -> str | None:
    """`--compute modeled` waits each piece on the clock of the cluster the emulated network stands for:
    hand-set rates (no topology, or a loopback rate of its own) have no cluster, and every step job fails."""
    if cfg["launcher"]["kind"] != "emulated" or cfg["step"]["compute"] != "modeled" or not _steps_run(cfg):
        return None
    net = cfg["network"]
    fix = "or set step.compute: real (the small model's math at this machine's speed)"
    if net["topology"] in ("", "unshaped"):
        return (
            f"config key step.compute = 'modeled': modeled compute runs on the clock of an emulated cluster, but "
            f"network.topology = {net['topology']!r} names none; set network.topology to a cluster (e.g. a800-4nic) "
            + fix
        )
    if net["intra_gbps"]:
        return (
            f"config key step.compute = 'modeled': network.intra_gbps = {net['intra_gbps']!r} sets the loopback by "
            f"hand, so the links stand for no cluster; set it to 0 (the loopback at {net['topology']}'s ratio) " + fix
        )
    return None


def regress_cluster(cfg: Mapping[str, Any]) -> str | None:
    """The regression check compares one AllToAll sweep's records: a cluster no sweep measures has none."""
    reg, a2a = cfg["regress"], cfg["alltoall"]
    if not (reg["enabled"] and a2a["enabled"]):
        return None
    names = [c["name"] for c in a2a["clusters"]]
    if reg["cluster"] in names:
        return None
    return (
        f"config key regress.cluster = {reg['cluster']!r}: no AllToAll sweep measures it (alltoall.clusters: "
        f"{', '.join(names)}); name one of them, or set regress.enabled: false"
    )


def step_layout(cfg: Mapping[str, Any]) -> str | None:
    """The step's model must split over each step cluster as `monta bench step` splits it (TP heads and ffn,
    EP = the nodes over the experts), with the step section's model overrides: a shape it cannot split stops
    every step job of that cluster."""
    from monta.model.config import resolve_config

    s, abl = cfg["step"], cfg["ablation"]
    clusters = [(f"step.clusters[{i}]", c) for i, c in enumerate(s["clusters"]) if s["enabled"]]
    if abl["enabled"] and (abl["topk"] or abl["capacity_factor"]):
        clusters.append(("ablation.cluster", abl["cluster"]))
    overrides = {k: s[k] or None for k in ("layers", "seq", "micro_batch")}  # 0: the preset's
    try:
        model = resolve_config(s["model"], **overrides, topk=s["topk"], capacity_factor=s["capacity_factor"])
    except (ValueError, TypeError) as e:
        return f"config key step.model = {s['model']!r}: {e}"
    for key, c in clusters:
        try:
            model.check_layout(c["tp"], c["nodes"])
        except ValueError as e:
            return (
                f"config key {key} ({c['name']}: {c['nodes']} nodes, TP {c['tp']}): step.model {s['model']} "
                f"cannot be split there: {e}"
            )
    return None


def ratio_floor(cfg: Mapping[str, Any], gbps: Any) -> int:
    """The chunk floor of the ratio ablation at NIC rate ``gbps``: the bytes a chunk of the floor's link time
    holds there (the floor x gbps / the network section's rate), so faster links do not leave the ablation's
    chunks to the host (at 0.5 Gbit/s, 4 and 8 chunks of 4 MiB waited for a core 19% and 30% of their time)."""
    from monta.units import parse_size

    base = parse_size(cfg["ablation"]["cluster"].get("min_chunk") or cfg["alltoall"]["min_chunk"])
    rate = float(cfg["network"]["inter_gbps"] or 0)
    return int(base * float(gbps) / rate) if rate else base


def _sweeps(cfg: Mapping[str, Any]) -> Iterator[tuple[str, str, str, int, list[str], Any, list[int]]]:
    """Every AllToAll sweep the config runs: (its name, the floor's key, its text, floor bytes, variants,
    sizes, chunks)."""
    from monta.units import format_bytes, parse_size

    a = cfg["alltoall"]
    if a["enabled"]:
        for i, c in enumerate(a["clusters"]):
            key = f"alltoall.clusters[{i}].min_chunk" if c.get("min_chunk") else "alltoall.min_chunk"
            floor = c.get("min_chunk") or a["min_chunk"]
            sizes = c.get("sizes") or a["sizes"]
            yield f"the sweep of {c['name']}", key, floor, parse_size(floor), a["variants"], sizes, a["chunks"]
    abl = cfg["ablation"]
    if not abl["enabled"]:
        return
    key = "ablation.cluster.min_chunk" if abl["cluster"].get("min_chunk") else "alltoall.min_chunk"
    floor = abl["cluster"].get("min_chunk") or a["min_chunk"]
    if abl["chunks"]:
        yield "ablation.chunks", key, floor, parse_size(floor), ["legacy", "monta"], abl["size"], abl["chunks"]
    if abl["tp"]:
        yield "ablation.tp", key, floor, parse_size(floor), a["variants"], abl["size"], a["chunks"]
    if abl["buffer_sizes"]:
        yield "ablation.buffer_sizes", key, floor, parse_size(floor), a["variants"], abl["buffer_sizes"], a["chunks"]
    if cfg["launcher"]["kind"] == "emulated":
        for gbps in abl["inter_gbps"]:  # the floor scaled to the ablation's rate (ratio_floor)
            sweep = f"ablation.inter_gbps {gbps} (the floor scaled to {format_bytes(ratio_floor(cfg, gbps))})"
            yield sweep, key, floor, ratio_floor(cfg, gbps), a["variants"], abl["size"], a["chunks"]


def chunk_floor(cfg: Mapping[str, Any]) -> str | None:
    """A floor above every chunk of a size leaves a chunked exchange no row there (one chunk always runs:
    only a chunk list without 1 can lose them all)."""
    from monta import validate as V
    from monta.bench.chunk_floor import empty_sizes
    from monta.units import format_bytes

    for sweep, key, text, floor, variants, spec, chunks in _sweeps(cfg):
        empty = empty_sizes(floor, variants, V.sizes(spec), chunks)
        if empty:
            return (
                f"config key {key} = {text!r}: in {sweep}, every chunk count ({', '.join(map(str, chunks))}) of "
                f"{format_bytes(empty[0])} holds chunks under {format_bytes(floor)}, so the chunked exchange has no "
                "row there; lower the floor, add chunk count 1, or use larger sizes"
            )
    return None
