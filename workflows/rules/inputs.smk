# Input functions and parameters of the predict, analysis and regress rules (rule files hold
# rules only; common.smk the config, targets and small helpers).


def get_accuracy_input(wildcards):
    """Every AllToAll sweep (the calibration cluster's shape and the others, out of sample), plus
    the link profile calibrated on one shape."""
    measured = alltoall_files() or ["results/ablation/chunks.jsonl"]
    if not EMULATED:  # a real cluster's records, priced on predict.cluster: no profile to calibrate
        return {"measured": measured}
    out = {"measured": measured, "profile": "results/calibrate/linkprofile.json"}
    if modeled_step_files():  # the step on the clock, priced on a profile of its own links
        out["steps"] = modeled_step_files()
        out["step_profile"] = ("results/calibrate/step-linkprofile.json" if config["step"]["inter_gbps"]
                               else out["profile"])
    return out


def modeled_step_files():
    """The step records the model is checked against: compute on the clock, the calibration's shape."""
    if not (config["step"]["enabled"] and config["step"]["compute"] == "modeled" and EMULATED):
        return []
    shape = PRED["calibrate_cluster"]
    return [f for f, c in zip(step_files(), config["step"]["clusters"])
            if (c["nodes"], c["gpus_per_node"]) == (shape["nodes"], shape["gpus_per_node"])]


def get_notebook_input(wildcards):
    return {
        "nb": source_file(f"analysis/nb_{wildcards.notebook}.py"),
        "paper": source_file(config["analysis"]["paper"]),
        "records": record_files(),
    }


def notebook_params(wildcards, input):
    """Papermill parameters as one JSON document (JSON is YAML): record paths, output dir.
    Absolute, because the kernel runs in the repository root, which need not be Snakemake's working
    directory."""
    return json.dumps({"records": [os.path.abspath(p) for p in input.records],
                       "out_dir": os.path.abspath("results"), "paper": os.path.abspath(input.paper)})


def get_report_input(wildcards):
    """The notebooks' manifests, and for the summary: the records, the published numbers, the
    regression check's table (when it runs)."""
    files = {
        "manifests": expand("results/analysis/{notebook}.json", notebook=config["analysis"]["notebooks"]),
        "records": record_files(),
        "paper": source_file(config["analysis"]["paper"]),
    }
    if config["regress"]["enabled"] and config["alltoall"]["enabled"]:
        files["regress"] = "results/regress/alltoall.md"
    if PRED["enabled"]:
        files["published"] = "results/tables/published.md"
        files["contention"] = "results/tables/contention-model.txt"
    return files


def report_regress_arg(wildcards, input):
    args = f"--regress {input.regress}" if "regress" in input.keys() else ""
    args += f" --published {input.published}" if "published" in input.keys() else ""
    return args + (f" --contention {input.contention}" if "contention" in input.keys() else "")


REG = config["regress"]


def get_regress_input(wildcards):
    """The current records, and the stored baseline when it exists (so a new baseline reruns)."""
    files = {"current": f"results/alltoall/{REG['cluster']}.jsonl"}
    if Path(source_file(REG["baseline"])).exists():
        files["baseline"] = source_file(REG["baseline"])
    return files
