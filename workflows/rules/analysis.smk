# Notebooks (jupytext .py under analysis/) executed with papermill on the record files, then one
# report page linking every table and figure they wrote.


def get_notebook_input(wildcards):
    return {
        "nb": f"analysis/nb_{wildcards.notebook}.py",
        "paper": config["analysis"]["paper"],
        "records": record_files(),
    }


def notebook_params(wildcards, input):
    """Papermill parameters as one JSON document (JSON is YAML): record paths, output dir."""
    return json.dumps({"records": list(input.records), "out_dir": "results", "paper": input.paper})


rule notebook:
    input:
        unpack(get_notebook_input),
    output:
        nb="results/analysis/nb_{notebook}.ipynb",
        manifest="results/analysis/{notebook}.json",
    log:
        "results/logs/analysis/{notebook}.log",
    params:
        y=notebook_params,
        kernel=config["analysis"]["kernel"],
        root=str(ROOT),
    conda:
        "../envs/monta.yaml"
    shell:
        "jupytext --to ipynb --output - {input.nb} 2> {log}"
        " | papermill - {output.nb} --cwd {params.root} -k {params.kernel} -y '{params.y}'"
        " --log-output --no-progress-bar >> {log} 2>&1"


def get_report_input(wildcards):
    return expand("results/analysis/{notebook}.json", notebook=config["analysis"]["notebooks"])


rule report:
    input:
        get_report_input,
    output:
        "results/report.md",
    log:
        "results/logs/analysis/report.log",
    params:
        experiment=config["experiment"],
    conda:
        "../envs/monta.yaml"
    shell:
        "python -m analysis.report --experiment {params.experiment} --out {output} {input} > {log} 2>&1"
