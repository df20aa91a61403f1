# Record the environment (torch, deepspeed, NCCL, python, git commit, hardware) and each
# variant's fully resolved config, so every result can be traced to what produced it.


rule build:
    output:
        env="results/build/env.json",
    log:
        "results/logs/build/env.log",
    params:
        config=lambda wildcards: json.dumps(config, sort_keys=True),
    conda:
        "../envs/monta.yaml"
    script:
        "../scripts/build_env.py"


rule build_variant:
    input:
        env="results/build/env.json",
    output:
        "results/build/variants/{variant}.json",
    log:
        "results/logs/build/{variant}.log",
    params:
        config=lambda wildcards: json.dumps(config, sort_keys=True),
    conda:
        "../envs/monta.yaml"
    script:
        "../scripts/resolve_variant.py"
