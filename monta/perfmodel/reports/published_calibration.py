"""The calibrated columns of ``monta predict published``: each row priced on its cluster with the link curves fitted
(``monta calibrate``'s fit, :mod:`monta.perfmodel.network.nccl_fit`) on OTHER rows of the same hardware and node
count that their sources call healthy (:data:`CALIBRATE_FROM`):

- **leave one row out**: every other such row;
- **leave one source out**: only the rows of other sources (a source's rows share its setup and its mistakes, so
  they do not vouch for each other). The grouping is the file's ``source`` column (else ``source_url``); a row
  without either is its own source. Renaming sources consistently changes nothing.

A fit prices only near what it saw: a row is calibrated only when a point of the same collective lies within
:data:`COVER` of its size (the fit's knots are 4x apart; far outside its points it extrapolates a latency or a
rate it never measured). Null otherwise, with the reason.
"""

from __future__ import annotations

from typing import Any

from monta.hardware.links import Cluster
from monta.perfmodel.reports.published_rows import NCCL_TESTS, PLATEAU_BYTES, Row, gpu_file, kernel_kind, predict_row

# Rows a calibration may learn from: what their sources call healthy, or healthy but read off approximately.
CALIBRATE_FROM = ("healthy", "approximate")
COVER = 16.0  # a fitted point of the row's collective within this factor of its size


def _hardware_key(row: Row, cluster: Cluster) -> tuple:
    """Rows that calibrate each other: the same node type (GPU file, GPUs, NICs and their rate) and node count.
    The node count matters: a 2-node AllReduce runs NCCL's tree, whose network gain a fitted curve absorbs."""
    return (
        row.text("cluster") or gpu_file(row.text("gpu")),
        cluster.gpus_per_node,
        cluster.nics_per_node if cluster.nodes > 1 else 0,
        round(cluster.inter.bandwidth_GBps, 3) if cluster.nodes > 1 else 0,
        cluster.nodes,
    )


def _fit_point(row: Row, cluster: Cluster):
    """A row as a point of ``monta calibrate``'s fit, or None (not an nccl-tests row with a size and a time or
    bandwidth)."""
    from monta.perfmodel.network.nccl_fit import Point

    S = row.num("size_bytes")
    m = row.metric()
    if kernel_kind(row.text("collective")) != "nccl" or S is None or m is None:
        return None
    col, v = m
    kw = {"time_us": v} if col == "time_us" else {"time_us": S / (v * 1e3)} if col == "algbw_GBps" else {}
    return Point.of(
        row.text("collective").strip().lower(),
        cluster.nodes,
        cluster.gpus_per_node,
        S,
        busbw_GBps=v if col == "busbw_GBps" else None,
        source=row.id,
        **kw,
    )


def calibrated_cluster(cluster: Cluster, points: list) -> Cluster:
    from monta.perfmodel.network.nccl_fit import fit_cluster

    return fit_cluster(cluster, points)


class Calibrations:
    """The healthy fit points of a table, by hardware key; ``predict`` gives a row's two calibrated values."""

    def __init__(self, built: list[tuple[Row, Cluster | None, str | None]]) -> None:
        self.points: dict[tuple, list[tuple[str, str, Any]]] = {}
        self._fits: dict[tuple, Cluster] = {}
        for r, c, _ in built:
            if c is not None and r.health in CALIBRATE_FROM and (p := _fit_point(r, c)) is not None:
                self.points.setdefault(_hardware_key(r, c), []).append((r.id, r.source or r.id, p))

    def _predict(self, r: Row, c: Cluster, keep) -> tuple[float | None, str | None]:
        key = _hardware_key(r, c)
        others = [(i, p) for i, s, p in self.points.get(key, []) if keep(i, s)]
        if not others:
            return None, "no other healthy nccl-tests row of this hardware and node count"
        op = NCCL_TESTS.get(r.text("collective").strip().lower())
        size = r.num("size_bytes") or PLATEAU_BYTES
        near = [p for _, p in others if p.op == op and 1 / COVER <= p.size_bytes / size <= COVER]
        if not near:
            return None, f"no other healthy row of this collective within {COVER:g}x of its size (a fit extrapolates)"
        # the same points in the same order whatever the file's order or ids: the fit is order-sensitive at ties
        pts = sorted((p for _, p in others), key=lambda p: (p.op, p.size_bytes, p.time_us))
        ids = (key, tuple((p.op, p.size_bytes, p.time_us) for p in pts))
        try:
            if ids not in self._fits:
                self._fits[ids] = calibrated_cluster(c, pts)
        except ValueError as e:  # too few points of a collective/link to fit
            return None, str(e)
        return predict_row(r, self._fits[ids])[0], None

    def predict(self, r: Row, c: Cluster) -> dict[str, Any]:
        src = r.source or r.id
        loro, why = self._predict(r, c, lambda i, s: i != r.id)
        loso, why_s = self._predict(r, c, lambda i, s: s != src)
        out: dict[str, Any] = {"predicted_calibrated": loro, "predicted_calibrated_loso": loso}
        if why:
            out["reason_calibrated"] = why
        if why_s:
            out["reason_calibrated_loso"] = why_s
        return out
