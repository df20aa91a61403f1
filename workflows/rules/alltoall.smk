# Experiment 1: the TP AllToAll sweep (legacy / deepspeed / monta x chunks) per cluster shape.

# The sweep's own flags (the ablations run without them): --check and the TEST AID (off by default):
# a measured slowdown of one variant, to check the regression gate.
SWEEP_FLAGS = (
    "--check" if config["alltoall"]["check"] else "",
    (f"--inject-slowdown {shlex.quote(config['alltoall']['inject_slowdown'])}"
     if config["alltoall"]["inject_slowdown"] else ""),
)


rule alltoall:
    output:
        "results/alltoall/{cluster}.jsonl",
    log:
        "results/logs/alltoall/{cluster}.log",
    benchmark:
        "results/benchmarks/alltoall/{cluster}.tsv"
    params:
        cmd=lambda wildcards: alltoall_cmd(
            ALLTOALL_CLUSTERS[wildcards.cluster],
            sizes=ALLTOALL_CLUSTERS[wildcards.cluster]["sizes"] or config["alltoall"]["sizes"],
            net=net_args(cluster=ALLTOALL_CLUSTERS[wildcards.cluster]),
            flags=SWEEP_FLAGS,
        ),
    resources:
        **cluster_resources(lambda wildcards: ALLTOALL_CLUSTERS[wildcards.cluster]),
    conda:
        "../envs/monta.yaml"
    shell:
        "{params.cmd} --out {output} > {log} 2>&1"
