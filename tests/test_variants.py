"""The variant registry (monta.variants): today's names keep their meaning, compositions parse, the
baselines and third-party plugins register through the ``monta.variants`` entry point group, and
every reader (engine, step benchmark, performance model, config schema, analysis) goes through it.
Single-process; the multi-rank runs of the compositions and of the plugin are in tests/test_step.py."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from monta import variants as registry

ROOT = Path(__file__).resolve().parents[1]

# What each name meant before the registry (engine.EXCHANGE_OF, the if-chains on "lina" /
# "monta+priority" / "lancet", perfmodel.training.step._EXCHANGE/_PRIORITY): exchange, schedule, sync.
TODAY = {
    "deepspeed": ("deepspeed", "deepspeed", "after-backward"),
    "legacy": ("legacy", "deepspeed", "after-backward"),
    "monta": ("monta", "deepspeed", "after-backward"),
    "monta+priority": ("monta", "deepspeed", "priority"),
    "lina": ("deepspeed", "lina", "lina-microops"),
    "lancet": ("deepspeed", "lancet", "after-backward"),
}


def _parts(name):
    v = registry.get(name)
    return v.exchange, v.schedule.name, v.sync.name


def test_todays_names_keep_their_meaning():
    for name, parts in TODAY.items():
        assert _parts(name) == parts, name
    # the gradient side as before: lina in 30 MB micro-ops, monta+priority one micro-op per gradient
    lina = registry.get("lina").sync
    assert lina.priority and lina.chunk_bytes == registry.LINA_CHUNK_BYTES == 30 * 2**20
    assert registry.get("monta+priority").sync.priority and registry.get("monta+priority").sync.chunk_bytes is None
    assert not registry.get("monta").sync.priority and not registry.get("lancet").sync.priority
    assert registry.get("lancet").schedule.check_model is not None


def test_compositions_are_registered_and_composable_by_name():
    assert _parts("monta+lina") == ("monta", "lina", "lina-microops")
    assert _parts("monta+lancet") == ("monta", "lancet", "after-backward")
    assert _parts("exchange=monta,schedule=lancet,sync=priority") == ("monta", "lancet", "priority")
    assert _parts("exchange=monta") == ("monta", "deepspeed", "after-backward")  # defaults fill in
    assert _parts("schedule=lina;exchange=legacy") == ("legacy", "lina", "after-backward")
    assert registry.get("exchange=monta,chunks=8").exchange_chunks(4) == 8
    assert registry.get("monta").exchange_chunks(4) == 4 and registry.get("lina").exchange_chunks(4) == 1
    assert registry.label("exchange=monta,schedule=lina,sync=lina-microops") == "monta+lina"
    assert registry.label("exchange=monta,schedule=lancet,sync=priority") == "monta+lancet+priority"
    assert set(TODAY) | {"monta+lina", "monta+lancet"} <= set(registry.names())


@pytest.mark.parametrize(
    "bad, says",
    [
        ("nope", "unknown variant 'nope'; choose from deepspeed, legacy, monta"),
        ("exchange=fast", "unknown exchange 'fast'"),
        ("exchange=monta,schedule=nope", "unknown schedule 'nope'; choose from deepspeed, lina, lancet"),
        ("exchange=monta,sync=never", "unknown sync 'never'"),
        ("exchange=monta,colour=red", "unknown key 'colour'"),
        ("exchange=monta,exchange=legacy", "exchange given twice"),
        ("exchange=monta,chunks=0", "chunks=0 must be an integer >= 1"),
    ],
)
def test_bad_names_say_what_to_choose(bad, says):
    with pytest.raises(ValueError, match=re.escape(says)):
        registry.get(bad)


def test_comma_lists_keep_a_composition_together():
    got = registry.split_list("deepspeed,exchange=monta,schedule=lancet,sync=priority,exchange=legacy,monta+lina")
    assert got == ["deepspeed", "exchange=monta,schedule=lancet,sync=priority", "exchange=legacy", "monta+lina"]
    assert registry.split_list(["monta", "exchange=monta,schedule=lina"]) == ["monta", "exchange=monta,schedule=lina"]
    with pytest.raises(ValueError, match="given twice"):
        registry.parse_list("monta,monta")
    with pytest.raises(ValueError, match="unknown variant 'lna'"):
        registry.parse_list("deepspeed,lna")


def test_nothing_in_monta_imports_baselines():
    """``grep -rn "import.*baselines\\|from \\(monta_\\)\\?baselines" monta/`` is empty: the baselines
    (monta_baselines) register themselves through the entry point; the core never reaches up into them."""
    proc = subprocess.run(
        ["grep", "-rn", r"import.*baselines\|from \(monta_\)\?baselines", "monta/"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1 and proc.stdout == "", proc.stdout


def test_no_variant_name_if_chains_outside_the_registry():
    """No module of monta/, analysis/ or workflows/ names a schedule-bearing variant (or a baseline's
    part) in a string literal: they read the registry."""
    pat = re.compile(r"""["'](lina|lancet|monta\+priority|monta\+lina|monta\+lancet|lina-microops)["']""")
    hits = []
    for d in ("monta", "analysis", "workflows"):
        for f in (ROOT / d).rglob("*"):
            if f.suffix in (".py", ".smk") and f.name != "variants.py":
                hits += [
                    f"{f.relative_to(ROOT)}:{i}"
                    for i, line in enumerate(f.read_text().splitlines(), 1)
                    if pat.search(line)
                ]
    assert not hits, hits


def test_baselines_register_through_the_entry_point():
    from importlib.metadata import entry_points

    eps = {e.name: e.value for e in entry_points(group=registry.ENTRY_POINT_GROUP)}
    assert eps.get("baselines") == "monta_baselines.variants:register"
    assert registry.get("lina").origin == "baselines" and registry.schedules()["lancet"].origin == "baselines"
    assert registry.get("monta").origin == "monta"


def test_a_broken_plugin_is_named(monkeypatch):
    class EP:
        name, value = "broken", "nowhere:register"

        def load(self):
            raise ImportError("No module named 'nowhere'")

    import importlib.metadata as md

    real = md.entry_points
    monkeypatch.setattr(md, "entry_points", lambda group=None: [*real(group=group), EP()])
    try:
        with pytest.warns(RuntimeWarning, match="broken"):
            registry.load_plugins(force=True)
        with pytest.raises(ValueError, match=r"plugins that failed to load: broken = nowhere:register"):
            registry.get("exchange=monta,schedule=brokens-schedule")
    finally:
        monkeypatch.setattr(md, "entry_points", real)
        registry._R.failed.clear()
        registry.load_plugins(force=True)


def test_the_toy_plugin_is_installed_for_the_tests():
    """tests/plugins/monta_toy_variant, installed by `make test-plugins` (a real package built by pip),
    registers a schedule and a variant through the entry point group."""
    assert "toy" in registry.names(), ("the toy plugin is not installed: run `make test-plugins`", registry._R.failed)
    v = registry.get("toy")
    assert (v.exchange, v.schedule.name, v.sync.name, v.origin) == ("monta", "toy-phases", "after-backward", "toy")
    assert _parts("exchange=deepspeed,schedule=toy-phases") == ("deepspeed", "toy-phases", "after-backward")
    out = subprocess.run(
        [sys.executable, "-m", "monta.cli", "variants"], capture_output=True, text=True, check=True
    ).stdout
    assert re.search(r"toy\s+monta\s+toy-phases\s+after-backward\s+toy", out), out
    e = registry.exchange("toy-exchange")  # the plugin's own exchange
    assert (e.origin, e.chunked, e.model_as) == ("toy", False, "deepspeed") and callable(e.run_pass)
    v = registry.get("toy-exchange")
    assert (v.exchange, v.schedule.name, v.exchange_chunks(8)) == ("toy-exchange", "deepspeed", 1)
    assert "toy-exchange (toy)" in out


def test_a_plugin_exchange_is_checked_when_it_registers(monkeypatch):
    """A plugin cannot take a core exchange's name, must give its pass function, can only be priced as
    an exchange that has a price, and its price takes the one signature; an unknown exchange names the
    plugins' too."""
    monkeypatch.setattr(registry, "_CURRENT_ORIGIN", ["someplugin"])
    with pytest.raises(ValueError, match="exchange 'monta' is the core's"):
        registry.add_exchange("monta", run_pass=lambda *a: None)
    with pytest.raises(ValueError, match="needs run_pass="):
        registry.add_exchange("mine")
    with pytest.raises(ValueError, match="model_as='nccl' must name a priced exchange: legacy, deepspeed, monta, 2dh"):
        registry.add_exchange("mine", run_pass=lambda *a: None, model_as="nccl")
    with pytest.raises(ValueError, match="model_as='toy-exchange' must name a priced exchange"):  # priced as another
        registry.add_exchange("mine", run_pass=lambda *a: None, model_as="toy-exchange")
    seven = lambda S, ep, tp, cluster, top_k, experts, row_bytes: []  # noqa: E731  (no chunks)
    with pytest.raises(ValueError, match=r"price= must take \(S, ep, tp, cluster, top_k, experts, row_bytes, chunks\)"):
        registry.add_exchange("mine", run_pass=lambda *a: None, price=seven)
    assert "mine" not in registry.exchanges()
    with pytest.raises(
        ValueError,
        match="unknown exchange 'mine'; choose one of legacy, deepspeed, monta, 2dh, allgather, node-dedup, "
        "toy-exchange",
    ):
        registry.exchange("mine")


def test_the_model_prices_a_plugin_exchange_as_it_declared(monkeypatch):
    """toy-exchange declared model_as=deepspeed: the same prediction as deepspeed; an exchange that
    declared none is refused with a line saying how to give it one."""
    from monta.perfmodel.network.alltoall import make_layout
    from monta.perfmodel.network.exchange import exchange_time

    layout = make_layout(2, 8, 8, None)
    assert exchange_time("toy-exchange", 2**24, layout, "a800-4nic").total_us == pytest.approx(
        exchange_time("deepspeed", 2**24, layout, "a800-4nic").total_us
    )
    monkeypatch.setitem(registry._R.exchanges, "nomodel", registry.Exchange("nomodel", run_pass=print, origin="p"))
    with pytest.raises(ValueError, match="exchange 'nomodel' \\(plugin p\\) has no performance model"):
        exchange_time("nomodel", 2**24, layout, "a800-4nic")


def test_the_performance_model_predicts_the_compositions():
    """monta+lina and monta+lancet: MoNTA's exchange under the baselines' overlap; on the paper's
    setups the model has each beat both of its parts, and existing names predict as before."""
    from monta.hardware.profile import get_cluster
    from monta.model.config import resolve_config
    from monta.perfmodel.training.step import predict_step
    from monta.perfmodel.training.strategy import Strategy

    for name in ("a800-4nic", "a800-8nic"):
        cl = get_cluster(name, 2, 8)
        m = resolve_config("moe-2x70b", layers=24)
        t = {
            v: predict_step(m, Strategy(tp=8, ep=2, dp=2, variant=v), cl, 8192, 2).total_us
            for v in (
                "deepspeed",
                "monta",
                "lina",
                "lancet",
                "monta+lina",
                "monta+lancet",
                "toy",
                "exchange=monta,schedule=lancet,sync=priority",
            )
        }
        assert t["monta+lina"] < min(t["monta"], t["lina"]), (name, t)
        assert t["monta+lancet"] < min(t["monta"], t["lancet"]), (name, t)
        assert t["toy"] == pytest.approx(t["monta"])  # hides nothing, same exchange and sync
        # any composition is predicted (here priority costs a little: Lancet already hides the sync)
        assert 0 < t["exchange=monta,schedule=lancet,sync=priority"] < t["lancet"]
    with pytest.raises(ValueError, match="unknown variant 'nope'"):
        Strategy(tp=8, ep=2, dp=2, variant="nope").validate(16, 8)


def test_predict_paper_lists_every_variant():
    from monta.perfmodel.reports.paper import run

    text, recs = run(["a800-4nic"], None, "none")
    steps = {r["params"]["variant"] for r in recs if r["kind"] == "step"}
    assert set(registry.names()) <= steps
    assert re.search(r"monta\+lina\s+[\d.]+", text) and re.search(r"monta\+lancet\s+[\d.]+", text)


def _check_config(cfg):
    sys.path.insert(0, str(ROOT / "workflows" / "lib"))
    try:
        from configcheck import check_config
    finally:
        sys.path.pop(0)
    return check_config(cfg, ROOT / "config" / "schema.yaml")


def test_config_accepts_registered_composed_and_plugin_variants():
    sys.path.insert(0, str(ROOT / "workflows" / "lib"))
    from configcheck import ConfigError

    sys.path.pop(0)
    ok = _check_config(
        {
            "step": {
                "variants": [
                    "deepspeed",
                    "monta+lina",
                    "monta+lancet",
                    "toy",
                    "exchange=monta,schedule=lancet,sync=priority",
                ]
            }
        }
    )
    assert ok["step"]["variants"][-1] == "exchange=monta,schedule=lancet,sync=priority"
    assert "monta+lina" in _check_config({})["step"]["variants"]  # the default includes the compositions
    with pytest.raises(ConfigError, match=r"config key step\.variants\.1: unknown variant 'bogus'; choose from"):
        _check_config({"step": {"variants": ["monta", "bogus"]}})
    with pytest.raises(ConfigError, match=r"config key alltoall\.variants\.0: 'lina' is not an exchange"):
        _check_config({"alltoall": {"variants": ["lina"]}})


def test_step_bench_checks_names_and_schedule_requirements_before_any_rank_starts():
    import argparse

    from monta.bench.step import args as step_args

    p = argparse.ArgumentParser()
    step_args.add_arguments(p)
    spec = step_args.step_config(
        p.parse_args(["--variants", "deepspeed,exchange=monta,schedule=lancet,sync=priority,toy"])
    )
    assert list(spec.variants) == ["deepspeed", "exchange=monta,schedule=lancet,sync=priority", "toy"]
    assert set(registry.names()) <= set(step_args.step_config(p.parse_args([])).variants)  # default: every variant
    with pytest.raises(ValueError, match="--variants: unknown variant 'lanct'"):
        step_args.step_config(p.parse_args(["--variants", "monta,lanct"]))
    with pytest.raises(ValueError, match="variant monta\\+lancet: the lancet schedule needs --topk 2"):
        step_args.step_config(p.parse_args(["--variants", "monta+lancet", "--topk", "1"]))


def test_analysis_names_each_variants_parts():
    from monta.results import make_record
    from monta_analysis import step_tables

    def step(v, ms):
        return make_record(
            kind="step",
            source="emulated",
            experiment="t",
            params={"variant": v, "model": "mini", "cluster": "2x4"},
            metrics={"step_ms": ms, "tokens_per_s": 1.0, "loss": 1.0},
        )

    t = step_tables.step_table([step("monta+lancet", 9.0), step("deepspeed", 10.0), step("toy", 10.0)])
    assert list(t["variant"]) == ["deepspeed", "monta+lancet", "toy"]  # the registry's order
    assert dict(zip(t["variant"], t["parts"])) == {
        "deepspeed": "deepspeed / deepspeed / after-backward",
        "monta+lancet": "monta / lancet / after-backward",
        "toy": "monta / toy-phases / after-backward",
    }


def test_a_schedule_is_refused_up_front_by_the_capability_it_needs():
    """Lancet dispatches capacity windows of the encoded buffer during attention: it needs the capability
    of capacity passes, which every buffer exchange offers (2dh, the toy's run_pass one) and the exchanges
    that move tokens (allgather, node-dedup, the toy's dispatcher) do not; they are refused with a one-line
    reason naming the schedules that fit. Lina needs nothing: it runs them on windows of their routing."""
    assert registry.get("exchange=node-dedup,schedule=lina").exchange == "node-dedup"
    assert registry.get("exchange=toy-dispatcher,schedule=lina").exchange == "toy-dispatcher"
    for ex in ("legacy", "deepspeed", "monta", "2dh", "toy-exchange"):
        assert registry.CAPACITY_PASSES in registry.exchange(ex).capabilities
        assert registry.get(f"exchange={ex},schedule=lancet").exchange == ex
    assert registry.schedules()["lancet"].needs == {registry.CAPACITY_PASSES}
    assert not registry.schedules()["lina"].needs
    for ex in ("allgather", "node-dedup", "toy-dispatcher"):
        assert registry.exchange(ex).capabilities == frozenset()
        with pytest.raises(
            ValueError, match=f"schedule 'lancet' needs capacity-passes, which exchange '{ex}' does not offer; use "
        ):
            registry.get(f"exchange={ex},schedule=lancet")


def test_the_core_registers_its_exchanges_as_a_plugin_does():
    """legacy, deepspeed and monta come from the registry's first entry point (``monta.core_exchanges``,
    origin monta) with the one price signature and the flags the model reads instead of their names."""
    from monta.perfmodel.network.routed import reference_exchanges, routed_exchanges

    assert registry.CORE_ENTRY_POINT == "monta.core_exchanges:register"
    core = {n: e for n, e in registry.exchanges().items() if e.origin == "monta"}
    assert tuple(core) == registry.CORE == ("legacy", "deepspeed", "monta")
    assert {e.price.__module__ for e in core.values()} == {"monta.core_exchanges"}
    assert [n for n, e in core.items() if e.chunked] == ["monta"] == list(registry.chunked_exchanges())
    assert reference_exchanges() == ("deepspeed",) and not any(e.reads_routing for e in core.values())
    assert not set(core) & set(routed_exchanges())  # the token-level ones: the plugins' that price themselves
    assert {"2dh", "allgather", "node-dedup", "toy-dispatcher"} <= set(routed_exchanges())


def test_best_chunks_searches_the_chunked_entry_it_is_given(monkeypatch):
    """A plugin's chunked exchange is priced with the run's chunk count and searched by its own price (a
    made-up one whose copy is least at 3 chunks); without a name, best_chunks searches the registry's
    first chunked entry (the core's monta), as it did when it named monta."""
    from monta.hardware.profile import get_cluster
    from monta.parallel import ParallelLayout
    from monta.perfmodel.network.exchange import best_chunks, exchange_shapes, exchange_time, layout_shapes
    from monta.perfmodel.network.steps import ExchangeSteps, Step

    def price(S, ep, tp, cluster, top_k, experts, row_bytes, chunks):
        return ExchangeSteps((Step("copy", "copy", nbytes=S * (1 + abs(chunks - 3))),), chunks)

    monkeypatch.setattr(registry._R, "exchanges", dict(registry.exchanges()))
    monkeypatch.setattr(registry, "_CURRENT_ORIGIN", ["someplugin"])
    registry.add_exchange("chunky-test", run_pass=lambda *a: None, chunked=True, price=price, reads_routing=False)
    layout = ParallelLayout(2, 4, tp=2, ep=4)
    ep, tp = layout_shapes(layout)
    cl = get_cluster("a800", 2, 4)
    assert best_chunks(float(2**24), ep, tp, cl, candidates=(1, 2, 3, 4, 5), exchange="chunky-test") == 3
    got = exchange_time("chunky-test", 2**24, layout, cl, "auto")
    assert got.chunks == 3 and got.total_us == exchange_shapes("chunky-test", float(2**24), ep, tp, cl, 3).total_us
    monta = [exchange_shapes("monta", float(2**24), ep, tp, cl, n).total_us for n in range(1, 17)]
    assert best_chunks(float(2**24), ep, tp, cl) == best_chunks(float(2**24), ep, tp, cl, exchange="monta")
    assert monta[best_chunks(float(2**24), ep, tp, cl) - 1] == pytest.approx(min(monta), rel=0.006)
