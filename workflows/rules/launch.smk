# How a benchmark job starts and what it runs: the launch prefix (nothing for the emulator; srun +
# torchrun on SLURM), the scheduler resources of a benchmark job, and one function per benchmark
# that builds its whole `monta ...` command line (every rule that runs that benchmark calls it).


def launch(cluster):
    """Command prefix that starts the benchmark: nothing for the emulator (it spawns its own
    ranks); on SLURM one torchrun per node under srun, rendezvous on the allocation's first node
    (workflows/scripts/master_addr.sh: the jobstep has SLURM_JOB_ID but no SLURM_JOB_NODELIST)."""
    if EMULATED:
        return ""
    lc = config["launcher"]
    gpus = f"--gpus-per-node={cluster['gpus_per_node']} " if GPUS else ""
    return (
        f"MASTER_ADDR=$(sh {shlex.quote(str(ROOT / 'workflows' / 'scripts' / 'master_addr.sh'))}); "
        f"srun --nodes={cluster['nodes']} --ntasks-per-node=1 --cpus-per-task={lc['cpus_per_task']} "
        f"{gpus}--kill-on-bad-exit=1 "
        f"torchrun --nnodes={cluster['nodes']} --nproc-per-node={cluster['gpus_per_node']} "
        f"--rdzv-backend=c10d --rdzv-endpoint=$MASTER_ADDR:{lc['rdzv_port']} --rdzv-id=$SLURM_JOB_ID "
        "--no-python"
    )


def launcher_args():
    """How `monta bench alltoall` gets its ranks: it spawns them on the emulator, or it is one
    rank of a torchrun started by srun (reads RANK, WORLD_SIZE, MASTER_ADDR)."""
    lc = config["launcher"]
    kind = "emulate" if EMULATED else "env"
    return f"--launcher {kind} --backend {lc['backend']} --experiment {config['experiment']}"


def step_launcher_args():
    """`monta bench step` runs on the emulator (--launcher emulate, compute on the clock), else as a torchrun rank."""
    s = config["step"]
    if not EMULATED:
        return f"--launcher env --experiment {config['experiment']}"
    return (f"--launcher emulate {net_args(inter_gbps=s['inter_gbps'] or None)} --compute {s['compute']}"
            f" --experiment {config['experiment']}")


def bench_resources(cluster):
    """Scheduler resources of one benchmark job. Locally `emulator=1` (profiles/local) keeps
    emulated clusters from sharing the 2 cores; on SLURM whole nodes with their GPUs."""
    lc = config["launcher"]
    res = {"emulator": 1, "runtime": lc["runtime_min"], "mem_mb": 4000}
    if not EMULATED:
        res.update(
            nodes=cluster["nodes"],
            tasks=cluster["nodes"],
            mpi="srun",
            cpus_per_task=lc["cpus_per_task"],
            mem_mb=0,
            slurm_extra=f"'--gpus-per-node={cluster['gpus_per_node']} --exclusive'" if GPUS else "'--exclusive'",
        )
        if lc["partition"]:
            res["slurm_partition"] = lc["partition"]
        if lc["account"]:
            res["slurm_account"] = lc["account"]
    return res


def cluster_resources(lookup):
    """bench_resources as per-job callables; lookup(wildcards) -> the job's cluster shape."""
    keys = bench_resources({"nodes": 1, "gpus_per_node": 1}).keys()
    return {k: (lambda wildcards, k=k: bench_resources(lookup(wildcards))[k]) for k in keys}


def net_args(inter_gbps=None, intra_gbps=None, cluster=None):
    """Emulated-network flags for `monta bench` / `monta emulate calibrate`; none on real nodes.
    The NIC rate is ``inter_gbps``, else ``cluster``'s own, else the network section's. With a cluster
    preset topology the loopback follows at the preset's ratio (``--topology PRESET@GBPS``); an
    ``intra_gbps`` (the ratio ablation) or a topology of '' sets both rates by hand."""
    if not EMULATED:
        return ""
    net = config["network"]
    gbps = inter_gbps or (cluster or {}).get("inter_gbps") or net["inter_gbps"]
    intra = intra_gbps or net["intra_gbps"]
    if net["topology"] == "unshaped":
        args = ["--topology unshaped"]
    elif net["topology"] and not intra:
        args = [f"--topology {shlex.quote(net['topology'])}@{gbps}"]
    else:
        args = [f"--inter-gbps {gbps}"] + ([f"--intra-gbps {intra}"] if intra else [])
    if net["latency_us"]:
        args.append(f"--latency-us {net['latency_us']}")
    if net["allow_unshaped"]:
        args.append("--allow-unshaped")
    return " ".join(args)


