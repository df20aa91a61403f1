"""Rank side of ``monta bench alltoall``: build the exchange on this rank (``Runner``), warm it up,
run the timed loop (variants interleaved, rotated each iteration; ``time_sizes``) and check every
variant on fresh data (``check``). ``monta.bench.alltoall.worker`` strings these together.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from monta.bench import chunk_floor
from monta.bench.adaptive import StopRule
from monta.bench.alltoall.config import AlltoallConfig
from monta.bench.hostload import HostLoad, own_run_delay_s
from monta.bench.routes import PointRouting, SizeInput, make_input, point_routing
from monta.comm import exchange as ex
from monta.comm.accounting import TrafficMeter
from monta.comm.collectives import all_gather
from monta.comm.dispatcher import build_dispatcher
from monta.mesh import build_mesh
from monta.parallel import ParallelLayout
from monta.progress import beat, live
from monta.testaids import Fault, Slowdown
from monta.units import format_bytes, format_size

# The rows that are no exchange: the two halves of the core pass alone (for the overlap bound).
COMPONENTS = ("a2a", "ag")
A2A_SPEC = ex.PassSpec(True, False)  # drop to the capacity slice, AllToAll, no gather


def buffer_shape(size_bytes: int, experts: int, hidden: int, elsize: int, tp: int) -> tuple[int, int, int]:
    per_row = experts * hidden * elsize
    if size_bytes % per_row or (size_bytes // per_row) % tp:
        raise ValueError(
            f"size {size_bytes} B is not a whole [E={experts}, C, M={hidden}] buffer with C "
            f"divisible by TP={tp}; use sizes that are multiples of {per_row * tp} B"
        )
    return experts, size_bytes // per_row, hidden


def rank_input(
    dp_index: int, size_idx: int, shape, dtype, salt: int = 0, k: int = 1, routing: PointRouting | None = None
) -> SizeInput:
    """This rank's tokens, routing and buffer for one size (``monta.bench.routes.make_input``)."""
    return make_input(dp_index, size_idx, shape, dtype, k, salt, routing=routing)


def variant_rows(cfg: AlltoallConfig) -> list[tuple[str, int]]:
    """(variant, chunks) rows the sweep times: every chunk count of a chunked exchange, the others
    once, and under TP the two halves alone (a2a, ag) unless the config leaves them out."""
    from monta import variants as registry

    out = []
    for v in cfg.variants:
        if registry.exchange(v).chunked:
            out += [(v, c) for c in cfg.chunks]
        else:
            out.append((v, 1))
    if cfg.tp > 1 and cfg.components and cfg.mode == "dispatch":  # the halves are a dispatch's, not a layer's
        out += [("a2a", 1), ("ag", 1)]
    return out


def check_chunks(cfg: AlltoallConfig, variants, shapes) -> None:
    """A chunked exchange's chunk count must fit the capacity slice of every size."""
    from monta import variants as registry

    for s, shape in zip(cfg.sizes, shapes):
        for v, c in variants:
            if v in cfg.variants and registry.exchange(v).chunked and c > shape[1] // cfg.tp:
                raise ValueError(f"chunks={c} exceeds the capacity slice {shape[1] // cfg.tp} at size {s} B")


