"""The SLURM path for real: `snakemake --profile profiles/slurm --configfile config/slurm-local.yaml`
against a live slurmctld (tools/slurm/up.sh: two slurmd nodes n1, n2 on this host, slurmdbd for sacct).

Every benchmark is a SLURM job whose rule runs one torchrun per node under srun; the test checks what
SLURM accounted (sacct), what the ranks were given (the records' env), that the analysis and the
report ran, and that a failing job's SLURM log is shown by Snakemake.

Needs root and Debian's slurm packages. Where they are missing it installs them only with
MONTA_SLURM_INSTALL=1 (CI sets it in .ci/run); MONTA_SLURM=0 skips the module. A cluster already
started by `make slurm-up` is used and left running; one started here is stopped afterwards.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from monta.results import read_records

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")
TOOLS = ROOT / "tools" / "slurm"
slurm_test = pytest.mark.slurm(pytest.mark.slow(pytest.mark.timeout(1500)))

BENCH_RULES = {"alltoall", "step"}  # config/slurm-local.yaml runs no ablations (each the same launch path)
LOCAL_RULES = {
    "build",
    "build_variant",
    "predict_paper",
    "predict_alltoall",
    "predict_plan",
    "ablation_seq",
    "notebook",
    "report",
    "regress",
}
SUBMITTED = re.compile(r"Job \d+ has been submitted with SLURM jobid (\d+) \(log: (\S+)\)\.")


def _slurm_packages_missing() -> list[str]:
    return [
        tool
        for tool in ("slurmctld", "slurmd", "slurmdbd", "sbatch", "munged", "mariadbd")
        if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists()
    ]


@pytest.fixture(scope="module")
def slurm():
    """SLURM_CONF of a running local cluster (started here unless `make slurm-up` already did)."""
    if os.environ.get("MONTA_SLURM") == "0":
        pytest.skip("MONTA_SLURM=0")
    if os.geteuid() != 0:
        pytest.skip("a local SLURM needs root (slurmd starts the jobs); run the suite as root or on a real cluster")
    missing = _slurm_packages_missing()
    if missing and os.environ.get("MONTA_SLURM_INSTALL") != "1":
        pytest.skip(
            f"SLURM packages not installed ({', '.join(missing)} missing); `make slurm-up` installs them,"
            " or set MONTA_SLURM_INSTALL=1 to let this test do it"
        )
    # One local cluster per host, and the session that started it stops it: a second test session on the same
    # host (a developer's run beside CI's) waits here for the first to finish with it rather than sharing daemons
    # the first one then stops under it.
    with _host_lock(Path(os.environ.get("MONTA_SLURM_DIR", "/tmp/monta-slurm") + ".lock"), timeout_s=1800):
        up = subprocess.run(["bash", str(TOOLS / "up.sh")], capture_output=True, text=True, timeout=600)
        if up.returncode == 3:  # this machine cannot host it: the script's one line says why
            pytest.skip(up.stderr.strip().splitlines()[-1])
        assert up.returncode == 0, up.stdout + up.stderr
        conf = re.search(r"SLURM_CONF=(\S+)", up.stdout).group(1)
        started_here = "already running" not in up.stdout
        yield conf
        if started_here:
            down = subprocess.run(["bash", str(TOOLS / "down.sh")], capture_output=True, text=True, timeout=300)
            assert down.returncode == 0, down.stdout + down.stderr


@contextlib.contextmanager
def _host_lock(path: Path, timeout_s: float):
    """An exclusive lock on ``path`` for the block, polled up to ``timeout_s`` (then a one-line failure naming the
    lock); the kernel drops it if this process dies."""
    import fcntl

    with open(path, "w") as fh:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    pytest.fail(f"another test session has held the local SLURM ({path}) for {timeout_s:.0f} s")
                time.sleep(2)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _workdir(path: Path) -> Path:
    for name in ("Snakefile", "workflows", "config", "analysis", "profiles"):
        (path / name).symlink_to(ROOT / name)
    return path


def _snakemake(
    conf: str, cwd: Path, *args: str, timeout: int = 1200, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    env = {**os.environ, "SLURM_CONF": conf, "WANDB_MODE": "disabled", "DS_ACCELERATOR": "cpu", **(env or {})}
    # Poll the tiny local controller often (the profile's pace is for real clusters).
    return subprocess.run(
        [
            SNAKEMAKE,
            "--profile",
            "profiles/slurm",
            "--configfile",
            "config/slurm-local.yaml",
            "--slurm-init-seconds-before-status-checks",
            "2",
            "--slurm-keep-successful-logs",
            *args,
        ],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def _sacct(conf: str, jobs, *fields: str, allocations_only: bool = True) -> list[dict[str, str]]:
    cmd = ["sacct", "-j", ",".join(jobs), "--parsable2", "--noheader", "--format", ",".join(fields)]
    out = subprocess.run(
        cmd + (["-X"] if allocations_only else []),
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "SLURM_CONF": conf},
    ).stdout
    return [dict(zip(fields, line.split("|"))) for line in out.splitlines() if line]


def _node_addr(conf: str, node: str) -> str:
    return subprocess.run(
        ["sinfo", "-h", "-N", "-n", node, "-o", "%o"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "SLURM_CONF": conf},
    ).stdout.split()[0]


@pytest.fixture(scope="module")
def pipeline(slurm, tmp_path_factory):
    """One real run of the whole pipeline through the local SLURM."""
    work = _workdir(tmp_path_factory.mktemp("slurm-pipeline"))
    proc = _snakemake(slurm, work)
    out = proc.stdout + proc.stderr
    (work / "snakemake.out").write_text(out)
    assert proc.returncode == 0, out[-8000:]
    jobs: dict[str, str] = {}  # SLURM job id -> rule
    for jobid, log in SUBMITTED.findall(out):
        jobs[jobid] = re.search(r"/slurm_logs/rule_([a-z_]+)/", log).group(1)
    return work, out, jobs


@slurm_test
def test_benchmarks_are_slurm_jobs_and_sacct_shows_them_completed(slurm, pipeline):
    work, out, jobs = pipeline
    assert set(jobs.values()) == BENCH_RULES, out[-4000:]  # every benchmark submitted, nothing else
    assert not LOCAL_RULES & set(jobs.values())
    alloc = _sacct(slurm, jobs, "JobIDRaw", "State", "ExitCode", "NNodes", "NodeList", "Partition", "Account")
    assert {a["JobIDRaw"] for a in alloc} == set(jobs)
    for a in alloc:
        assert (a["State"], a["ExitCode"]) == ("COMPLETED", "0:0"), (jobs[a["JobIDRaw"]], a)
        assert (a["NNodes"], a["NodeList"], a["Partition"], a["Account"]) == ("2", "n[1-2]", "debug", "monta"), a
    # Inside each allocation the rule started one torchrun per node: a step of 2 tasks over both nodes.
    steps = _sacct(slurm, jobs, "JobID", "JobName", "State", "NTasks", "NodeList", allocations_only=False)
    print("\nsacct of the pipeline's jobs (rule: allocation and steps):")  # shown with pytest -s
    for s in steps:
        rule = jobs.get(s["JobID"].split(".")[0], "?")
        print(f"  {s['JobID']:<14} {rule:<18} {s['JobName']:<12} {s['State']:<10} {s['NTasks']:>3} {s['NodeList']}")
    for jobid, rule in jobs.items():
        torchrun = [s for s in steps if s["JobID"].startswith(f"{jobid}.") and s["JobName"] == "torchrun"]
        assert [(s["State"], s["NTasks"], s["NodeList"]) for s in torchrun] == [("COMPLETED", "2", "n[1-2]")], (
            rule,
            [s for s in steps if s["JobID"].startswith(f"{jobid}.")],
        )


@slurm_test
def test_ranks_got_their_world_from_srun_and_torchrun(slurm, pipeline):
    """The records' env is what rank 0 was started with: srun's task, torchrun's rank numbering
    (node_rank x ranks per node + local rank) and a rendezvous on the allocation's first node."""
    work, out, jobs = pipeline
    first_node_addr = socket.gethostbyname(_node_addr(slurm, "n1"))
    job_of = {rule: jobid for jobid, rule in jobs.items()}
    for path, rule, kind in (
        ("alltoall/local-2x2.jsonl", "alltoall", "alltoall"),
        ("step/local-2x2.jsonl", "step", "step"),
    ):
        records = read_records(work / "results" / path)
        assert records, path
        for r in records:
            assert r["kind"] == kind and r["source"] == "measured" and r["experiment"] == "slurm-local", path
            env = r["env"]
            assert env["launcher"] == "srun-torchrun", (path, env)
            d, s = env["dist"], env["slurm"]
            assert (d["world_size"], d["local_world_size"], d["rank"]) == ("4", "2", "0"), (path, d)
            assert int(d["rank"]) == int(d["node_rank"]) * 2 + int(d["local_rank"]), (path, d)
            assert socket.gethostbyname(d["master_addr"]) == first_node_addr, (path, d)
            assert (s["job_id"], s["step_nodelist"], s["ntasks"]) == (job_of[rule], "n[1-2]", "2"), (path, s)
            assert s["node"] in ("n1", "n2") and s["procid"] == str(int(s["node"][1:]) - 1), (path, s)
        if kind == "alltoall":
            assert all(r["metrics"]["wrong"] == 0 for r in records)  # --check: the 4 ranks exchanged correctly
            assert {r["params"]["variant"] for r in records} >= {"legacy", "monta"}
    # Each job's rendezvous endpoint (workflows/scripts/master_addr.sh, in the job's SLURM log) is the
    # first node of its allocation.
    assert "--rdzv-endpoint=$MASTER_ADDR:29417" in out
    for jobid, rule in jobs.items():
        slurm_log = next((work / ".snakemake" / "slurm_logs" / f"rule_{rule}").rglob(f"{jobid}.log")).read_text()
        assert f"master_addr.sh: job {jobid} on n[1-2]: rendezvous on n1 ({_node_addr(slurm, 'n1')})" in slurm_log, (
            rule,
            slurm_log[-2000:],
        )
    env = json.loads((work / "results" / "build" / "env.json").read_text())["env"]
    assert env["launcher"] == "local"  # the build rule runs on the submit host (localrules)


