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
            ABL_CLUSTER,
            sizes=ABL["size"],
            net=net_args(inter_gbps=wildcards.gbps, intra_gbps=default_intra_gbps()),
            min_chunk=ratio_min_chunk(wildcards.gbps),
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


# Contention (docs/a800-clock.md#contention; not in the default target: `snakemake results/tables/contention.md`):
# the emulated step with compute waited under the MoE exchange (1 + c) x as long, at c = 0 (no contention: overlap
# gains are upper bounds) and c = 0.2, on the step ablations' cluster and step count; the ablations' variants plus the
# schedules whose compute overlaps the exchange (the registry's schedules that hide exchange time, on DeepSpeed's exchange: Lina's and
# Lancet's). c > 0 needs the clock: the emulator, compute modeled.
from monta import variants as _registry  # torch-free; the config check has loaded it already

CONTENTION = ["0", "0.2"]
CONTENTION_VARIANTS = list(
    dict.fromkeys(
        ABL["step_variants"]
        + [
            v
            for v in _registry.names()
            if _registry.get(v).schedule.hidden_us and _registry.get(v).exchange == "deepspeed"
        ]
    )
)


rule ablation_contention:
    output:
        "results/ablation/contention/{c}.jsonl",
    log:
        "results/logs/ablation/contention/{c}.log",
    wildcard_constraints:
        c=r"\d+(\.\d+)?",
    params:
        cmd=lambda wildcards: step_cmd(ABL_CLUSTER, CONTENTION_VARIANTS, **ABL_STEPS) + f" --contention {wildcards.c}",
    resources:
        **bench_resources(ABL_CLUSTER),
    conda:
        "../envs/monta.yaml"
    shell:
        "{params.cmd} --out {output} > {log} 2>&1"


# The model's side: every variant of moe-2x70b on the A800 (2 x 8, TP8) at c = 0, 0.1, 0.2, 0.3.
# Its printed table goes into the report (the default pipeline), the records into the emulated ablation's table.
rule predict_contention:
    output:
        records="results/predict/contention.jsonl",
        text="results/tables/contention-model.txt",
    log:
        "results/logs/predict/contention.log",
    localrule: True
    params:
        p=PRED,
    conda:
        "../envs/monta.yaml"
    shell:
        "monta predict contention --cluster {params.p[cluster]} --out {output.records} > {output.text} 2> {log}"


rule contention_table:
    input:
        expand("results/ablation/contention/{c}.jsonl", c=CONTENTION),
        rules.predict_contention.output.records,
    output:
        "results/tables/contention.md",
        "results/tables/contention.csv",
        "results/tables/contention.tex",
    log:
        "results/logs/analysis/contention.log",
    localrule: True
    conda:
        "../envs/monta.yaml"
    shell:
        "python -m monta_analysis.contention {input} --out-dir results > {log} 2>&1"
