# Experiment 1: the TP AllToAll sweep (legacy / deepspeed / monta x chunks) per cluster shape.


rule alltoall:
    output:
        "results/alltoall/{cluster}.jsonl",
    log:
        "results/logs/alltoall/{cluster}.log",
    benchmark:
        "results/benchmarks/alltoall/{cluster}.tsv"
    params:
        run=launcher_args(),
        rep=repeat_args(),
        launch=lambda wildcards: launch(ALLTOALL_CLUSTERS[wildcards.cluster]),
        c=lambda wildcards: ALLTOALL_CLUSTERS[wildcards.cluster],
        net=lambda wildcards: net_args(cluster=ALLTOALL_CLUSTERS[wildcards.cluster]),
        a=config["alltoall"],
        sizes=lambda wildcards: ALLTOALL_CLUSTERS[wildcards.cluster]["sizes"] or config["alltoall"]["sizes"],
        variants=csv(config["alltoall"]["variants"]),
        chunks=csv(config["alltoall"]["chunks"]),
        check="--check" if config["alltoall"]["check"] else "",
        # TEST AID (off by default): a measured slowdown of one variant, to check the regression gate
        inject=(f"--inject-slowdown {shlex.quote(config['alltoall']['inject_slowdown'])}"
                if config["alltoall"]["inject_slowdown"] else ""),
    resources:
        **cluster_resources(lambda wildcards: ALLTOALL_CLUSTERS[wildcards.cluster]),
    conda:
        "../envs/monta.yaml"
    shell:
        "{params.launch} monta bench alltoall --nodes {params.c[nodes]}"
        " --gpus-per-node {params.c[gpus_per_node]} --tp {params.c[tp]} --sizes {params.sizes}"
        " --variants {params.variants} --chunks {params.chunks} {params.net} --dtype {params.a[dtype]}"
        " --warmup {params.a[warmup]} {params.rep} {params.check} {params.inject} {params.run} --out {output} > {log} 2>&1"