@slurm_test
def test_analysis_and_report_ran_on_the_slurm_records(pipeline):
    work, out, jobs = pipeline
    res = work / "results"
    for nb in ("alltoall", "step", "paper"):
        assert (res / "analysis" / f"{nb}.json").exists(), nb
    for t in ("alltoall_summary", "step_summary"):
        table = (res / "tables" / f"{t}.md").read_text()
        assert "measured" in table, t  # the rows measured through SLURM, next to the predictions
    assert "# monta results: slurm-local" in (res / "report.md").read_text()
    assert (
        "stored baseline analysis/baselines/slurm-local-alltoall.jsonl is missing"
        in (res / "regress" / "alltoall.md").read_text()
    )


@slurm_test
def test_failing_job_shows_its_slurm_log(slurm, tmp_path):
    """A benchmark that fails inside its job: Snakemake stops non-zero, sacct says FAILED, and Snakemake prints
    the rule's log and then the job's SLURM log. The failure must be one no config check sees (a model name the
    step does not know is refused before anything is submitted): the test plugin's toy-phases schedule raises
    when MONTA_TOY_FAIL is set, and the job inherits the environment (sbatch --export=ALL)."""
    work = _workdir(tmp_path)
    proc = _snakemake(
        slurm,
        work,
        "--config",
        'step={"variants": ["toy"]}',
        "--",
        "results/step/local-2x2.jsonl",
        timeout=600,
        env={"MONTA_TOY_FAIL": "1"},
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-4000:]
    ((jobid, slurm_log),) = SUBMITTED.findall(out)
    assert _sacct(slurm, [jobid], "State")[0]["State"] == "FAILED"
    assert Path(slurm_log).exists()  # failed jobs keep their SLURM log
    assert "Logfile results/logs/step/local-2x2.log:" in out
    assert "toy-phases fails on purpose" in out  # the rule's log: what the ranks said
    shown = out.split(f"Logfile {slurm_log}:", 1)
    assert len(shown) == 2, out[-4000:]
    # The SLURM log printed in full: the job's own Snakemake, the failed srun and its exit status.
    assert "--executor slurm-jobstep" in shown[1] and "CalledProcessError" in shown[1], shown[1][-3000:]


