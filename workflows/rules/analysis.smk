# Notebooks (jupytext .py under analysis/) executed with papermill on the record files, then one
# report page: a summary of the headline numbers (records, regression check), then every table and
# figure the notebooks wrote. `snakemake --report report.html` (`make report`) renders what is marked
# report(...) here, in regress.smk and map.smk, with the captions in workflows/report/.

report: "../report/workflow.rst"


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


# analysis/ is installed as the package monta_analysis (pyproject.toml), as monta/ is as monta.
rule report:
    input:
        unpack(get_report_input),
    output:
        report("results/report.md", caption="../report/summary.rst", category="Summary"),
    log:
        "results/logs/analysis/report.log",
    params:
        experiment=config["experiment"],
        regress=report_regress_arg,
    conda:
        "../envs/monta.yaml"
    shell:
        "python -m monta_analysis.report {input.manifests}"
        " --experiment {params.experiment} --out {output} --records {input.records} --paper {input.paper}"
        " {params.regress} > {log} 2>&1"


# The notebooks' figures and tables as report(...) items (which ones a notebook writes depends on the
# records it finds, so they are collected from the manifests into two declared folders).
rule report_assets:
    input:
        manifests=expand("results/analysis/{notebook}.json", notebook=config["analysis"]["notebooks"]),
    output:
        figures=report(
            directory("results/report-assets/figures"),
            patterns=["{name}.png"],
            caption="../report/figure.rst",
            category="Figures",
            labels={"figure": "{name}"},
        ),
        tables=report(
            directory("results/report-assets/tables"),
            patterns=["{name}.csv"],
            caption="../report/table.rst",
            category="Tables",
            labels={"table": "{name}"},
        ),
    log:
        "results/logs/analysis/report_assets.log",
    conda:
        "../envs/monta.yaml"
    script:
        "../scripts/report_assets.py"
