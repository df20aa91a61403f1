# Experiment 2: one training step of the MoE model per variant (time, breakdown, memory).


rule step:
    output:
        "results/step/{cluster}.jsonl",
    log:
        "results/logs/step/{cluster}.log",
    benchmark:
        "results/benchmarks/step/{cluster}.tsv"
    params:
        cmd=lambda wildcards: step_cmd(STEP_CLUSTERS[wildcards.cluster], config["step"]["variants"]),
    resources:
        **cluster_resources(lambda wildcards: STEP_CLUSTERS[wildcards.cluster]),
    conda:
        "../envs/monta.yaml"
    shell:
        "{params.cmd} --out {output} > {log} 2>&1"