class Runner:
    """Everything a rank needs to run one variant on one buffer."""

    def __init__(self, cfg: AlltoallConfig):
        self.cfg = cfg
        self.layout = ParallelLayout(cfg.nodes, cfg.gpus_per_node, cfg.tp, cfg.ep)
        self.mesh = build_mesh(self.layout)
        from monta.comm.duplex import transport_for

        self.transport = cfg.transport or transport_for(cfg.backend)
        self.exchange_mesh = ex.exchange_mesh(self.mesh, transport=self.transport)  # EP/TP on the bench's transport
        self.fault = Fault()  # TEST AID: --inject-fault's, on during the check only; every pass here reports to it
        self.meter = TrafficMeter(self.layout, self.mesh.rank, fault=self.fault)
        self.rank = self.mesh.rank
        # every exchange (the core's or a plugin's) as the MoE layer builds it, once
        self.dispatchers = {v: build_dispatcher(v, self.exchange_mesh, 1, cfg.tp > 1, self.meter) for v in cfg.variants}
        self.routing_spec = cfg.routing
        self._layer = None  # layer mode's MoE layer (layer.LayerRows), built on first use

    @property
    def layer_rows(self):
        """Layer mode's MoE layer, built (collectively: every rank reaches its first use together) once."""
        if self._layer is None:
            from monta.bench.alltoall.layer import LayerRows

            self._layer = LayerRows(self)
        return self._layer

    def point(self, shape) -> PointRouting | None:
        """The point's one routing (None: the balanced one), the same on every rank and for every exchange."""
        cf = self.cfg.capacity_factor
        if (self.routing_spec != "W0" or cf != 1.0) and self.cfg.ep != self.layout.dp:
            raise ValueError(
                f"--routing {self.routing_spec} at capacity factor {cf:g} needs --ep equal to the data-parallel "
                f"size {self.layout.dp}"
            )
        return point_routing(
            self.routing_spec, tuple(shape), self.cfg.topk, self.cfg.ep, self.layout.nodes, self.cfg.tp, cf
        )

    def runs(self, size: int, variant: str, chunks: int) -> bool:
        """Whether row (``variant``, ``chunks``) runs at ``size`` (``--min-chunk``: monta.bench.chunk_floor)."""
        return chunk_floor.runs(self.cfg.min_chunk, self.cfg.variants, size, variant, chunks)

    def capacity_based(self, variant: str) -> bool:
        """A buffer exchange or a component row (they drop at the capacity); False: token-level, dropless."""
        d = self.dispatchers.get(variant)
        return d is None or d.capacity_passes is not None

    def run(self, variant: str, chunks: int, inp: SizeInput) -> torch.Tensor:
        """One dispatch of exchange ``variant`` (or a component row): the expert input [E, C, M]; in
        layer mode one forward+backward of the MoE layer around it: the layer's output [S, M]."""
        if self.cfg.mode == "layer":
            return self.layer_rows.run(variant, chunks, inp)[0]
        x = inp.buffer
        if variant == "a2a":
            return ex.run_pass(x, A2A_SPEC, self.exchange_mesh, chunks, self.meter, variant)
        if variant == "ag":
            tp = self.exchange_mesh.tp
            E, C, M = x.shape
            local = x.view(E, tp.size, C // tp.size, M)[:, tp.index].contiguous()
            out = local.new_empty((tp.size,) + tuple(local.shape))
            self.meter.all_gather(tp.ranks, local.numel() * local.element_size(), "ag")
            all_gather(out, local, tp.group).wait()
            return out
        d = self.dispatchers[variant]
        passes = d.capacity_passes
        if passes is not None:  # a buffer exchange: its pass alone (DeepSpeed's encode is the layer's compute)
            return passes.run_pass(x, chunks, variant)
        inp = inp.for_exchange(False)  # a token-level exchange is dropless: every route at its own capacity
        with torch.no_grad():
            return d.dispatch(inp.tokens, inp.plan)[0]

    def expected(self, variant: str, size_idx: int, shape, dtype, salt: int) -> torch.Tensor:
        """What ``run`` must return, rebuilt from the deterministic inputs of the peers."""
        E, C, M = shape
        tp, tpr, k = self.exchange_mesh.tp.size, self.exchange_mesh.tp.index, self.cfg.topk
        pr, cap = self.point(shape), self.capacity_based(variant)
        if variant == "ag":
            x = rank_input(self.rank // tp, size_idx, shape, dtype, salt, k, pr).buffer
            return x.view(E, tp, C // tp, M).transpose(0, 1).contiguous()
        ep_ranks = self.exchange_mesh.ep.ranks
        me = ep_ranks.index(self.rank)
        nle = E // len(ep_ranks)
        blocks = [
            rank_input(r // tp, size_idx, shape, dtype, salt, k, pr).for_exchange(cap).buffer[me * nle : (me + 1) * nle]
            for r in ep_ranks
        ]
        full = torch.cat(blocks, 0)
        if variant == "a2a":
            return full.view(E, tp, C // tp, M)[:, tpr].contiguous()
        return full


def sync(x: torch.Tensor) -> None:
    if x.is_cuda:
        torch.cuda.synchronize()


def warm_up(r: Runner, variants, inputs, sizes, warmup: int) -> None:
    """Every size and variant first (connections, allocator), as nccl-tests does."""
    for si, x in enumerate(inputs):
        beat(f"warm-up of size {format_size(sizes[si])}")
        for v, c in variants:
            if not r.runs(sizes[si], v, c):  # under the chunk floor: not run at this size
                continue
            for _ in range(warmup):
                r.run(v, c, x)
        live(f"progress: warmed up {_point(sizes, si)}: {warmup} x {_rows(variants)}")
    sync(inputs[0].buffer)


def _point(sizes, si: int) -> str:
    return f"size {format_bytes(sizes[si])} ({si + 1}/{len(sizes)})"


def _rows(variants) -> str:
    """The variant rows for a progress line: "2 variant rows (deepspeed, monta2)"."""
    from monta.bench.adaptive import row_label

    return f"{len(variants)} variant rows ({', '.join(row_label(v, c) for v, c in variants)})"


def _keep_round(tm: Timings, si: int, ran: list[int], took, clean, cpu, spans) -> None:
    """One timed iteration's figures, reduced over the ranks, into ``tm`` for the variant rows that ran."""
    for vi in ran:
        if clean[vi] > 0:
            tm.clean[si][vi].append(float(clean[vi]))
        tm.times[si][vi].append(float(took[vi]))
        if spans is not None:  # (-first start, last end)
            tm.span_times[si][vi].append(float(spans[1, vi] + spans[0, vi]))
        tm.cpu[si][vi].append(float(cpu[vi]))


def host_clock_shared() -> bool:
    """Whether every rank runs on this rank's kernel (one boot id), so that their monotonic clocks are one
    (network namespaces do not move it). Collective."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            mine = f.read().strip()
    except OSError:
        mine = None
    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, mine)
    return mine is not None and all(b == mine for b in every)


def _grid(n_sizes: int, n_variants: int) -> list[list[list]]:
    return [[[] for _ in range(n_variants)] for _ in range(n_sizes)]


@dataclass
class Timings:
    """What the timed loop measured, per size and variant row ([size][variant][iteration] lists)."""

    n_sizes: int
    n_variants: int
    times: list = field(init=False)  # s, the slowest rank's, per iteration
    # s, per iteration: from the first rank's start to the last rank's end on the host's one clock, where every
    # rank runs on one kernel (the emulator; ``host_clock_shared``), else empty. A world barrier releases the
    # ranks apart (on the emulator up to tens of ms at the pipeline's clocks, hundreds at p4de's), and a rank
    # released late times only its own part: the slowest rank's own time can read under the bytes' time.
    span_times: list = field(init=False)
    cpu: list = field(init=False)  # s of CPU time, averaged over ranks
    clean: list = field(init=False)  # TEST AID: the injected variant's times without its delay
    spans: list = field(init=False)  # (start, end) perf_counter of each call on this rank (rank 0: host load)
    stop_note: list = field(init=False)  # per size: why its iterations ended
    waits: torch.Tensor = field(init=False)  # [size, variant, (scheduler run delay, wall time)] of this rank
    bytes_per_call: dict = field(default_factory=dict)  # (size, variant) -> (inter, intra) bytes this rank sent
    meta_per_call: dict = field(default_factory=dict)  # (size, variant) -> inter-node routing metadata bytes

    def __post_init__(self) -> None:
        self.times = _grid(self.n_sizes, self.n_variants)
        self.span_times = _grid(self.n_sizes, self.n_variants)
        self.cpu = _grid(self.n_sizes, self.n_variants)
        self.clean = _grid(self.n_sizes, self.n_variants)
        self.spans = _grid(self.n_sizes, self.n_variants)
        self.stop_note = [""] * self.n_sizes
        self.waits = torch.zeros(self.n_sizes, self.n_variants, 2, dtype=torch.float64)


def time_sizes(
    r: Runner, variants, inputs, sizes, rule: StopRule, slowdown: Slowdown, load: HostLoad | None
) -> Timings:
    """The timed loop: per size, iterations of every variant row (interleaved, the order rotated each
    iteration so drift and noise hit all alike) until ``rule`` stops it; rank 0 decides, all follow."""
    world = r.layout.world_size
    tm = Timings(len(inputs), len(variants))
    shared = host_clock_shared()
    for si, x in enumerate(inputs):
        t_size = time.perf_counter()
        it = 0
        while True:
            beat(f"timing size {format_size(sizes[si])} ({si + 1}/{len(inputs)}), iteration {it + 1}")
            round_t = torch.zeros(len(variants), dtype=torch.float64)
            # each call's (-start, end) on this host's monotonic clock: one MAX reduce gives the first start, last end
            round_se = torch.full((2, len(variants)), -float("inf"), dtype=torch.float64)
            round_c = torch.zeros(len(variants), dtype=torch.float64)
            round_clean = torch.zeros(len(variants), dtype=torch.float64)  # before an injected delay
            k = it % len(variants)
            for vi in list(range(k, len(variants))) + list(range(k)):
                v, c = variants[vi]
                if not r.runs(sizes[si], v, c):  # under the chunk floor: not timed, its lists stay empty
                    continue
                r.meter.reset()
                d0 = own_run_delay_s()
                dist.barrier()
                c0, t0 = time.process_time(), time.perf_counter()
                r.run(v, c, x)
                sync(x.buffer)
                took = time.perf_counter() - t0
                if slowdown.applies(v):  # TEST AID (--inject-slowdown): a measured delay after the call
                    round_clean[vi] = took
                    took += slowdown.delay(tm.clean[si][vi], took)
                t1 = time.perf_counter()
                round_t[vi] = took
                round_se[0, vi], round_se[1, vi] = -t0, t0 + took
                round_c[vi] = time.process_time() - c0
                d1 = own_run_delay_s()
                if d0 is not None and d1 is not None:
                    tm.waits[si, vi, 0] += d1 - d0
                    tm.waits[si, vi, 1] += t1 - t0
                if load is not None:
                    tm.spans[si][vi].append((t0, t1))
                tm.bytes_per_call[(si, vi)] = (r.meter.inter, r.meter.intra)
                tm.meta_per_call[(si, vi)] = r.meter.bytes("inter", op="meta")
            dist.all_reduce(round_t, op=dist.ReduceOp.MAX)  # an iteration lasts until its slowest rank is done
            if shared:
                dist.all_reduce(round_se, op=dist.ReduceOp.MAX)
            if slowdown.variant is not None:
                dist.all_reduce(round_clean, op=dist.ReduceOp.MAX)
            dist.all_reduce(round_c, op=dist.ReduceOp.SUM)
            ran = [vi for vi in range(len(variants)) if r.runs(sizes[si], *variants[vi])]
            _keep_round(tm, si, ran, round_t, round_clean, round_c / world, round_se if shared else None)
            it += 1
            # Rank 0 decides whether to go on and tells everyone (one small broadcast per round).
            go = torch.zeros(1, dtype=torch.int64)
            if r.rank == 0:
                note = rule.decide(tm.times[si], it, time.perf_counter() - t_size, seed=si)
                if note is None:
                    go[0] = 1
                else:
                    tm.stop_note[si] = note
            dist.broadcast(go, 0)
            if not int(go[0]):
                break
        if r.rank == 0:
            print(
                f"# timed {format_size(sizes[si])} ({si + 1}/{len(inputs)}): {it} iterations, "
                f"{time.perf_counter() - t_size:.1f} s ({tm.stop_note[si]})",
                file=sys.stderr,
                flush=True,
            )
            live(f"progress: timed {_point(sizes, si)}: {it} iterations of {_rows(variants)}, {tm.stop_note[si]}")
    return tm


def check(r: Runner, variants, shapes, sizes, dtype, device, inject_fault: bool) -> torch.Tensor:
    """Wrong elements per size and variant row (summed over ranks), each variant run on fresh data
    and compared with what the peers' deterministic inputs make it; ``inject_fault``: TEST AID.
    Under a skewed routing the expected output of a capacity exchange is stock DeepSpeed's buffer of the
    same routing (its dropped routes nowhere), of a dropless one the buffer at the dropless capacity."""
    return check_routes(r, variants, shapes, sizes, dtype, device, inject_fault)[0]


def check_routes(r: Runner, variants, shapes, sizes, dtype, device, inject_fault: bool):
    """``check``'s wrong elements and, per size and variant row, the routes its output holds (non-zero
    expert-input rows over the ranks, once per TP group): equal across the capacity exchanges when they
    drop the same routes, all routes for a dropless one."""
    wrong = torch.zeros(len(shapes), len(variants), dtype=torch.int64)
    held = torch.zeros(len(shapes), len(variants), dtype=torch.int64)
    r.fault.enabled = inject_fault
    try:
        for si, shp in enumerate(shapes):
            beat(f"checking size {format_size(sizes[si])}")
            pr = r.point(shp)
            for vi, (v, c) in enumerate(variants):
                if not r.runs(sizes[si], v, c):
                    continue
                x = rank_input(r.rank // r.cfg.tp, si, shp, dtype, 1, r.cfg.topk, pr).to(device)  # fresh data
                got = r.run(v, c, x).cpu()
                wrong[si, vi] = int((got != r.expected(v, si, shp, dtype, salt=1)).sum())
                if v not in COMPONENTS and r.exchange_mesh.tp.index == 0:
                    held[si, vi] = int((got != 0).any(-1).sum())
            live(f"progress: checked {_point(sizes, si)}")
    finally:
        r.fault.enabled = False
    dist.all_reduce(wrong, op=dist.ReduceOp.SUM)
    dist.all_reduce(held, op=dist.ReduceOp.SUM)
    return wrong, held


def check_layer(r: Runner, variants, shapes, sizes, dtype, device, inject_fault: bool) -> torch.Tensor:
    """Layer mode's check: per size and variant row, the elements of the layer's output and input gradient
    (fresh data) that differ from stock DeepSpeed's on the same routing, summed over ranks: at the
    buffer's capacity for a capacity exchange, at the dropless capacity for a token-level one."""
    from monta.bench.alltoall.layer import wrong_elements

    wrong = torch.zeros(len(shapes), len(variants), dtype=torch.int64)
    r.fault.enabled = inject_fault  # TEST AID: corrupts the core's pass, never stock DeepSpeed's
    try:
        for si, shp in enumerate(shapes):
            beat(f"checking the layer at size {format_size(sizes[si])}")
            x = rank_input(r.rank // r.cfg.tp, si, shp, dtype, 1, r.cfg.topk, r.point(shp)).to(device)
            refs: dict[bool, tuple] = {}  # every rank asks for them in the same order (collective)
            for vi, (v, c) in enumerate(variants):
                if not r.runs(sizes[si], v, c):
                    continue
                cap = r.capacity_based(v)
                if cap not in refs:
                    refs[cap] = r.layer_rows.reference(x, cap)
                wrong[si, vi] = wrong_elements(r.layer_rows.run(v, c, x), refs[cap])
            live(f"progress: checked the layer at {_point(sizes, si)}")
    finally:
        r.fault.enabled = False
    dist.all_reduce(wrong, op=dist.ReduceOp.SUM)
    return wrong
