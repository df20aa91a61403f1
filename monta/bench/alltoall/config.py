"""What crosses the process boundary of ``monta bench alltoall``: the validated sweep, built once by
``monta.bench.alltoall.build_config`` from the flags, written as JSON for the ranks and read back by
each (``monta.bench.alltoall.worker``). Every record carries it whole (``to_dict``) as its ``config``.

Each field's default and help are the flag's (``monta.runconfig.setting``; ``add_arguments`` reads them),
so a default lives here once; the check and the test aids sit in ``aids`` (``AlltoallAids``).

Torch-free at import.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from monta.runconfig import DEFAULT_GPUS_PER_NODE, DEFAULT_NODES, check_keys, default_of, plain, setting

MiB = 1 << 20

# --adaptive's knobs when it is on and they are not given: up to 40 iterations per size, until every paired
# ratio's 95% CI is within 4% of its value, for at most 180 s of extra iterations per size. Without
# --adaptive a run is exactly --iters (max_iters = iters, no CI target, no budget).
ADAPTIVE_DEFAULTS = {"max_iters": 40, "target_ci": 0.04, "budget_s": 180.0}


@dataclass(frozen=True)
class AlltoallAids:
    """The sweep's check and its TEST AIDS (``monta.testaids``): what verifies the results or breaks them on
    purpose, kept apart from what is measured. Every use is marked in the output and the records."""

    check: bool = setting(False, "verify every variant on fresh data after timing")
    inject_fault: bool = setting(False, "TEST AID: corrupt one chunk during the check (the Runner's Fault)")
    inject_slowdown: dict[str, Any] | None = setting(
        None,
        "TEST AID for the regression gate: slow VARIANT by FRACTION (e.g. monta:0.10) with a measured "
        "delay after each call; records carry injected_slowdown (default: none)",
    )


# The fields left out of to_dict at their defaults: records written before they existed stay as they were.
_OMITTED_AT_DEFAULT = ("routing", "mode", "capacity_factor", "min_chunk", "device")
_AIDS = tuple(f.name for f in dataclasses.fields(AlltoallAids))


@dataclass(frozen=True)
class AlltoallConfig:
    """One TP AllToAll sweep: the layout, the buffer, the exchanges and how each size is timed."""

    nodes: int = setting(DEFAULT_NODES, "nodes (emulated, or of the torchrun/srun job)")
    gpus_per_node: int = setting(DEFAULT_GPUS_PER_NODE, "ranks (GPUs) per node")
    tp: int | None = setting(None, "tensor-parallel size (default: a whole node)")
    ep: int | None = setting(None, "expert-parallel size (default: the DP degree)")
    sizes: tuple[int, ...] = setting(
        (1 * MiB, 2 * MiB, 4 * MiB, 8 * MiB, 16 * MiB),
        "per-rank dispatch buffer bytes: min:max:factor or a list (K/M/G suffixes)",
        text="1M:16M:2",
    )
    variants: tuple[str, ...] = setting(
        ("legacy", "deepspeed", "monta"), "comma list of exchanges", text="legacy,deepspeed,monta"
    )
    chunks: tuple[int, ...] = setting((2, 4), "monta chunk counts: comma list of integers, or 'auto'", text="2,4")
    dtype: str = setting("float32", "element type of the buffer")
    experts: int | None = setting(None, "experts E in the [E, C, M] buffer (default: EP)")
    hidden: int = setting(1024, "model dim M of the buffer")
    warmup: int = setting(2, "untimed iterations per size")
    iters: int = setting(
        5, "timed iterations per size (variants interleaved in each), exactly; with --adaptive the minimum"
    )
    adaptive: bool = setting(
        False,
        "adaptive repetition: after --iters, go on while a paired ratio's CI is wider than --target-ci, up to "
        "--max-iters or --budget-s",
    )
    max_iters: int = setting(0, "most iterations per size (0: exactly iters; --adaptive's default 40)")
    target_ci: float = setting(0.0, "stop once every paired ratio's 95% CI is narrower than this share of it")
    budget_s: float = setting(0.0, "time budget per size for the extra iterations, seconds (0 = none)")
    transport: str | None = setting(
        None,
        "gloo transport of the exchange: duplex (default: one TCP connection per direction) or "
        "native (gloo's own collectives: both directions share a connection and serialize)",
    )
    components: bool = setting(True, "also time the a2a-alone / ag-alone rows")
    out: str | None = setting(None, "JSONL records file (absolute)")
    append: bool = setting(False, "add to --out if it exists")
    experiment: str = setting("alltoall", "experiment name stored in the records")
    backend: str = setting("gloo", "torch.distributed backend (resolved: gloo or nccl)")
    topology: dict[str, Any] = setting(help="Topology.to_dict() plus its description ({}: none stated)", factory=dict)
    chunks_arg: str = setting("", "--chunks as given (e.g. 'auto'; default: the chunk counts' comma list)")
    topk: int = setting(1, "routes per token: the buffer holds E x C / (topk x capacity factor) tokens, routed top-k")
    routing: str = setting(
        "W0", "routing workload: W0 (balanced, default) .. W7, lognormal:maxvio=V, zipf:s=A (docs/routing.md)"
    )
    mode: str = setting(
        "dispatch",
        "what is timed: dispatch (the exchange's dispatch alone, default) or layer (the MoE layer's "
        "forward+backward around it: dispatch, a per-expert FFN of width --hidden, combine; docs/routing.md)",
    )
    capacity_factor: float = setting(
        1.0,
        "the buffer is DeepSpeed's capacity at CF: 1 (default) fills it at W0; 1.25 (GShard, Switch) "
        "puts 1/1.25 as many tokens in it, room a skewed routing fills before it drops",
    )
    min_chunk: int = setting(
        0,
        "run a chunk count at a size only where each chunk holds at least BYTES of a rank's buffer (e.g. 1M): "
        "smaller chunks' host work, not the links, sets their time on the emulator; records say what was left "
        "out (default 0: every count; docs/testbed.md)",
        text="0",
    )
    device: str = setting(
        "auto",
        "where each rank's buffers live: auto (CUDA with nccl, else the CPU); cuda with gloo puts several "
        "ranks on one GPU (cuda:LOCAL_RANK mod the GPUs: gloo over CUDA tensors, as tools/gpu_check.py runs it)",
    )
    aids: AlltoallAids = setting(help="the check and the test aids", factory=AlltoallAids)

    def __post_init__(self) -> None:
        """Tuples for the lists; the layout's defaults (TP a node, EP the DP degree, E = EP) and the derived
        settings (exactly ``iters`` without --adaptive, ``chunks_arg`` the chunks given) resolved here."""
        put = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731  (frozen)
        for name in ("sizes", "variants", "chunks"):
            put(name, tuple(getattr(self, name)))
        put("tp", self.gpus_per_node if self.tp is None else self.tp)
        put("ep", self.nodes * self.gpus_per_node // self.tp if self.ep is None else self.ep)
        put("experts", self.ep if self.experts is None else self.experts)
        put("max_iters", self.max_iters or self.iters)
        put("chunks_arg", self.chunks_arg or ",".join(map(str, self.chunks)))

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types (lists, not tuples), the aids' fields beside the others: the records' ``config``
        (the balanced routing's, dispatch mode's and capacity factor 1 left out: their records stay as they
        were before ``routing``, ``mode``, ``capacity_factor``, ``min_chunk`` and ``device`` existed)."""
        out = {f.name: plain(getattr(self, f.name)) for f in dataclasses.fields(self) if f.name != "aids"}
        out.update(plain(self.aids))
        for name in _OMITTED_AT_DEFAULT:
            if out[name] == default_of(AlltoallConfig, name):
                del out[name]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AlltoallConfig:
        """The inverse of ``to_dict`` (ValueError, one line, for a key no field holds)."""
        known = {f.name for f in dataclasses.fields(cls)} - {"aids"} | set(_AIDS)
        check_keys(cls, data, known)
        aids = AlltoallAids(**{k: data[k] for k in _AIDS if k in data})
        return cls(**{k: v for k, v in data.items() if k not in _AIDS}, aids=aids)

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls, text: str) -> AlltoallConfig:
        return cls.from_dict(json.loads(text))
