"""What crosses the process boundary of ``monta bench alltoall``: the validated sweep, built once by
``monta.bench.alltoall.build_config`` from the flags, written as JSON for the ranks and read back by
each (``monta.bench.alltoall_worker``). Every record carries it whole (``to_dict``) as its ``config``.

Torch-free at import.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class AlltoallConfig:
    nodes: int
    gpus_per_node: int
    tp: int
    ep: int
    sizes: tuple[int, ...]  # bytes of one rank's [E, C, M] dispatch buffer, per size
    variants: tuple[str, ...]  # exchanges (the core's or plugins'), in the order given
    chunks: tuple[int, ...]  # chunk counts of the chunked exchanges (--chunks auto resolved)
    dtype: str
    experts: int
    hidden: int
    warmup: int
    iters: int  # timed iterations per size: exactly, or with ``adaptive`` the minimum
    adaptive: bool
    max_iters: int
    target_ci: float
    budget_s: float
    transport: str | None  # None: the backend's default (monta.comm.duplex.transport_for)
    inject_slowdown: dict[str, Any] | None  # TEST AID: {"variant", "fraction"} (monta.testaids.Slowdown)
    check: bool
    components: bool  # also time the a2a-alone / ag-alone rows
    out: str | None
    append: bool
    experiment: str
    backend: str
    inject_fault: bool  # TEST AID: monta.testaids.FAULT during the check
    topology: dict[str, Any]  # Topology.to_dict() plus its "description"
    chunks_arg: str  # --chunks as given (e.g. "auto")
    topk: int = 1  # routes per token of the balanced routing (monta.bench.routes)
    routing: str = "W0"  # --routing: the point's routing spec (monta.routing; W0 the balanced one)
    mode: str = "dispatch"  # --mode: what is timed, the dispatch alone or the MoE layer's forward+backward
    capacity_factor: float = 1.0  # --capacity-factor: the buffer is the capacity for E C / (k cf) tokens
    min_chunk: int = 0  # --min-chunk: bytes a chunk holds at least, else its count does not run (chunk_floor)
    device: str = "auto"  # --device: where the buffers live (auto: CUDA with nccl, else the CPU)

    def __post_init__(self) -> None:
        for name in ("sizes", "variants", "chunks"):
            object.__setattr__(self, name, tuple(getattr(self, name)))

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types (lists, not tuples), in field order: the records' ``config`` (the balanced
        routing's, dispatch mode's and capacity factor 1 left out: their records stay as they were before
        ``routing``, ``mode``, ``capacity_factor``, ``min_chunk`` and ``device`` existed)."""
        out = {
            f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v for f in dataclasses.fields(self)
        }
        if out["routing"] == "W0":
            del out["routing"]
        if out["mode"] == "dispatch":
            del out["mode"]
        if out["capacity_factor"] == 1.0:
            del out["capacity_factor"]
        if not out["min_chunk"]:
            del out["min_chunk"]
        if out["device"] == "auto":
            del out["device"]
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls, text: str) -> AlltoallConfig:
        return cls(**json.loads(text))