def test_launch_environment_names_the_launcher():
    """What records store as env.launcher / env.dist / env.slurm, from the variables each launcher sets."""
    from monta.results import launch_environment

    torchrun = {
        "TORCHELASTIC_RUN_ID": "7",
        "RANK": "5",
        "WORLD_SIZE": "8",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "4",
        "GROUP_RANK": "1",
        "MASTER_ADDR": "gpu01",
        "MASTER_PORT": "29500",
    }
    srun = {
        "SLURM_JOB_ID": "42",
        "SLURM_STEP_ID": "0",
        "SLURMD_NODENAME": "gpu02",
        "SLURM_PROCID": "1",
        "SLURM_NTASKS": "2",
        "SLURM_STEP_NODELIST": "gpu[01-02]",
        "SLURM_JOB_NODELIST": "gpu[01-02]",
    }
    env = launch_environment({**torchrun, **srun})
    assert env["launcher"] == "srun-torchrun"
    assert env["dist"] == {
        "rank": "5",
        "world_size": "8",
        "local_rank": "1",
        "local_world_size": "4",
        "node_rank": "1",
        "master_addr": "gpu01",
        "master_port": "29500",
    }
    assert env["slurm"] == {
        "job_id": "42",
        "step_id": "0",
        "node": "gpu02",
        "procid": "1",
        "ntasks": "2",
        "step_nodelist": "gpu[01-02]",
        "job_nodelist": "gpu[01-02]",
    }
    assert launch_environment(torchrun)["launcher"] == "torchrun"
    # torchrun in a batch script without srun: a SLURM job, but no step
    assert launch_environment({**torchrun, "SLURM_JOB_ID": "42"})["launcher"] == "torchrun"
    assert launch_environment(srun)["launcher"] == "srun"
    assert launch_environment({"MONTA_EMULATED": "1", "RANK": "0"})["launcher"] == "emulator"
    assert launch_environment({}) == {"launcher": "local"}


def test_dry_run_slurm_local_asks_no_gpus_and_finds_the_first_node():
    """gloo on CPU nodes: no GPU request anywhere; the rendezvous address comes from master_addr.sh."""
    env = {**os.environ, "WANDB_MODE": "disabled"}
    proc = subprocess.run(
        [SNAKEMAKE, "-n", "--profile", "profiles/slurm", "--configfile", "config/slurm-local.yaml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "--gpus-per-node=" not in out and "--gres" not in out  # (monta's own flag is `--gpus-per-node N`)
    assert (
        "workflows/scripts/master_addr.sh); srun --nodes=2 --ntasks-per-node=1 --cpus-per-task=2 "
        "--kill-on-bad-exit=1 torchrun --nnodes=2 --nproc-per-node=2 --rdzv-backend=c10d "
        "--rdzv-endpoint=$MASTER_ADDR:29417"
    ) in out
    assert "nodes=2, tasks=2, mpi=srun, slurm_extra='--exclusive', slurm_partition=debug, slurm_account=monta" in out
    assert "--launcher env --backend gloo --experiment slurm-local" in out
