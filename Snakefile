# The monta reproduction pipeline: `snakemake --cores 2 --profile profiles/local` (emulated
# cluster, default config) or `snakemake --profile profiles/slurm --configfile config/a800.yaml`.
# Config is validated against config/schema.yaml before anything runs; rules live in workflows/rules.

# The workflow's own files are found through its base directory, so `--directory RUN_DIR` runs it
# with results under RUN_DIR (two runs side by side); a --configfile is read from where it is given.
# The embedded default (the emulated cluster) only when no --configfile is given: a config file stands
# alone, the keys it leaves out take config/schema.yaml's defaults, never default.yaml's emulator
# settings (config/a800.yaml ran with --max-iters 40 --budget-s 30 and 2-step ablations otherwise).
if not workflow.overwrite_configfiles:

    configfile: os.path.join(workflow.basedir, "config", "default.yaml")


# PATH is extended with this interpreter's bin folder (common.smk) and passed on to jobs.
envvars:
    "PATH",


include: "workflows/rules/common.smk"
include: "workflows/rules/launch.smk"
include: "workflows/rules/inputs.smk"
wildcard_constraints:
    variant=_alternatives(VARIANTS),
    cluster=_alternatives(list(ALLTOALL_CLUSTERS) + list(STEP_CLUSTERS)),
    tp=r"\d+",
    gbps=r"\d+(\.\d+)?",
    topk=r"\d+",
    cf=r"\d+(\.\d+)?",
    seq=r"\d+",
    notebook="alltoall|step|paper",


include: "workflows/rules/build.smk"
include: "workflows/rules/alltoall.smk"
include: "workflows/rules/step.smk"
include: "workflows/rules/ablation.smk"
include: "workflows/rules/predict.smk"
include: "workflows/rules/analysis.smk"
include: "workflows/rules/regress.smk"
include: "workflows/rules/map.smk"


localrules:
    all,
    build,
    build_variant,
    predict_paper,
    predict_alltoall,
    predict_plan,
    predict_accuracy,
    predict_published,
    ablation_seq,
    notebook,
    report,
    report_assets,
    regress,
    exchange_map,
    skew_map,


rule all:
    input:
        get_all_input(),
    default_target: True
