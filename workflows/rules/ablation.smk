# Experiment 3: ablations on one cluster shape. Measured: chunk count, TP, buffer size,
# intra:inter bandwidth ratio (emulated only), top-k, capacity factor. Sequence length 8K..128K
# cannot run here, so it comes from the planner for the paper's cluster.


rule ablation_chunks:
    output:
        "results/ablation/chunks.jsonl",
    log:
        "results/logs/ablation/chunks.log",
    params:
        cmd=alltoall_cmd(ABL_CLUSTER, sizes=ABL["size"], variants=["legacy", "monta"], chunks=ABL["chunks"]),
    resources:
        **bench_resources(ABL_CLUSTER),
    conda:
        "../envs/monta.yaml"
    shell:
        "{params.cmd} --out {output} > {log} 2>&1"


rule ablation_tp:
    output:
        "results/ablation/tp/{tp}.jsonl",
    log:
        "results/logs/ablation/tp/{tp}.log",
    params:
        cmd=lambda wildcards: alltoall_cmd(ABL_CLUSTER, sizes=ABL["size"], tp=wildcards.tp),
    resources:
        **bench_resources(ABL_CLUSTER),
    conda:
        "../envs/monta.yaml"
    shell:
        "{params.cmd} --out {output} > {log} 2>&1"


rule ablation_buffer:
    output:
        "results/ablation/buffer.jsonl",
    log:
        "results/logs/ablation/buffer.log",
    params:
        cmd=alltoall_cmd(ABL_CLUSTER, sizes=ABL["buffer_sizes"]),
    resources:
        **bench_resources(ABL_CLUSTER),
    conda:
        "../envs/monta.yaml"
    shell:
        "{params.cmd} --out {output} > {log} 2>&1"


rule ablation_ratio:
    output:
        "results/ablation/ratio/{gbps}.jsonl",
    log:
        "results/logs/ablation/ratio/{gbps}.log",
    params:
        cmd=lambda wildcards: alltoall_cmd(
            ABL_CLUSTER, sizes=ABL["size"], net=net_args(inter_gbps=wildcards.gbps, intra_gbps=default_intra_gbps())
        ),
    resources:
        **bench_resources(ABL_CLUSTER),
    conda:
        "../envs/monta.yaml"
    shell:
        "{params.cmd} --out {output} > {log} 2>&1"


rule ablation_topk:
    output:
        "results/ablation/topk/{topk}.jsonl",
    log:
        "results/logs/ablation/topk/{topk}.log",
    params:
        cmd=lambda wildcards: step_cmd(ABL_CLUSTER, ABL["step_variants"], topk=wildcards.topk, **ABL_STEPS),
    resources:
        **bench_resources(ABL_CLUSTER),
    conda:
        "../envs/monta.yaml"
    shell:
        "{params.cmd} --out {output} > {log} 2>&1"


rule ablation_capacity:
    output:
        "results/ablation/capacity/{cf}.jsonl",
    log:
        "results/logs/ablation/capacity/{cf}.log",
    params:
        cmd=lambda wildcards: step_cmd(ABL_CLUSTER, ABL["step_variants"], capacity_factor=wildcards.cf, **ABL_STEPS),
    resources:
        **bench_resources(ABL_CLUSTER),
    conda:
        "../envs/monta.yaml"
    shell:
        "{params.cmd} --out {output} > {log} 2>&1"


rule ablation_seq:
    output:
        "results/ablation/seq/{seq}.jsonl",
    log:
        "results/logs/ablation/seq/{seq}.log",
    params:
        p=PRED,
        layers=f"--layers {PRED['layers']}" if PRED["layers"] else "",
    conda:
        "../envs/monta.yaml"
    shell:
        "monta plan --cluster {params.p[cluster]} --nodes {params.p[nodes]} --gpus-per-node {params.p[gpus_per_node]}"
        " --model {params.p[model]} {params.layers}"
        " --seq {wildcards.seq} --out {output} > {log} 2>&1"
