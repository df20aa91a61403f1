# Experiment 2: one training step of the MoE model per variant (time, breakdown, memory).


rule step:
    output:
        "results/step/{cluster}.jsonl",
    log:
        "results/logs/step/{cluster}.log",
    benchmark:
        "results/benchmarks/step/{cluster}.tsv"
    params:
        run=step_launcher_args(),
        launch=lambda wildcards: launch(STEP_CLUSTERS[wildcards.cluster]),
        c=lambda wildcards: STEP_CLUSTERS[wildcards.cluster],
        s=config["step"],
        variants=csv(config["step"]["variants"]),
        extra=step_args(config["step"]),
    resources:
        **cluster_resources(lambda wildcards: STEP_CLUSTERS[wildcards.cluster]),
    conda:
        "../envs/monta.yaml"
    shell:
        "{params.launch} monta bench step --nodes {params.c[nodes]} --gpus-per-node {params.c[gpus_per_node]}"
        " --tp {params.c[tp]} --model {params.s[model]} --variants {params.variants}"
        " --steps {params.s[steps]} --warmup {params.s[warmup]} {params.extra} {params.run} --out {output} > {log} 2>&1"