def default_intra_gbps():
    """The loopback rate of the network section's profile (the ratio ablation keeps it, varying the NIC)."""
    net = config["network"]
    if net["topology"] and net["topology"] != "unshaped" and not net["intra_gbps"]:
        from monta.emulate.topology import Topology

        return Topology.preset(f"{net['topology']}@{net['inter_gbps']}").intra_gbps
    return net["intra_gbps"]


def ratio_min_chunk(gbps):
    """The chunk floor on a faster NIC (workflows/lib/configrules.py: the config check asks the same)."""
    from configrules import ratio_floor

    return ratio_floor(config, gbps)


def repeat_args(a=None):
    """How many iterations `monta bench alltoall` runs: a fixed count (`--iters`, exactly), or adaptive
    (`--adaptive`: at least `iters`, more until the paired ratios' CIs are narrow, up to `max_iters` /
    `budget_s`)."""
    a = a or config["alltoall"]
    if a["max_iters"] <= a["iters"]:
        return f"--iters {a['iters']}"
    return (f"--adaptive --iters {a['iters']} --max-iters {a['max_iters']} --target-ci {a['target_ci']}"
            f" --budget-s {a['budget_s']}")


def alltoall_cmd(
    cluster, sizes, variants=None, chunks=None, net=None, tp=None, flags=(), dilation=None, min_chunk=None
):
    """`monta bench alltoall` on ``cluster`` (launch prefix included; `--out` and the log are the rule's):
    the alltoall section's variants, chunks, dtype, warm-up, repetition and clock unless given; ``net``: the
    emulated-network flags (default: the network section's); ``tp``: the cluster's unless given;
    ``flags``: extra flags after the repetition, in order (an empty one keeps its place); ``min_chunk``:
    the chunk floor (default: the cluster's, else the alltoall section's)."""
    a = config["alltoall"]
    if min_chunk is None:
        min_chunk = cluster.get("min_chunk") or a["min_chunk"]
    return " ".join([
        launch(cluster),
        f"monta bench alltoall --nodes {cluster['nodes']} --gpus-per-node {cluster['gpus_per_node']}",
        f"--tp {cluster['tp'] if tp is None else tp} --sizes {sizes}",
        f"--exchanges {csv(a['variants'] if variants is None else variants)}",
        f"--chunks {csv(a['chunks'] if chunks is None else chunks)}",
        net_args() if net is None else net,
        f"--dtype {a['dtype']} --warmup {a['warmup']}",
        repeat_args(a),
        f"--dilation {a['dilation'] if dilation is None else dilation}",
        f"--min-chunk {min_chunk}" if str(min_chunk) not in ("", "0") else "",
        *flags,
        launcher_args(),
    ])


def step_args(s):
    """Optional model overrides: 0 means "the preset's value" and is not passed."""
    extra = [f"--topk {s['topk']}", f"--capacity-factor {s['capacity_factor']}"]
    if s["layers"]:
        extra.append(f"--layers {s['layers']}")
    if s["seq"]:
        extra.append(f"--seq {s['seq']}")
    if s.get("micro_batch"):
        extra.append(f"--micro-batch {s['micro_batch']}")
    return " ".join(extra)


def step_cmd(cluster, variants, **overrides):
    """`monta bench step` on ``cluster`` (launch prefix included; `--out` and the log are the rule's) with
    the step section's settings, ``overrides`` (e.g. topk, capacity_factor) replacing some of them."""
    s = {**config["step"], **overrides}
    return " ".join([
        launch(cluster),
        f"monta bench step --nodes {cluster['nodes']} --gpus-per-node {cluster['gpus_per_node']}",
        f"--tp {cluster['tp']} --model {s['model']} --variants {csv(variants)}",
        f"--steps {s['steps']} --warmup {s['warmup']}",
        step_args(s),
        step_launcher_args(),
    ])
