# The monta reproduction pipeline: `snakemake --cores 2 --profile profiles/local` (emulated
# cluster, default config) or `snakemake --profile profiles/slurm --configfile config/a800.yaml`.
# Config is validated against config/schema.yaml before anything runs; rules live in workflows/rules.

configfile: "config/default.yaml"


include: "workflows/rules/common.smk"
include: "workflows/rules/build.smk"
include: "workflows/rules/alltoall.smk"
include: "workflows/rules/step.smk"
include: "workflows/rules/ablation.smk"
include: "workflows/rules/predict.smk"
include: "workflows/rules/analysis.smk"
include: "workflows/rules/regress.smk"


localrules:
    all,
    build,
    build_variant,
    predict_paper,
    predict_alltoall,
    predict_plan,
    predict_accuracy,
    ablation_seq,
    notebook,
    report,
    regress,


rule all:
    input:
        get_all_input(),
    default_target: True
