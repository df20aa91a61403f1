"""The Snakemake pipeline: lint, dry runs (default, test, a800 on the SLURM profile), config errors,
and a real run of its analysis half (notebooks via papermill, report) on synthetic records.

Every run happens in a working directory of its own (the pipeline's files linked in, results/
empty): no test depends on what an earlier `make reproduce` left in the checkout, and none writes
into the checkout's results/ (checked after the module)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from monta.results import make_record, write_records

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")
PIPELINE_FILES = ("Snakefile", "workflows", "config", "analysis", "profiles")
pytestmark = pytest.mark.timeout(300)


def _tree(path: Path) -> dict[str, tuple[int, int]]:
    return (
        {str(f.relative_to(path)): (f.stat().st_size, f.stat().st_mtime_ns) for f in path.rglob("*") if f.is_file()}
        if path.is_dir()
        else {}
    )


@pytest.fixture(scope="module", autouse=True)
def users_results_untouched():
    """The checkout's results/ (a user's `make reproduce`) is neither deleted nor overwritten."""
    before = _tree(ROOT / "results")
    yield
    assert _tree(ROOT / "results") == before


@pytest.fixture
def work(tmp_path) -> Path:
    """A fresh working directory with the pipeline's files linked in and no results/."""
    for name in PIPELINE_FILES:
        (tmp_path / name).symlink_to(ROOT / name)
    return tmp_path


