# The exchange map (`make exchange-map`; not in the default target, it takes longer than its budget):
# every exchange on the 2 x 4 emulated A800 over TP 1/2/4, two routings and two buffer sizes, then the
# map (measured winner vs the model's pick, per-exchange error) and the model's map of the real cluster.

MAP_EXCHANGES = ["deepspeed", "monta", "2dh", "allgather", "node-dedup"]
MAP_TP = [1, 2, 4]
# (experts, top-k): the paper's one route per token on 8 experts, and a fine-grained 16 experts x top-8
MAP_ROUTING = {"e8k1": (8, 1), "e16k8": (16, 8)}
MAP_SIZES = "1M:4M:4"  # 1 MiB and 4 MiB buffers: hidden 256 fp32
# its own cluster entry (any config): 2 x 4 on the network section's profile
MAP_CLUSTER = {"name": "map", "nodes": 2, "gpus_per_node": 4, "tp": 4}


rule map_bench:
    output:
        "results/map/tp{tp}-{routing}.jsonl",
    log:
        "results/logs/map/tp{tp}-{routing}.log",
    wildcard_constraints:
        routing="|".join(MAP_ROUTING),
    params:
        cmd=lambda wildcards: alltoall_cmd(
            MAP_CLUSTER,
            sizes=MAP_SIZES,
            variants=MAP_EXCHANGES,
            chunks=[2],
            tp=int(wildcards.tp),
            flags=(
                f"--experts {MAP_ROUTING[wildcards.routing][0]} --topk {MAP_ROUTING[wildcards.routing][1]}",
                "--hidden 256 --no-components --check",
            ),
        ),
    resources:
        **cluster_resources(lambda wildcards: MAP_CLUSTER),
    conda:
        "../envs/monta.yaml"
    shell:
        "{params.cmd} --out {output} > {log} 2>&1"


rule exchange_map:
    input:
        measured=expand("results/map/tp{tp}-{routing}.jsonl", tp=MAP_TP, routing=list(MAP_ROUTING)),
        profile="results/calibrate/linkprofile.json",
    output:
        report="results/map/map.md",
        figure=report("results/map/map.png", caption="../report/map.rst", category="Exchange map"),
        points="results/map/map-points.jsonl",
    log:
        "results/logs/map/map.log",
    conda:
        "../envs/monta.yaml"
    shell:
        "python -m monta_analysis.exchange_map --measured {input.measured} --profile {input.profile}"
        " --out results/map > {log} 2>&1"
