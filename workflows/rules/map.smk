# The exchange map (`make exchange-map`; not in the default target, it takes longer than its budget):
# every exchange on the 2 x 4 emulated A800 over TP 1/2/4, two routings and two buffer sizes, then the
# map (measured winner vs the model's pick, per-exchange error) and the model's map of the real cluster.
# The skew map (`make skew-map`): the same exchanges under four routing workloads at one routing and size.

from monta_analysis.maps import map_exchanges

# Every exchange the registry holds that the model prices (legacy, the pre-0.14.5 DeepSpeed, aside):
# a plugin's exchange joins both maps without a line changed here.
MAP_EXCHANGES = map_exchanges()
MAP_TP = [1, 2, 4]
# (experts, top-k): the paper's one route per token on 8 experts, and a fine-grained 16 experts x top-8
MAP_ROUTING = {"e8k1": (8, 1), "e16k8": (16, 8)}
MAP_SIZES = "1M:4M:4"  # 1 MiB and 4 MiB buffers: hidden 256 fp32
# its own cluster entry (any config): 2 x 4 on the network section's profile
MAP_CLUSTER = {"name": "map", "nodes": 2, "gpus_per_node": 4, "tp": 4}
# A fixed clock per routing and TP, never `auto` (whatever the alltoall section says): auto's reruns left 5
# of 8 CPU-bound map points bound at x2 and doubled the map's time (docs/results/exchange-map.md). The
# token-level exchanges (node-dedup, allgather) do 9-18 ms of host work a rank and call; at top-8 they move
# a fraction of the buffer's bytes for it, so their links must run 4x slower for the host to keep up (TP 4,
# 4 MiB: their ranks waited for a core 14-16% at x2, 8% at x4); at top-1 under TP node-dedup waited 16-22%
# at x1, 7-16% at x2. The model prices each record at its clock (analysis/maps.py, record_cluster).
MAP_DILATION = {"e8k1": {1: 1, 2: 2, 4: 2}, "e16k8": {1: 4, 2: 4, 4: 4}}
SKEW_DILATION = 1  # the skew map: a fixed count at one clock (auto could not rerun it)
# No chunk floor (whatever the alltoall section says): the maps run monta at two chunks, whose 512 KiB
# chunks at 1 MiB kept up with the links (rank wait 4-8% on the map's runs); the floor is for 4 and 8.


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
            dilation=MAP_DILATION[wildcards.routing][int(wildcards.tp)],
            min_chunk=0,
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


# The skew map: TP 1/2/4 x four routings (docs/routing.md) at 16 experts top-2, one 4 MiB buffer at
# capacity factor 1.25 (GShard's and Switch's training value). 16 experts top-2: MaxVio 4 is reachable (up
# to E/k - 1 = 7), and a token reaches the other node's experts at W0 only 77% of the time (1 - C(8,2) /
# C(16,2)), so a hot node can raise node-dedup's bytes on its busiest link by up to 1.3x where a capacity
# buffer keeps its own. At cf 1 the buffer exchanges move no more than the routes (node-dedup's two hops
# lose at W0 and no winner moves: docs/results/skew-map.md); at 1.25 they move a quarter of empty slots at
# W0, which a skewed routing fills. A fixed iteration count, not the alltoall section's adaptive repetition,
# holds the 12 runs to the budget.
SKEW_ROUTINGS = {"w0": "W0", "hotnode": "hotnode", "lnv1": "lognormal:maxvio=1", "lnv4": "lognormal:maxvio=4"}
SKEW_EXPERTS, SKEW_TOPK, SKEW_SIZE, SKEW_ITERS, SKEW_CF = 16, 2, "4M", 5, 1.25


rule skew_bench:
    output:
        "results/skewmap/tp{tp}-{skew}.jsonl",
    log:
        "results/logs/skewmap/tp{tp}-{skew}.log",
    wildcard_constraints:
        skew="|".join(SKEW_ROUTINGS),
    params:
        # the alltoall section's repetition replaced by the fixed count
        cmd=lambda wildcards: alltoall_cmd(
            MAP_CLUSTER,
            sizes=SKEW_SIZE,
            variants=MAP_EXCHANGES,
            chunks=[2],
            tp=int(wildcards.tp),
            flags=(
                f"--experts {SKEW_EXPERTS} --topk {SKEW_TOPK} --capacity-factor {SKEW_CF}",
                f"--routing {SKEW_ROUTINGS[wildcards.skew]}",
                "--hidden 256 --no-components --check",
            ),
            dilation=SKEW_DILATION,
            min_chunk=0,
        ).replace(repeat_args(), f"--iters {SKEW_ITERS}"),
    resources:
        **cluster_resources(lambda wildcards: MAP_CLUSTER),
    conda:
        "../envs/monta.yaml"
    shell:
        "{params.cmd} --out {output} > {log} 2>&1"


rule skew_map:
    input:
        measured=expand("results/skewmap/tp{tp}-{skew}.jsonl", tp=MAP_TP, skew=list(SKEW_ROUTINGS)),
        profile="results/calibrate/linkprofile.json",
    output:
        report="results/skewmap/skew-map.md",
        figure=report("results/skewmap/skew-map.png", caption="../report/skewmap.rst", category="Exchange map"),
        points="results/skewmap/skew-points.jsonl",
    log:
        "results/logs/skewmap/skew-map.log",
    conda:
        "../envs/monta.yaml"
    shell:
        "python -m monta_analysis.skew_map --measured {input.measured} --profile {input.profile}"
        " --out results/skewmap > {log} 2>&1"
