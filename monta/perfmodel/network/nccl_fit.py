"""Fit the cost model's per-collective link curves to nccl-tests measurements of one cluster.

For each (collective, link class) the fit finds ``Link(bandwidth_GBps, latency_us, efficiency)`` such
that the model's own formulas (``monta.perfmodel.network.collectives``) reproduce the measured times:

- a single-node run (every rank on one node) prices the intra link (NVLink) of that collective;
- a multi-node run prices the inter link (one NIC; the node has ``nics_per_node``) given the intra one,
  fitted from a single-node run of the same collective when one is given, the base cluster's otherwise.

The formulas are used as a black box: for each measured size the fit probes the model with the target
link at 1 GB/s and no latency (the transfer term A, in us at 1 GB/s), with no bandwidth cost (the count
k of latency terms) and infinitely fast (the other links' time o). The model's time is then
max(o, k L + A / (B e(S))): the fit chooses the latency L, the large-message bandwidth B and a
non-decreasing efficiency curve e with one knot per 4x in size (e = 1 at the largest knot), minimising
the relative error of the time. Points the other link hides (o above the measurement) say nothing
about the target and only count in the residuals.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from monta.hardware.links import Cluster, Link
from monta.parallel import axis_shapes
from monta.perfmodel.network import collectives
from monta.perfmodel.network.nccltests import OPS, NcclTestsLog, canonical

MODEL_OPS = tuple(OPS.values())  # allreduce, allgather, reducescatter, alltoall
KNOT_RATIO = 4.0  # at most one efficiency knot per 4x in size: a coarse curve, not a lookup table
_FAST = Link(1e12, 0.0)  # a link whose time is negligible next to any measurement


@dataclass(frozen=True)
class Point:
    """One measured collective: nccl-tests' size (bytes) and time (us) on ``nodes`` x ``gpus_per_node``."""

    op: str
    nodes: int
    gpus_per_node: int
    size_bytes: float
    time_us: float
    source: str = ""

    @property
    def ranks(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def link(self) -> str:
        return "intra" if self.nodes == 1 else "inter"

    @property
    def busbw_GBps(self) -> float:
        return collectives.busbw_GBps(self.op, self.size_bytes, self.time_us, self.ranks)

    @classmethod
    def of(
        cls,
        collective: str,
        nodes: int,
        gpus_per_node: int,
        size_bytes: float,
        time_us: float | None = None,
        busbw_GBps: float | None = None,
        source: str = "",
    ) -> Point:
        """A published row: time, or bus bandwidth (nccl-tests convention) when only that is given."""
        op = _model_op(collective)
        if nodes < 1 or gpus_per_node < 1 or nodes * gpus_per_node < 2:
            raise ValueError(f"{source or collective}: {nodes} x {gpus_per_node} ranks: a collective needs >= 2")
        if not size_bytes or size_bytes <= 0:
            raise ValueError(f"{source or collective}: size_bytes={size_bytes!r}: need a size > 0")
        if time_us is None:
            if not busbw_GBps or busbw_GBps <= 0:
                raise ValueError(f"{source or collective}: give time_us or busbw_GBps (> 0)")
            n = nodes * gpus_per_node
            unit = collectives.busbw_GBps(op, size_bytes, 1.0, n)  # busbw at 1 us; busbw scales as 1/time
            time_us = unit / busbw_GBps
        if time_us <= 0:
            raise ValueError(f"{source or collective}: time_us={time_us!r}: need a time > 0")
        return cls(op, int(nodes), int(gpus_per_node), float(size_bytes), float(time_us), source)


def _model_op(name: str) -> str:
    return name if name in MODEL_OPS else OPS[canonical(name)]


def points_from_log(log: NcclTestsLog) -> list[Point]:
    """The out-of-place rows with a size and a time (size 0 rows time only the launch)."""
    nodes, gpn = log.nodes, log.gpus_per_node
    return [
        Point(log.op, nodes, gpn, float(r.size), float(r.time_us), log.source)
        for r in log.rows
        if r.size > 0 and r.time_us > 0
    ]


def predict_us(cluster: Cluster, op: str, nodes: int, gpus_per_node: int, size_bytes: float) -> float:
    """The model's time for nccl-tests' ``op`` at ``size_bytes`` with every rank of every node taking part."""
    g = axis_shapes(gpus_per_node, lanes=nodes * gpus_per_node)["dp"]  # the whole world: one DP group of TP 1
    cl = cluster.with_nodes(nodes, gpus_per_node)
    if op == "alltoall":
        return collectives.alltoall(size_bytes, g, cl).time_us
    if op == "allgather":
        return collectives.allgather(size_bytes / g.size, g, cl).time_us  # nccl-tests' size is the gathered output
    if op == "reducescatter":
        return collectives.reducescatter(size_bytes, g, cl).time_us  # nccl-tests' size is the input
    if op == "allreduce":
        return collectives.allreduce(size_bytes, g, cl).time_us
    raise ValueError(f"unknown collective {op!r}")


def with_link(cluster: Cluster, op: str, cls: str, link: Link) -> Cluster:
    """``cluster`` with its own curve for ``op`` on ``cls`` (any earlier one for that pair replaced)."""
    kept = tuple((k, lk) for k, lk in cluster.collective_links if k != (op, cls))
    return replace(cluster, collective_links=kept + (((op, cls), link),))


@dataclass
class Residual:
    source: str
    size_bytes: float
    measured_busbw: float
    fitted_busbw: float
    hidden: bool  # the other link class sets the model's time at this size

    @property
    def error(self) -> float:
        return self.fitted_busbw / self.measured_busbw - 1.0


@dataclass
class LinkFit:
    op: str
    cls: str
    link: Link | None  # None: no size where this link sets the time (nothing learned)
    residuals: list[Residual] = field(default_factory=list)

    def errors(self, min_size: float = 0.0) -> list[float]:
        return [r.error for r in self.residuals if r.size_bytes >= min_size]


@dataclass
class Calibration:
    cluster: Cluster
    fits: list[LinkFit]

    def fit(self, op: str, cls: str) -> LinkFit:
        for f in self.fits:
            if (f.op, f.cls) == (op, cls):
                return f
        raise KeyError((op, cls))


def fit_cluster(base: Cluster, data, nodes: int | None = None) -> Cluster:
    """``base`` with the links fitted to ``data`` (``NcclTestsLog`` and/or ``Point`` objects)."""
    return calibrate(base, data, nodes).cluster


def calibrate(base: Cluster, data, nodes: int | None = None) -> Calibration:
    """Fit every (collective, link class) that ``data`` measures; intra links first, then inter ones
    (which need the intra time). The cluster takes the measured GPUs per node and node count."""
    points = []
    for item in data:
        points.extend(points_from_log(item) if isinstance(item, NcclTestsLog) else [item])
    if not points:
        raise ValueError("no measurements to fit: give nccl-tests logs or points with a size and a time")
    gpn = {p.gpus_per_node for p in points if p.nodes > 1} or {p.gpus_per_node for p in points}
    if len(gpn) > 1:
        raise ValueError(
            f"the multi-node measurements have {sorted(gpn)} GPUs per node: calibrate one node type at a time"
        )
    # The fit inverts the link model's own formulas, end to end: NCCL's protocol model (nccl_tuning) stays out of
    # it, and the fitted cluster is priced as fitted (its curves hold what NCCL did at each measured size).
    cluster = replace(base, nccl_arch="").with_nodes(nodes or max(p.nodes for p in points), gpn.pop())
    fits = []
    for cls in ("intra", "inter"):
        for op in MODEL_OPS:
            group = [p for p in points if p.op == op and p.link == cls]
            if not group:
                continue
            fit = _fit_link(cluster, op, cls, group)
            if fit.link is not None:
                cluster = with_link(cluster, op, cls, fit.link)
            fits.append(fit)
    # Residuals against the final cluster: an inter fit can change nothing intra, but report what
    # the returned cluster predicts, nothing else.
    for fit in fits:
        fit.residuals = _residuals(
            cluster, [p for p in points if p.op == fit.op and p.link == fit.cls], fit.op, fit.cls
        )
    return Calibration(cluster, fits)


@dataclass
class _Probe:
    """Per point: the other links' time o, the latency count k, the transfer term A (us at 1 GB/s)."""

    other: np.ndarray
    k: np.ndarray
    a: np.ndarray
    size: np.ndarray
    time: np.ndarray


def _probe(cluster: Cluster, op: str, cls: str, pts: list[Point]) -> _Probe:
    other_cls = "inter" if cls == "intra" else "intra"
    alone = with_link(cluster, op, other_cls, _FAST)

    def run(cl: Cluster) -> np.ndarray:
        return np.array([predict_us(cl, op, p.nodes, p.gpus_per_node, p.size_bytes) for p in pts])

    return _Probe(
        other=run(with_link(cluster, op, cls, _FAST)),
        k=run(with_link(alone, op, cls, Link(1e12, 1.0))),
        a=run(with_link(alone, op, cls, Link(1.0, 0.0))),
        size=np.array([p.size_bytes for p in pts]),
        time=np.array([p.time_us for p in pts]),
    )


def _knots(sizes: np.ndarray, shift: float) -> np.ndarray:
    """Knots ``KNOT_RATIO`` apart from the largest size down (offset by ``shift`` x), one at or
    below the smallest size so every size lies between two knots or on the clamped top."""
    top = sizes.max() / shift
    out = [top]
    while out[-1] > sizes.min():
        out.append(out[-1] / KNOT_RATIO)
    return np.array(sorted(out))


def _hat(sizes: np.ndarray, knots: np.ndarray) -> np.ndarray:
    """Interpolation weights of each size on the knots: linear in log2(size), clamped at the ends
    (exactly ``Link.eff``)."""
    x, kx = np.log2(sizes), np.log2(knots)
    w = np.zeros((len(sizes), len(knots)))
    for i, xi in enumerate(x):
        if xi <= kx[0]:
            w[i, 0] = 1.0
        elif xi >= kx[-1]:
            w[i, -1] = 1.0
        else:
            j = int(np.searchsorted(kx, xi)) - 1
            t = (xi - kx[j]) / (kx[j + 1] - kx[j])
            w[i, j], w[i, j + 1] = 1.0 - t, t
    return w


def _nnls(a: np.ndarray, b: np.ndarray, iters: int = 200) -> np.ndarray:
    """Non-negative least squares (Lawson-Hanson active set): argmin |a x - b| with x >= 0."""
    n = a.shape[1]
    x, passive = np.zeros(n), np.zeros(n, dtype=bool)
    for _ in range(iters):
        grad = a.T @ (b - a @ x)
        if passive.all() or grad[~passive].max(initial=-np.inf) <= 1e-12:
            break
        passive[np.argmax(np.where(passive, -np.inf, grad))] = True
        while True:
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(a[:, passive], b, rcond=None)[0]
            if (z[passive] > 0).all():
                x = z
                break
            neg = passive & (z <= 0)
            alpha = np.min(x[neg] / (x[neg] - z[neg]))
            x = x + alpha * (z - x)
            passive &= x > 1e-15
    return x


def _monotone_rate(sizes: np.ndarray, need: np.ndarray, knots: np.ndarray) -> np.ndarray:
    """Knot values g (GB/s), non-decreasing and positive, minimising sum((g(S_i) / need_i - 1)^2):
    g_k = d_0 + ... + d_k with every d >= 0 turns the shape constraint into non-negativity."""
    w = _hat(sizes, knots) / need[:, None]
    cum = np.tril(np.ones((len(knots), len(knots))))  # g = cum @ d
    d = _nnls(w @ cum, np.ones(len(sizes)))
    g = cum @ d
    return np.maximum(g, 1e-9 * max(g.max(), 1e-9))


def _fit_link(cluster: Cluster, op: str, cls: str, pts: list[Point]) -> LinkFit:
    pr = _probe(cluster, op, cls, pts)
    shown = pr.time > pr.other * 1.02  # the target link, not the other one, sets these times
    if not shown.any():
        return LinkFit(op, cls, None)
    t, k, a, s = pr.time[shown], pr.k[shown], pr.a[shown], pr.size[shown]
    lat_max = float(np.min(t / k)) * 0.98
    # One knot per 4x over every measured size. Restricting the knots to the sizes past the latency
    # plateau was tried: the clamped efficiency then mis-fits the plateau's edge, and the latency
    # chosen to compensate cost up to 17% at 16-32 MiB on the A3 Mega log.
    best = None
    for shift in (1.0, math.sqrt(KNOT_RATIO)):
        knots = _knots(s, shift)
        for lat in np.linspace(0.0, lat_max, 50):
            g = _monotone_rate(s, a / (t - k * lat), knots)
            link = Link(float(g[-1]), float(lat), tuple(zip(knots.tolist(), (g / g[-1]).tolist())))
            model = np.maximum(pr.other, pr.k * lat + pr.a / (link.bandwidth_GBps * _effs(link, pr.size)))
            err = float(np.sum((pr.time / model - 1.0) ** 2))
            if best is None or err < best[0]:
                best = (err, link)
    return LinkFit(op, cls, best[1])


def _effs(link: Link, sizes: np.ndarray) -> np.ndarray:
    return np.array([link.eff(float(x)) for x in sizes])


def _residuals(cluster: Cluster, pts: list[Point], op: str, cls: str) -> list[Residual]:
    hide = with_link(cluster, op, cls, _FAST)
    out = []
    for p in pts:
        t = predict_us(cluster, op, p.nodes, p.gpus_per_node, p.size_bytes)
        t_other = predict_us(hide, op, p.nodes, p.gpus_per_node, p.size_bytes)
        fitted = collectives.busbw_GBps(op, p.size_bytes, t, p.ranks)
        out.append(Residual(p.source, p.size_bytes, p.busbw_GBps, fitted, hidden=t_other >= t * 0.999))
    return out
