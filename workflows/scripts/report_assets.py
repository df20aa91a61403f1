"""Snakemake script of rule `report_assets`: every figure and table the notebooks wrote (their
manifests list them), copied into two folders that the rule declares with report(...), so that
`snakemake --report report.html` shows each one with its caption (workflows/report/*.rst).

The notebooks' figures and tables are not rule outputs of their own (which a notebook writes depends
on the records it finds), so the report reads them through this one rule."""

import json
import shutil
from pathlib import Path

sm = snakemake  # noqa: F821 - injected by Snakemake's script directive

figures, tables = Path(sm.output.figures), Path(sm.output.tables)
figures.mkdir(parents=True, exist_ok=True)
tables.mkdir(parents=True, exist_ok=True)
for manifest in sm.input.manifests:
    for section in json.loads(Path(manifest).read_text())["sections"]:
        if section.get("figure"):
            shutil.copyfile(section["figure"], figures / Path(section["figure"]).name)
        for table in section.get("tables", []):
            if table.endswith(".csv"):  # the report renders CSV as a sortable table; .md/.tex are for papers
                shutil.copyfile(table, tables / Path(table).name)
