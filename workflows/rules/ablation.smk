# Experiment 3: ablations on one cluster shape. Measured: chunk count, TP, buffer size,
# intra:inter bandwidth ratio (emulated only), top-k, capacity factor. Sequence length 8K..128K
# cannot run here, so it comes from the planner for the paper's cluster.


rule ablation_chunks:
    output:
        "results/ablation/chunks.jsonl",
    log:
        "results/logs/ablation/chunks.log",
    params:
        run=launcher_args(),
        rep=repeat_args(),
        launch=launch(ABL_CLUSTER),
        c=ABL_CLUSTER,
        a=ABL_A,
        size=ABL["size"],
        chunks=csv(ABL["chunks"]),
        net=net_args(),
    resources:
        **bench_resources(ABL_CLUSTER),
    conda:
        "../envs/monta.yaml"
    shell:
        "{params.launch} monta bench alltoall --nodes {params.c[nodes]} --gpus-per-node {params.c[gpus_per_node]}"
        " --tp {params.c[tp]} --sizes {params.size} --variants legacy,monta --chunks {params.chunks} {params.net}"
        " --dtype {params.a[dtype]} --warmup {params.a[warmup]} {params.rep}"
        " {params.run} --out {output} > {log} 2>&1"


rule ablation_tp:
    output:
        "results/ablation/tp/{tp}.jsonl",
    log:
        "results/logs/ablation/tp/{tp}.log",
    params:
        run=launcher_args(),
        rep=repeat_args(),
        launch=launch(ABL_CLUSTER),
        c=ABL_CLUSTER,
        a=ABL_A,
        size=ABL["size"],
        variants=ABL_VARIANTS,
        chunks=ABL_CHUNKS,
        net=net_args(),
    resources:
        **bench_resources(ABL_CLUSTER),
    conda:
        "../envs/monta.yaml"
    shell:
        "{params.launch} monta bench alltoall --nodes {params.c[nodes]} --gpus-per-node {params.c[gpus_per_node]}"
        " --tp {wildcards.tp} --sizes {params.size} --variants {params.variants} --chunks {params.chunks}"
        " {params.net} --dtype {params.a[dtype]} --warmup {params.a[warmup]} {params.rep}"
        " {params.run} --out {output} > {log} 2>&1"


rule ablation_buffer:
    output:
        "results/ablation/buffer.jsonl",
    log:
        "results/logs/ablation/buffer.log",
    params:
        run=launcher_args(),
        rep=repeat_args(),
        launch=launch(ABL_CLUSTER),
        c=ABL_CLUSTER,
        a=ABL_A,
        sizes=ABL["buffer_sizes"],
        variants=ABL_VARIANTS,
        chunks=ABL_CHUNKS,
        net=net_args(),
    resources:
        **bench_resources(ABL_CLUSTER),
    conda:
        "../envs/monta.yaml"
    shell:
        "{params.launch} monta bench alltoall --nodes {params.c[nodes]} --gpus-per-node {params.c[gpus_per_node]}"
        " --tp {params.c[tp]} --sizes {params.sizes} --variants {params.variants} --chunks {params.chunks}"
        " {params.net} --dtype {params.a[dtype]} --warmup {params.a[warmup]} {params.rep}"
        " {params.run} --out {output} > {log} 2>&1"


rule ablation_ratio:
    output:
        "results/ablation/ratio/{gbps}.jsonl",
    log:
        "results/logs/ablation/ratio/{gbps}.log",
    params:
        run=launcher_args(),
        rep=repeat_args(),
        launch=launch(ABL_CLUSTER),
        c=ABL_CLUSTER,
        a=ABL_A,
        size=ABL["size"],
        variants=ABL_VARIANTS,
        chunks=ABL_CHUNKS,
        net=lambda wildcards: net_args(inter_gbps=wildcards.gbps, intra_gbps=default_intra_gbps()),
    resources:
        **bench_resources(ABL_CLUSTER),
    conda:
        "../envs/monta.yaml"
    shell:
        "{params.launch} monta bench alltoall --nodes {params.c[nodes]} --gpus-per-node {params.c[gpus_per_node]}"
        " --tp {params.c[tp]} --sizes {params.size} --variants {params.variants} --chunks {params.chunks}"
        " {params.net} --dtype {params.a[dtype]} --warmup {params.a[warmup]} {params.rep}"
        " {params.run} --out {output} > {log} 2>&1"


rule ablation_topk:
    output:
        "results/ablation/topk/{topk}.jsonl",
    log:
        "results/logs/ablation/topk/{topk}.log",
    params:
        run=step_launcher_args(),
        launch=launch(ABL_CLUSTER),
        c=ABL_CLUSTER,
        s=config["step"],
        variants=ABL_STEP_VARIANTS,
        extra=lambda wildcards: ablation_step_args(topk=wildcards.topk),
    resources:
        **bench_resources(ABL_CLUSTER),
    conda:
        "../envs/monta.yaml"
    shell:
        "{params.launch} monta bench step --nodes {params.c[nodes]} --gpus-per-node {params.c[gpus_per_node]}"
        " --tp {params.c[tp]} --model {params.s[model]} --variants {params.variants}"
        " --steps {params.s[steps]} --warmup {params.s[warmup]} {params.extra} {params.run} --out {output} > {log} 2>&1"


rule ablation_capacity:
    output:
        "results/ablation/capacity/{cf}.jsonl",
    log:
        "results/logs/ablation/capacity/{cf}.log",
    params:
        run=step_launcher_args(),
        launch=launch(ABL_CLUSTER),
        c=ABL_CLUSTER,
        s=config["step"],
        variants=ABL_STEP_VARIANTS,
        extra=lambda wildcards: ablation_step_args(cf=wildcards.cf),
    resources:
        **bench_resources(ABL_CLUSTER),
    conda:
        "../envs/monta.yaml"
    shell:
        "{params.launch} monta bench step --nodes {params.c[nodes]} --gpus-per-node {params.c[gpus_per_node]}"
        " --tp {params.c[tp]} --model {params.s[model]} --variants {params.variants}"
        " --steps {params.s[steps]} --warmup {params.s[warmup]} {params.extra} {params.run} --out {output} > {log} 2>&1"


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
