# Experiment 4: the performance model for the paper's cluster (A800), the planner's strategy,
# and the model's accuracy against a link profile calibrated on the emulator (on GPU nodes: against
# predict.cluster, the cluster the records ran on).


rule predict_paper:
    output:
        "results/predict/paper.jsonl",
    log:
        "results/logs/predict/paper.log",
    conda:
        "../envs/monta.yaml"
    shell:
        "monta predict paper --out {output} > {log} 2>&1"


rule predict_alltoall:
    output:
        "results/predict/alltoall.jsonl",
    log:
        "results/logs/predict/alltoall.log",
    params:
        p=PRED,
        exchanges=csv(PRED["variants"]),
        chunks=csv(PRED["chunks"]),
    conda:
        "../envs/monta.yaml"
    shell:
        "monta predict alltoall --cluster {params.p[cluster]} --nodes {params.p[nodes]}"
        " --gpus-per-node {params.p[gpus_per_node]} --tp {params.p[tp]} --sizes {params.p[sizes]}"
        " --exchanges {params.exchanges} --chunks {params.chunks} --out {output} > {log} 2>&1"


rule predict_plan:
    output:
        "results/predict/plan.jsonl",
    log:
        "results/logs/predict/plan.log",
    params:
        p=PRED,
        layers=f"--layers {PRED['layers']}" if PRED["layers"] else "",
    conda:
        "../envs/monta.yaml"
    shell:
        "monta plan --cluster {params.p[cluster]} --nodes {params.p[nodes]} --gpus-per-node {params.p[gpus_per_node]}"
        " --model {params.p[model]} {params.layers}"
        " --seq {params.p[seq]} --out {output} > {log} 2>&1"


rule calibrate:
    output:
        "results/calibrate/linkprofile.json",
    log:
        "results/logs/calibrate/linkprofile.log",
    params:
        c=PRED["calibrate_cluster"],
        net=net_args(cluster=PRED["calibrate_cluster"]),
    resources:
        **bench_resources(PRED["calibrate_cluster"]),
    conda:
        "../envs/monta.yaml"
    shell:
        "monta emulate calibrate --nodes {params.c[nodes]} --gpus-per-node {params.c[gpus_per_node]}"
        " {params.net} --out {output} > {log} 2>&1"


rule calibrate_step:
    output:
        "results/calibrate/step-linkprofile.json",
    log:
        "results/logs/calibrate/step-linkprofile.log",
    params:
        c=PRED["calibrate_cluster"],
        net=net_args(inter_gbps=config["step"]["inter_gbps"] or None),
    resources:
        **bench_resources(PRED["calibrate_cluster"]),
    conda:
        "../envs/monta.yaml"
    shell:
        "monta emulate calibrate --nodes {params.c[nodes]} --gpus-per-node {params.c[gpus_per_node]}"
        " {params.net} --out {output} > {log} 2>&1"


rule predict_accuracy:
    input:
        unpack(get_accuracy_input),
    output:
        "results/predict/accuracy.jsonl",
    log:
        "results/logs/predict/accuracy.log",
    conda:
        "../envs/monta.yaml"
    params:
        model=lambda wildcards, input: (f"--profile {input.profile}" if "profile" in input.keys()
                                        else f"--cluster {PRED['cluster']}"),
        steps=lambda wildcards, input: " ".join(input.steps) if "steps" in input.keys() else "",
        step_profile=lambda wildcards, input: (f"--step-profile {input.step_profile}"
                                               if "step_profile" in input.keys() else ""),
    shell:
        "monta predict accuracy --measured {input.measured} {params.steps} {params.model}"
        " {params.step_profile} --out {output} > {log} 2>&1"


# Checked against the world: every published measurement (data/published/) priced blind and calibrated,
# the vendors' stated expectations and the published crossovers checked; a section of the report.
rule predict_published:
    input:
        data=str(ROOT / "data/published/collectives.csv"),
        claims=str(ROOT / "data/published/claims.csv"),
    output:
        records="results/predict/published.jsonl",
        md="results/tables/published.md",
    log:
        "results/logs/predict/published.log",
    conda:
        "../envs/monta.yaml"
    shell:
        "monta predict published --data {input.data} --claims {input.claims} --out {output.records}"
        " --md {output.md} > {log} 2>&1"
