"""The chunk floor (``monta bench alltoall --min-chunk``): which rows a size runs, what its records and the
table's footer say about the rest, and that a floor of 0 leaves a record's config as it was."""

from __future__ import annotations

from monta.bench import chunk_floor
from monta.bench.alltoall.config import AlltoallAids, AlltoallConfig

MiB = 1 << 20
ROWS = [("legacy", 1), ("deepspeed", 1), ("monta", 1), ("monta", 2), ("monta", 4), ("monta", 8), ("a2a", 1), ("ag", 1)]
VARIANTS = ("legacy", "deepspeed", "monta")


def test_a_chunk_count_runs_only_where_its_chunks_hold_the_floor():
    m = chunk_floor.mask(MiB, VARIANTS, [2 * MiB, 4 * MiB, 8 * MiB], ROWS)
    label = [f"{v}{c}" for v, c in ROWS]
    ran = [[x for x, ok in zip(label, row) if ok] for row in m]
    assert ran[0] == ["legacy1", "deepspeed1", "monta1", "monta2", "a2a1", "ag1"]  # 2 MiB: chunks of >= 1 MiB
    assert ran[1] == ["legacy1", "deepspeed1", "monta1", "monta2", "monta4", "a2a1", "ag1"]
    assert ran[2] == label  # 8 MiB / 8 = 1 MiB: every row
    # no floor, or one chunk: every row runs; an exchange that is not chunked never leaves a row out
    assert all(all(r) for r in chunk_floor.mask(0, VARIANTS, [MiB], ROWS))
    assert chunk_floor.runs(64 * MiB, VARIANTS, MiB, "monta", 1)
    assert chunk_floor.runs(64 * MiB, VARIANTS, MiB, "deepspeed", 1)


def test_records_and_the_footer_name_what_was_left_out():
    left = chunk_floor.not_run(MiB, VARIANTS, 2 * MiB, ROWS)
    assert left["rows"] == ["monta4", "monta8"] and "--min-chunk 1 MiB" in left["why"]
    assert chunk_floor.not_run(MiB, VARIANTS, 8 * MiB, ROWS) is None
    recs = [
        {"params": {"size_bytes": s}, "metrics": {"not_run": n} if n else {}, "config": {"min_chunk": MiB}}
        for s, n in ((2 * MiB, left), (8 * MiB, None), (4 * MiB, chunk_floor.not_run(MiB, VARIANTS, 4 * MiB, ROWS)))
    ]
    line = chunk_floor.footer(recs)
    assert line.startswith("# NOT RUN (a chunk under --min-chunk 1 MiB")
    assert line.endswith("2 MiB: monta4, monta8; 4 MiB: monta8")
    assert chunk_floor.footer([{"params": {"size_bytes": MiB}, "metrics": {}, "config": {}}]) is None


def test_a_config_without_a_floor_writes_no_min_chunk_key():
    base = dict(
        nodes=2, gpus_per_node=4, tp=4, ep=2, sizes=(MiB,), variants=VARIANTS, chunks=(1, 2), dtype="float32",
        experts=2, hidden=1024, warmup=1, iters=5, adaptive=False, max_iters=5, target_ci=0.0, budget_s=0.0,
        transport=None, aids=AlltoallAids(check=False), components=True, out=None, append=False,
        experiment="x", backend="gloo", topology={}, chunks_arg="1,2",
    )  # fmt: skip
    assert "min_chunk" not in AlltoallConfig(**base).to_dict()
    cfg = AlltoallConfig(**base, min_chunk=MiB)
    assert cfg.to_dict()["min_chunk"] == MiB and AlltoallConfig.from_json(cfg.to_json()) == cfg
