"""One exchange interface (issue 32): every registered exchange is a ``Dispatcher`` whose optional
capability (capacity passes) matches its registry entry; ``monta/`` names no exchange but the core three
and branches on no plugin's name; the toy exchange of docs/exchanges.md (``toy-dispatcher``, one module
and one registry call in tests/plugins/monta_toy_variant) is priced by the model from its own steps,
counted by its own formulas, timed and checked by the AllToAll bench and equal to stock DeepSpeed
inside the MoE layer, without a line of ``monta/`` knowing it."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from monta import variants as registry

ROOT = Path(__file__).resolve().parent.parent
MiB = 2**20
TOY = "toy-dispatcher"


def _plugin_exchanges() -> list[str]:
    return [n for n in registry.exchanges() if n not in registry.CORE]


# Names a variable holding an exchange goes by where the core once branched on a plugin's name.
_HOLDERS = {"variant", "v", "xv", "exchange", "ex", "name"}


def _branches_on(tree: ast.AST, names: set[str]) -> list[int]:
    """Lines comparing an exchange-holding name with one of ``names`` (``variant == "x"``, ``v in ("x", ...)``)."""
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        parts = [node.left, *node.comparators]
        held = any(
            (isinstance(p, ast.Name) and p.id in _HOLDERS) or (isinstance(p, ast.Attribute) and p.attr in _HOLDERS)
            for p in parts
        )
        consts = {c.value for p in parts for c in ast.walk(p) if isinstance(c, ast.Constant)}
        if held and consts & names:
            out.append(node.lineno)
    return out


def test_monta_names_no_exchange_but_the_core_three():
    """A plugin's exchange name appears nowhere in monta/ (code, docstrings, comments), and no comparison
    there holds one. A name that is also a collective's ("allgather", the op) may appear as the op, never
    compared with an exchange."""
    plugins = set(_plugin_exchanges())
    assert {"2dh", "allgather", "node-dedup", "toy-exchange", TOY} <= plugins
    ops = {"allgather", "alltoall"}
    found = []
    for path in sorted((ROOT / "monta").rglob("*.py")):
        text = path.read_text()
        rel = path.relative_to(ROOT)
        for name in sorted(plugins - ops):
            for m in re.finditer(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text):
                found.append(f"{rel}:{text.count(chr(10), 0, m.start()) + 1}: {name}")
        found += [f"{rel}:{line}: compares with an exchange name" for line in _branches_on(ast.parse(text), plugins)]
    assert not found, "\n".join(found)


def test_the_name_check_finds_a_branch_on_a_plugin_name():
    tree = ast.parse('if variant in ("deepspeed", "2dh"):\n    pass\nif op == "allgather":\n    pass\n')
    assert _branches_on(tree, {"2dh", "allgather"}) == [1]


def test_every_exchange_is_a_dispatcher_with_the_capabilities_it_registered():
    from monta.comm.dispatcher import CapacityPasses, Dispatcher, build_dispatcher
    from monta.mesh import solo_mesh

    g = solo_mesh()
    for name, e in registry.exchanges().items():
        d = build_dispatcher(name, g)
        assert isinstance(d, Dispatcher) and d.name == name
        has = registry.CAPACITY_PASSES in e.capabilities
        assert (d.capacity_passes is not None) == has, name
        if has:
            assert isinstance(d.capacity_passes, CapacityPasses)
        assert d.chunked == e.chunked


def test_the_model_prices_the_toy_by_its_own_steps():
    """Its steps are the flat reference's with an encode in front: the same bytes, later by one copy of
    the buffer; its formula gives the bytes the model counts; the step model prices its variant."""
    from dataclasses import replace

    from monta.hardware.profile import get_cluster
    from monta.model.config import resolve_config
    from monta.parallel import ParallelLayout
    from monta.perfmodel.network.exchange import exchange_time, modelled_as
    from monta.perfmodel.network.routed import inter_bytes_formula, routed_exchange_time, routed_exchanges
    from monta.perfmodel.training.step import predict_step
    from monta.perfmodel.training.strategy import Strategy

    assert modelled_as(TOY) == TOY and TOY in routed_exchanges()
    for layout in (ParallelLayout(2, 8, tp=2, ep=8), ParallelLayout(2, 4, tp=1, ep=8)):
        cl = get_cluster("a800", layout.nodes, layout.gpus_per_node)
        S = 4 * MiB
        toy = exchange_time(TOY, S, layout, cl, top_k=2, experts=16)
        ref = routed_exchange_time("deepspeed", S, layout, cl)
        assert [o.name for o in toy.ops] == ["encode", *(o.name for o in ref.ops)]
        assert (toy.inter_bytes, toy.intra_bytes) == (ref.inter_bytes, ref.intra_bytes) and toy.inter_bytes > 0
        assert toy.total_us == pytest.approx(ref.total_us + S / (cl.copy_GBps * 1e3))
        text, value = inter_bytes_formula(TOY, S, layout, top_k=2, experts=16)
        assert (text, value) == ("S/TP x (N-1)/N", pytest.approx(toy.inter_bytes))
    model = replace(resolve_config("moe-2x70b"), num_layers=4)
    cl = get_cluster("a800", 2, 8)
    s = Strategy(tp=8, ep=2, dp=2, pp=1, cp=1, micro_batch=1, recompute="full", zero=1)
    toy_step = predict_step(model, replace(s, variant=TOY), cl, 4096, global_batch=2)
    ds_step = predict_step(model, replace(s, variant="deepspeed"), cl, 4096, global_batch=2)
    assert toy_step.inter_bytes == pytest.approx(ds_step.inter_bytes)  # deepspeed's bytes, its own timeline
    assert toy_step.exchange_us > 0 and toy_step.total_us > 0


def test_the_toy_runs_in_the_moe_layer_as_stock_deepspeed(dist_world):
    """MoE(exchange="toy-dispatcher") against stock DeepSpeed: output, input and parameter gradients
    bitwise (top-2, fp32), and deepspeed's bytes (its dispatch, combine and their backward)."""
    import moe_cases

    case = dict(nodes=2, gpn=2, tp=2, ep=2, k=2, expert_tp=True, chunks=1)
    toy = dist_world(4).run(moe_cases.compare_case, exchange=TOY, **case)
    ds = dist_world(4).run(moe_cases.compare_case, exchange="deepspeed", **case)
    for t, d in zip(toy, ds):
        assert t["bitwise"] and not t["missing_grads"], t
        assert (t["inter_bytes"], t["intra_bytes"], t["phases"]) == (d["inter_bytes"], d["intra_bytes"], d["phases"])


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_bench_times_and_checks_the_toy(tmp_path):
    """`monta bench alltoall --variants deepspeed,toy-dispatcher --check`: zero wrong elements, deepspeed's
    inter-node bytes, and the toy's own formula beside them (equal)."""
    from monta.results import read_records

    out = tmp_path / "toy.jsonl"
    cmd = [sys.executable, "-m", "monta.cli", "bench", "alltoall", "--nodes", "2", "--gpus-per-node", "2"]
    cmd += ["--sizes", "64K", "--hidden", "256", "--topk", "2", "--iters", "1", "--warmup", "0", "--no-wandb"]
    cmd += ["--allow-unshaped", "--check", "--variants", f"deepspeed,{TOY}", "--out", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=500)
    assert r.returncode == 0, r.stderr[-3000:]
    by = {rec["params"]["variant"]: rec["metrics"] for rec in read_records(out)}
    assert all(m["wrong"] == 0 and m["checked"] for m in by.values())
    assert by[TOY]["inter_bytes"] == by["deepspeed"]["inter_bytes"] > 0
    assert by[TOY]["inter_formula"] == "B/TP (P-L)/P"
    assert by[TOY]["inter_formula_bytes"] == by[TOY]["inter_payload_bytes"] == by["deepspeed"]["inter_payload_bytes"]
    # the table has a row of the toy (its size column may carry a unit: "64 KiB toy-dispatcher ...")
    assert any(TOY in line.split() for line in r.stdout.splitlines() if not line.startswith("#")), r.stdout