def snakemake(*args: str, cwd: Path, timeout: int = 240) -> subprocess.CompletedProcess:
    env = {**os.environ, "WANDB_MODE": "disabled"}
    return subprocess.run([SNAKEMAKE, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


def test_lint_clean(work):
    proc = snakemake("--lint", cwd=work)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Lints for" not in proc.stdout + proc.stderr


def test_dry_run_default_runs_every_experiment(work):
    proc = snakemake("-n", "--profile", "profiles/local", cwd=work)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "monta bench alltoall --nodes 2 --gpus-per-node 8 --tp 8 --sizes 8M:16M:2" in out  # per-cluster sizes
    assert "--tp 4 --sizes 2M:16M:2 --exchanges legacy,deepspeed,monta --chunks 1,2,4,8" in out
    # the chunk floor: the section's for 2 x 4, the cluster's own for 2 x 8, scaled with the NIC for the
    # ratio ablation (4 x the floor's bytes at 4 x the rate), none on the maps
    assert "--dilation 1 --min-chunk 1M --check" in out
    assert "--dilation 1 --min-chunk 2M --check" in out
    assert "--dilation 1 --min-chunk 4194304 --launcher emulate" in out
    # the 4-NIC A800 everywhere (2 x 8 at half its rates), adaptive iterations (paired ratios' CIs within 4%)
    assert "--chunks 1,2,4,8 --topology a800-4nic@0.125 --dtype float32" in out
    assert "--chunks 1,2,4,8 --topology a800-4nic@0.0625 --dtype float32" in out
    # the ratio ablation keeps the default loopback (1.7021 Gbit/s) and varies the NIC: hand-set rates
    assert "--inter-gbps 0.25 --intra-gbps 1.7021" in out
    assert "--adaptive --iters 5 --max-iters 40 --target-ci 0.04 --budget-s 20" in out
    assert "--launcher emulate --backend gloo --experiment default" in out
    assert (
        "--micro-batch 32 --launcher emulate --topology a800-4nic@0.125 --compute modeled --experiment default "
        "--out results/step/2x4.jsonl" in out
    )
    assert "monta bench step --nodes 2 --gpus-per-node 4 --tp 4 --model moe-2x70b-mini" in out
    assert "--variants deepspeed,legacy,monta,lina,lancet,monta+priority,monta+lina,monta+lancet" in out
    for rule in (
        "build",
        "build_variant",
        "alltoall",
        "step",
        "ablation_tp",
        "ablation_ratio",
        "ablation_topk",
        "ablation_capacity",
        "ablation_seq",
        "predict_paper",
        "predict_alltoall",
        "predict_plan",
        "calibrate",
        "predict_accuracy",
        "notebook",
        "report",
        "regress",
    ):
        assert f"\nrule {rule}:" in out, rule
    assert "srun" not in out  # the emulator launches its own ranks
    # The step runs at the network section's rates: the sweeps' calibration prices it, no second one.
    assert "\nrule calibrate_step:" not in out and "--micro-batch 32" in out
    # The default reads the chunk and buffer ablations off the 2x4 sweep; as axes of their own they still run.
    assert "\nrule ablation_chunks:" not in out and "\nrule ablation_buffer:" not in out


def test_dry_run_separate_chunk_and_buffer_ablations(work):
    extra = work / "abl.yaml"
    extra.write_text('ablation:\n  chunks: [1, 2, 4, 8]\n  buffer_sizes: "256K:16M:4"\n')
    # a --configfile stands alone: the default's settings come with it only when named first
    proc = snakemake(
        "-n", "-p", "--profile", "profiles/local", "--configfile", "config/default.yaml", str(extra), cwd=work
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "--sizes 256K:16M:4 --exchanges legacy,deepspeed,monta --chunks 1,2,4,8" in out
    assert "--sizes 4M --exchanges legacy,monta --chunks 1,2,4,8" in out and "results/ablation/chunks.jsonl" in out


def test_dry_run_slurm_profile_a800_shows_srun_torchrun(work):
    proc = snakemake("-n", "--profile", "profiles/slurm", "--configfile", "config/a800.yaml", cwd=work)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert (
        "srun --nodes=2 --ntasks-per-node=1 --cpus-per-task=32 --gpus-per-node=8 --kill-on-bad-exit=1 "
        "torchrun --nnodes=2 --nproc-per-node=8 --rdzv-backend=c10d"
    ) in out
    assert "--no-python monta bench alltoall --nodes 2 --gpus-per-node 8 --tp 8 --sizes 1M:1G:2" in out
    assert (
        "--model moe-2x70b --variants deepspeed,legacy,monta,lina,lancet,monta+priority,monta+lina,monta+lancet" in out
    )
    assert "nodes=2, tasks=2, mpi=srun, slurm_extra='--gpus-per-node=8 --exclusive'" in out
    assert "--inter-gbps" not in out and "rule calibrate:" not in out  # real fabric: nothing emulated


def test_dry_run_test_config(work):
    proc = snakemake("-n", "--configfile", "config/test.yaml", cwd=work)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "results/alltoall/2x2.jsonl" in out and "results/alltoall/2x4.jsonl" not in out


def test_dry_run_composed_and_plugin_variants_by_name(work):
    """Step variants from the registry: a composition and the test plugin's variant (tests/plugins),
    each with its resolved config, passed to the step benchmark by name."""
    extra = work / "variants.yaml"
    extra.write_text('step:\n  variants: [deepspeed, "exchange=monta,schedule=lancet,sync=priority", toy]\n')
    proc = snakemake("-n", "-p", "--configfile", "config/test.yaml", str(extra), cwd=work)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "--variants deepspeed,exchange=monta,schedule=lancet,sync=priority,toy" in out
    assert "results/build/variants/exchange=monta,schedule=lancet,sync=priority.json" in out
    assert "results/build/variants/toy.json" in out


@pytest.mark.parametrize(
    "bad, named",
    [
        ("step:\n  variants: [monta, bogus]\n", "step.variants.1: unknown variant 'bogus'"),
        ("alltoall:\n  variants: [lancet]\n", "alltoall.variants.0: 'lancet' is not an exchange"),
        ("alltoall:\n  sizez: 1M\n", "alltoall.sizez"),
        ("colour: blue\n", "colour"),
        ("launcher:\n  kind: slurm\n", "launcher.kind"),
        ("alltoall:\n  clusters:\n    - {name: x, nodes: 2, gpus_per_node: 4, tp: 3}\n", "alltoall.clusters"),
    ],
)
def test_bad_config_stops_before_anything_with_the_key_named(work, bad, named):
    cfg = work / "bad.yaml"
    cfg.write_text(bad)
    proc = snakemake("-n", "--configfile", str(cfg), cwd=work)
    err = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "invalid config" in err and named in err, err[-2000:]
    assert "Building DAG" not in err


@pytest.mark.parametrize(
    "bad, named",
    [
        ("alltoall:\n  sizes: '128K:64K:2'\n", "config key alltoall.sizes = '128K:64K:2': min 128K is above max 64K"),
        # the schema's sizes start at 2 MiB, whose capacity slice is 64 (C/TP): 128 chunks cannot cut it
        ("alltoall:\n  chunks: [128]\n", "config key alltoall.chunks = '128': 128 chunks exceed the capacity slice"),
        (
            "alltoall:\n  inject_slowdown: monta\n",
            "config key alltoall.inject_slowdown = 'monta': use VARIANT:FRACTION",
        ),
        (
            "alltoall:\n  inject_slowdown: 'lancet:0.1'\n",
            "VARIANT one of legacy, deepspeed, monta and 0 < FRACTION <= 1",
        ),
    ],
)
def test_a_config_that_cannot_run_stops_at_validation_not_inside_a_job(work, bad, named):
    """The semantic checks `monta bench alltoall` runs on its flags run on the config too."""
    cfg = work / "bad.yaml"
    cfg.write_text(bad)
    proc = snakemake("-n", "--configfile", str(cfg), cwd=work)
    err = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "invalid config" in err and named in err, err[-2000:]
    assert "Building DAG" not in err


def test_a_nested_config_override_as_users_type_it_is_accepted(work):
    """Snakemake hands nested values over as strings ({'iters': '3'}); the schema's types are read from them."""
    proc = snakemake("-n", "--profile", "profiles/local", "--config", "alltoall={iters: 3, check: false}", cwd=work)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-2000:]
    assert "--adaptive --iters 3 --max-iters 40" in out
    # max_iters 0: exactly `iters` timed iterations, a plain --iters with none of --adaptive's flags
    proc = snakemake("-n", "--profile", "profiles/local", "--config", "alltoall={iters: 3, max_iters: 0}", cwd=work)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-2000:]
    assert "--iters 3 --dilation 1 --min-chunk 1M --launcher" in out
    assert "--adaptive" not in out and "--max-iters" not in out


def test_the_gate_check_injects_its_slowdown_into_both_sweeps_only_when_asked(work):
    """`make reproduce INJECT=monta:0.10` hands the test aid to the AllToAll sweeps (2x4 and 2x8), not
    to the ablations or the step; by default no command carries it."""
    plain = snakemake("-n", "-p", "--profile", "profiles/local", cwd=work)
    assert plain.returncode == 0 and "--inject-slowdown" not in plain.stdout + plain.stderr
    proc = snakemake(
        "-n", "-p", "--profile", "profiles/local", "--config", "alltoall={inject_slowdown: monta:0.10}", cwd=work
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-2000:]
    cmds = [line for line in out.splitlines() if "monta bench" in line]
    injected = [c for c in cmds if "--inject-slowdown monta:0.10" in c]
    assert len(injected) == 2 and all("results/alltoall/2x" in c for c in injected), injected
    assert len(cmds) > len(injected)  # the ablations and the step run as usual


def _a2a(cluster, size, variant, chunks, t, source="emulated", **extra):
    n, g = cluster
    return make_record(
        kind="alltoall",
        source=source,
        experiment="test",
        env={"python": "3"},
        params={
            "size_bytes": size,
            "variant": variant,
            "chunks": chunks,
            "nodes": n,
            "gpus_per_node": g,
            "tp": g,
            "dtype": "float32",
            **extra,
        },
        metrics={"time_us": t, "busbw_GBps": size / t / 1e3, "inter_bytes": size, "intra_bytes": size, "wrong": 0},
    )


def _step(variant, ms, **extra):
    return make_record(
        kind="step",
        source="emulated",
        experiment="test",
        env={"python": "3"},
        params={
            "variant": variant,
            "nodes": 2,
            "gpus_per_node": 2,
            "tp": 2,
            "model": "mini",
            "topk": 1,
            "capacity_factor": 1.0,
            **extra,
        },
        metrics={
            "step_ms": ms,
            "breakdown_ms": {"attention": 1.0, "dispatch": ms / 3, "experts": 2.0, "combine": ms / 4},
        },
    )


@pytest.mark.slow
def test_analysis_half_runs_for_real_on_synthetic_records(work):
    """Real Snakemake + papermill on a working directory whose record files already exist (as the
    benchmarks would have left them): the notebooks, tables, figures and report are produced."""
    res = work / "results"
    shape = (2, 2)
    a2a = [
        _a2a(shape, s, v, c, t * s / 65536, inter_gbps=1.0)
        for s in (65536, 131072)
        for v, c, t in (("legacy", 1, 400.0), ("monta", 1, 250.0), ("monta", 2, 200.0))
    ]
    write_records(res / "alltoall/2x2.jsonl", a2a)
    write_records(res / "ablation/chunks.jsonl", a2a)
    write_records(res / "ablation/tp/2.jsonl", a2a)
    write_records(res / "ablation/ratio/1.0.jsonl", a2a)
    write_records(res / "step/2x2.jsonl", [_step("deepspeed", 30.0), _step("monta", 24.0)])
    write_records(res / "ablation/topk/1.jsonl", [_step("monta", 25.0)])
    pred = [_a2a(shape, 65536, "monta", 2, 190.0, source="predicted", inter_gbps=1.0)]
    for f in (
        "predict/paper.jsonl",
        "predict/alltoall.jsonl",
        "predict/plan.jsonl",
        "ablation/seq/8192.jsonl",
        "ablation/seq/32768.jsonl",
    ):
        write_records(res / f, pred)
    proc = snakemake("results/report.md", "--cores", "2", "--configfile", "config/test.yaml", cwd=work, timeout=280)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    for t in (
        "alltoall_summary",
        "chunk_ablation",
        "step_summary",
        "step_breakdown",
        "paper_comparison",
        "predicted_vs_measured",
    ):
        for ext in ("md", "csv", "tex"):
            assert (res / "tables" / f"{t}.{ext}").exists(), t
    for f in ("alltoall_comparison", "chunk_ablation", "step_breakdown", "predicted_vs_measured"):
        assert (res / "figures" / f"{f}.png").stat().st_size > 5000
    report = (res / "report.md").read_text()
    assert "](figures/step_breakdown.png)" in report and "](tables/paper_comparison.csv)" in report
    # opens with the headline numbers, each linked; tables for people: units, no NaN, no 1e+03
    assert report.index("## Summary") < report.index("## Notebook")
    assert (
        "- **TP AllToAll**, emulated 2x2 TP2 @ 1 Gbit/s, 128 KiB per rank: monta (2 chunks) 0.400 ms: **2.00x** "
        "over legacy (0.800 ms). [table](tables/alltoall_summary.md)"
    ) in report
    assert "monta 24.5 ms, **1.22x** over deepspeed (30.0 ms)" in report  # 24 and the top-k file's 25: median
    assert "**Regression check**: not run" in report
    assert not re.search(r"\bnan\b|\de[+-]\d", report, re.IGNORECASE)
    import pandas as pd

    pvm = pd.read_csv(res / "tables" / "predicted_vs_measured.csv")
    assert pvm["error_pct"].tolist() == pytest.approx([-5.0])  # 190 predicted vs 200 measured
    assert (res / "analysis" / "nb_paper.ipynb").exists()


@pytest.mark.parametrize("fail", [False, True])
def test_regress_rule_reports_or_fails_as_configured(work, fail):
    """A 2x slower current sweep: with regress.fail false the rule reports it and the run succeeds
    (what `make reproduce` does on another machine); with fail true the run stops non-zero."""
    points = [(s, v, c) for s in (65536, 131072) for v, c in (("legacy", 1), ("monta", 2))]
    with_samples = lambda t: dict(time_us=t, samples_us=[t * f for f in (0.98, 1.0, 1.02, 0.99, 1.01)])  # noqa: E731
    base, cur = [], []
    for size, variant, chunks in points:
        for out, t in ((base, 100.0), (cur, 200.0)):
            r = _a2a((2, 2), size, variant, chunks, t)
            r["metrics"].update(with_samples(t))
            out.append(r)
    write_records(work / "base.jsonl", base)
    write_records(work / "results" / "alltoall" / "2x2.jsonl", cur)
    (work / "reg.yaml").write_text(f"regress: {{enabled: true, baseline: base.jsonl, fail: {str(fail).lower()}}}\n")
    proc = snakemake(
        "results/regress/alltoall.md",
        "--cores",
        "1",
        "--configfile",
        "config/test.yaml",
        str(work / "reg.yaml"),
        cwd=work,
    )
    out = proc.stdout + proc.stderr
    assert "4 point(s) regressed" in out, out[-3000:]
    if fail:
        assert proc.returncode != 0 and not (work / "results/regress/alltoall.md").exists()
    else:
        assert proc.returncode == 0, out[-3000:]
        assert "REGRESSED" in (work / "results/regress/alltoall.md").read_text()


def test_regress_rule_reports_a_baseline_it_cannot_compare(work):
    """With regress.fail false a stored baseline from another configuration (no point in common)
    gives 'no verdict' in the table and the report's summary; it does not fail the reproduction."""
    write_records(work / "base.jsonl", [_a2a((2, 2), 65536, "legacy", 1, 100.0)])
    write_records(work / "results" / "alltoall" / "2x2.jsonl", [_a2a((2, 2), 131072, "legacy", 1, 100.0)])
    (work / "reg.yaml").write_text("regress: {enabled: true, baseline: base.jsonl, fail: false}\n")
    proc = snakemake(
        "results/regress/alltoall.md",
        "--cores",
        "1",
        "--configfile",
        "config/test.yaml",
        str(work / "reg.yaml"),
        cwd=work,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    table = (work / "results/regress/alltoall.md").read_text()
    assert table.startswith("regress: no verdict: no point of --current matches --baseline"), table
    from monta_analysis.summary import regress_line

    assert "no verdict" in regress_line(work / "results/regress/alltoall.md")


def _run_pipeline(args: list[str], cwd: Path, timeout: int) -> subprocess.CompletedProcess:
    env = {**os.environ, "WANDB_MODE": "disabled"}
    cmd = [sys.executable, "-m", "monta.pipeline_run", *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


def _lock_files(work: Path) -> list[Path]:
    locks = work / ".snakemake" / "locks"
    return sorted(locks.iterdir()) if locks.is_dir() else []


def _job_counts(out: str) -> dict[str, int]:
    """Snakemake's 'Job stats' table of a run: rule -> jobs (without the 'all' and 'total' rows)."""
    table = out[out.index("Job stats:") :].split("\n\n", 1)[0]
    rows = (line.split() for line in table.splitlines()[3:])
    return {r[0]: int(r[1]) for r in rows if len(r) == 2 and r[1].isdigit() and r[0] not in ("all", "total")}


class _Killed:
    def __init__(self, pids: set[int], netns: set[int], outputs: dict[Path, int]):
        self.pids, self.netns, self.outputs = pids, netns, outputs


def _processes() -> dict[int, tuple[int, str, bytes]]:
    """pid -> (parent pid, comm, cmdline) of every live process this user can see (zombies left out)."""
    out = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
                state, ppid = stat.rsplit(")", 1)[1].split()[:2]
                if state != "Z":
                    comm = stat[stat.index("(") + 1 : stat.rindex(")")]
                    out[int(d.name)] = (int(ppid), comm, (d / "cmdline").read_bytes())
            except (OSError, ValueError, IndexError):
                pass
    return out


def _netns(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:  # gone meanwhile
        return None


def _descendants(root: int, procs: dict[int, tuple[int, str, bytes]]) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = set(), [root]
    while todo:
        for c in children.get(todo.pop(), []):
            found.add(c)
            todo.append(c)
    return found


def _kill_mid_sweep(args: list[str], work: Path) -> _Killed:
    """Start the pipeline in a process group of its own; once the AllToAll sweep's emulated ranks run,
    SIGKILL the group. Returns the processes it had, their network namespaces, and the outputs it finished."""
    env = {**os.environ, "WANDB_MODE": "disabled"}
    log = open(work / "killed-run.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "monta.pipeline_run", *args],
        cwd=work,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 900
    netns: set[int] = set()
    while not netns:
        assert proc.poll() is None, (work / "killed-run.log").read_text()[-3000:]
        assert time.monotonic() < deadline, "the sweep's ranks never started"
        time.sleep(0.2)
        procs = _processes()
        mine = _descendants(proc.pid, procs)
        # the sweep's command (its records go to results/alltoall/; the ablations run `bench alltoall` too) and
        # its ranks, named monta-rankN (a forked rank's command line is its supervisor's), in their nodes' netns
        if any(b"bench\0alltoall" in procs[p][2] and b"results/alltoall/" in procs[p][2] for p in mine):
            netns = {ino for p in mine if procs[p][1].startswith("monta-rank") and (ino := _netns(p))}
    time.sleep(1)  # mid-sweep: the ranks are exchanging
    pids = _descendants(proc.pid, _processes()) | {proc.pid}
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    log.close()
    # outputs the run had finished (records are written whole, by rename; logs are rewritten by a rerun)
    outputs = {f: f.stat().st_mtime_ns for f in (work / "results").rglob("*") if f.is_file() and "logs" not in f.parts}
    assert netns and netns != {os.stat("/proc/self/ns/net").st_ino}, "the ranks ran in the emulator's namespaces"
    return _Killed(pids, netns, outputs)


def _assert_gone(killed: _Killed, wait_s: float = 30) -> None:
    """No process of the killed run is left (ranks are sessions of their own: they go with their
    supervisor), and so no network namespace of its emulated nodes (one lives only while a process is in it)."""
    deadline = time.monotonic() + wait_s
    while True:
        procs = _processes()
        alive = killed.pids & set(procs)
        in_ns = set()
        for p in procs:
            try:
                if os.stat(f"/proc/{p}/ns/net").st_ino in killed.netns:
                    in_ns.add(p)
            except OSError:
                pass
        if not alive and not in_ns:
            return
        assert time.monotonic() < deadline, f"left running after the SIGKILL: {alive | in_ns}"
        time.sleep(0.5)


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_tiny_pipeline_end_to_end(work):
    """The whole pipeline for real on config/test.yaml: build, the emulated AllToAll sweep, the
    training step, ablations, predictions, notebooks, tables, figures and the report."""
    # the test plugin's variant and exchange (tests/plugins/monta_toy_variant) run by name like any other
    extra = work / "toy.yaml"
    extra.write_text(
        "step:\n  variants: [deepspeed, monta, toy]\nalltoall:\n  variants: [legacy, monta, toy-exchange]\n"
    )
    # `make reproduce`'s way in (monta.pipeline_run), killed as an OOM kill or a lost session kills it: SIGKILL
    # to the whole process group while the AllToAll sweep's ranks run. The next run comes back by itself.
    args = ["--cores", "2", "--configfile", "config/test.yaml", str(extra)]
    killed = _kill_mid_sweep(args, work)
    assert _lock_files(work), "the SIGKILL should have left Snakemake's lock behind (the case under test)"
    _assert_gone(killed)
    proc = _run_pipeline(args, work, timeout=1400)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    assert "note: cleared a stale Snakemake lock" in proc.stderr, proc.stderr[-3000:]
    assert not _lock_files(work)
    rerun = _job_counts(proc.stdout + proc.stderr)
    assert "alltoall" in rerun, rerun  # the killed sweep ran again
    redone = [f for f, mtime in killed.outputs.items() if not f.exists() or f.stat().st_mtime_ns != mtime]
    assert killed.outputs and not redone, redone  # what had finished before the kill was kept, not rerun
    from monta import tmpdirs
    from monta.results import read_records

    res = work / "results"
    partial = [str(p) for p in res.rglob("*") if re.match(r"\..+\.\d+\.|.*\.tmp$", p.name)]
    assert not partial, partial
    stale = [d for prefix in tmpdirs.PREFIXES for d in Path(tempfile.gettempdir()).glob(prefix + "*")]
    assert not [d for d in stale if tmpdirs.owner_alive(d) is False], stale
    a2a = read_records(res / "alltoall" / "2x2.jsonl")
    assert {r["params"]["variant"] for r in a2a} >= {"legacy", "monta", "toy-exchange"}
    assert "toy-exchange" in (res / "tables" / "alltoall_summary.md").read_text()
    assert all(r["kind"] == "alltoall" and r["metrics"]["wrong"] == 0 and r["metrics"]["time_us"] > 0 for r in a2a)
    steps = read_records(*sorted((res / "step").glob("*.jsonl")))
    assert {r["params"]["variant"] for r in steps} >= {"deepspeed", "monta", "toy"}
    toy = next(r for r in steps if r["params"]["variant"] == "toy")
    assert (toy["params"]["exchange"], toy["params"]["schedule"]) == ("monta", "toy-phases")
    assert "toy" in (res / "tables" / "step_summary.md").read_text()
    assert all(r["kind"] == "step" and r["metrics"]["step_ms"] > 0 for r in steps)
    assert any(r["source"] == "predicted" for r in read_records(res / "predict" / "paper.jsonl"))
    assert (res / "build" / "env.json").exists()
    for t in ("alltoall_summary", "step_summary", "paper_comparison"):
        assert (res / "tables" / f"{t}.md").stat().st_size > 0, t
    assert (res / "figures" / "alltoall_comparison.png").stat().st_size > 5000
    report = (res / "report.md").read_text()
    assert "figures/alltoall_comparison.png" in report
    summary = report[report.index("## Summary") : report.index("## Notebook")]
    assert "- **TP AllToAll**, emulated 2x2 TP2 @ 0.125 Gbit/s, 128 KiB per rank: monta" in summary
    assert "- **Training step**, emulated 2x2 TP2, moe-2x70b-mini" in summary
    assert not re.search(r"\bnan\b|\de[+-]\d", report, re.IGNORECASE)


def test_dry_run_exchange_map_target(work):
    """`make exchange-map`'s target: six sweeps (TP 1/2/4 x two routings) of every exchange with --check,
    the calibration, then the map; not part of the default target."""
    proc = snakemake("-n", "-p", "results/map/map.md", cwd=work)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert out.count("--exchanges deepspeed,monta,2dh,allgather,node-dedup") == 6
    assert "--experts 16 --topk 8" in out and "--experts 8 --topk 1" in out
    assert "python -m monta_analysis.exchange_map" in out
    # each sweep on its fixed clock (top-8 x4; top-1 x1 at TP 1, x2 under TP), no chunk floor
    import re

    clocks = {
        (m[0], m[2]): m[1] for m in re.findall(r"--tp (\d) --sizes 1M:4M:4 .*?--dilation (\d+) .*?--topk (\d) ", out)
    }
    assert clocks == {
        ("1", "1"): "1",
        ("2", "1"): "2",
        ("4", "1"): "2",
        ("1", "8"): "4",
        ("2", "8"): "4",
        ("4", "8"): "4",
    }
    assert "--min-chunk" not in out
    default = snakemake("-n", cwd=work)
    assert "results/map/" not in default.stdout + default.stderr
