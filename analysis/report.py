"""Manifests of what each notebook wrote, and the report page (results/report.md): the paper's claims with
their verdicts and the run's provenance (monta_analysis.claims), a summary of the headline numbers
(monta_analysis.summary), then every table and figure the notebooks wrote.

`python -m monta_analysis.report results/analysis/*.json --out results/report.md --records results/**/*.jsonl
[--paper analysis/paper.yaml] [--regress results/regress/alltoall.md]`
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path


class Manifest:
    """Sections (title, table files, figure, note) a notebook produced; saved as JSON."""

    def __init__(self, notebook: str, out_dir: str | Path):
        self.notebook = notebook
        self.path = Path(out_dir) / "analysis" / f"{notebook}.json"
        self.sections: list[dict] = []

    def section(
        self, title: str, tables: Sequence[Path] = (), figure: Path | None = None, empty: bool = False, note: str = ""
    ) -> None:
        self.sections.append(
            {
                "title": title,
                "tables": [str(p) for p in tables],
                "figure": str(figure) if figure else None,
                "no_data": bool(empty),
                "note": note,
            }
        )

    def save(self) -> Path:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps({"notebook": self.notebook, "sections": self.sections}, indent=2) + "\n")
        return self.path


def render(
    manifests: Sequence[str | Path],
    out: str | Path,
    experiment: str = "",
    summary: Sequence[str] = (),
    opening: Sequence[str] = (),
) -> str:
    """Markdown of the report: the ``opening`` (the claims table and the provenance line), the summary lines,
    then each section's table inline, links to md/csv/tex, the figure."""
    out = Path(out)
    rel = lambda p: os.path.relpath(p, out.parent)  # noqa: E731 - links must work from the report's folder
    lines = [f"# monta results{': ' + experiment if experiment else ''}", ""]
    if opening:
        lines += [*opening, ""]
    lines += [
        f"Generated {_dt.datetime.now(_dt.timezone.utc).isoformat(timespec='seconds')} from the record files "
        "(JSONL under results/); tables in results/tables, figures in results/figures.",
        "",
    ]
    if summary:
        lines += ["## Summary", "", *summary, ""]
    for m in manifests:
        data = json.loads(Path(m).read_text())
        lines += [f"## Notebook `{data['notebook']}`", ""]
        for s in data["sections"]:
            lines += [f"### {s['title']}", ""]
            if s["no_data"]:
                lines += ["_no data: the records for this section are absent (stage disabled or not run)._", ""]
            if s.get("note"):
                lines += [s["note"], ""]
            md = [t for t in s["tables"] if t.endswith(".md")]
            if md and not s["no_data"] and Path(md[0]).exists():
                lines += [_inline_or_link(Path(md[0]), rel(md[0])), ""]
            if s["tables"]:
                lines += ["Table: " + " · ".join(f"[{Path(t).suffix[1:]}]({rel(t)})" for t in s["tables"]), ""]
            if s["figure"]:
                lines += [f"![{s['title']}]({rel(s['figure'])})", ""]
    return "\n".join(lines) + "\n"


# A table longer than this is linked with its row count, not pasted: the report is read top to bottom, and a
# table of hundreds of rows (every buffer size of every sweep, every published measurement) buries the rest.
MAX_INLINE_ROWS = 40


def _inline_or_link(md: Path, link: str) -> str:
    text = md.read_text().strip()
    rows = sum(1 for line in text.splitlines() if line.startswith("|")) - 2  # header and separator
    if rows <= MAX_INLINE_ROWS:
        return text
    caption = next((line for line in text.splitlines() if line.strip()), "")
    return f"{caption}\n\n{rows} rows: [the table]({link}) (longer than {MAX_INLINE_ROWS} rows: linked, not pasted)."


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Write the report page linking every table and figure.")
    ap.add_argument("manifests", nargs="+", help="results/analysis/<notebook>.json files")
    ap.add_argument("--out", required=True, help="report path, e.g. results/report.md")
    ap.add_argument("--experiment", default="")
    ap.add_argument("--records", nargs="*", default=[], help="record files (JSONL) the summary reads")
    ap.add_argument("--paper", help="published numbers (analysis/paper.yaml) for the summary")
    ap.add_argument("--regress", help="the regression check's table (results/regress/alltoall.md), when it ran")
    ap.add_argument("--published", help="the model against published measurements (results/tables/published.md)")
    ap.add_argument("--contention", help="the model's contention ablation (monta predict contention's table)")
    args = ap.parse_args(argv)
    missing = [m for m in args.manifests + ([args.paper] if args.paper else []) if not Path(m).exists()]
    if missing:
        print(f"report: error: input(s) not found: {', '.join(missing)}; run the notebooks first", file=sys.stderr)
        return 2
    text = render(args.manifests, args.out, args.experiment, _summary(args), _opening(args))
    if args.contention:
        text += contention_section(args.contention)
    if args.published:
        text += published_section(args.published, args.out)
    text = no_machine_paths(text, Path(args.out).parent)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(args.out).with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(args.out)
    print(f"wrote {args.out}")
    return 0


def contention_section(path: str | Path) -> str:
    """The model's contention ablation: what every overlap gain above is worth if communication slows the
    compute it hides behind (c = 0, the default of every measurement here, is the upper bound)."""
    return (
        "\n## Contention: which gains are upper bounds\n\n"
        "Every emulated step above ran at contention c = 0: sleep-padded compute is not slowed by the exchange it "
        "overlaps, so the overlap gains of Lina, Lancet and MoNTA's pipelines are **upper bounds** (on an H100 a "
        "copy beside the expert GEMM slowed it by < 2%, beside flash attention by 31%: "
        "docs/results/gpu-compute-h100.md). The model's ablation (`monta predict contention`; the emulated one: "
        "`snakemake results/tables/contention.md`):\n\n```\n" + _table_only(Path(path).read_text()) + "\n```\n"
    )


def _table_only(text: str) -> str:
    """A command's printed table without its progress lines (``wrote 44 records to PATH``: stdout, not a result)."""
    return "\n".join(line for line in text.strip().splitlines() if not re.match(r"#? ?wrote \d+ records? to ", line))


def published_section(path: str | Path, out: str | Path) -> str:
    """The model against measurements made elsewhere (``monta predict published --md``), as the last section:
    a link, not the table (hundreds of rows would be half the report)."""
    rel = os.path.relpath(path, Path(out).parent)
    rows = sum(1 for line in Path(path).read_text().splitlines() if line.startswith("|")) - 2
    return (
        "\n## Checked against the world: published measurements\n\n"
        f"`monta predict published` on the project's table (data/published/): [the table]({rel}), "
        f"{max(rows, 0)} rows of the model next to measurements made elsewhere.\n"
    )


# An absolute path: a slash that starts no URL and no relative link, then two or more path parts.
_ABSOLUTE = re.compile(r"(?<![\w.:/\]\)])/(?:[\w.+@-]+/)+[\w.+@-]+")
_REPO = Path(__file__).resolve().parents[1]


def no_machine_paths(text: str, base: str | Path) -> str:
    """``text`` without this machine's absolute paths: one under the report's folder or the checkout becomes
    relative to it (a cluster file, a log), any other keeps its last two parts (a report is read elsewhere)."""
    base = Path(base).resolve()

    def short(m: re.Match) -> str:
        p = Path(m.group(0))
        for root in (base, _REPO):
            if p.is_relative_to(root):
                return str(p.relative_to(root))
        return str(Path(*p.parts[-2:]))

    return _ABSOLUTE.sub(short, text)


def _opening(args: argparse.Namespace) -> list[str]:
    """The claims table (what the paper claims, ours emulated and predicted, the verdict), then the provenance."""
    import yaml

    from monta_analysis import claims, frames

    records = frames.load(args.records)
    paper = yaml.safe_load(Path(args.paper).read_text()) if args.paper else None
    table = claims.claims_table(records, paper) if paper else []
    head = ["## Did it reproduce?", "", *table, ""] if table else []
    return [*head, claims.provenance(records)]


def _summary(args: argparse.Namespace) -> list[str]:
    import yaml

    from monta_analysis import frames, summary

    base = Path(args.out).parent

    def link(target: str) -> str | None:
        return target if (base / target).exists() else None

    paper = yaml.safe_load(Path(args.paper).read_text()) if args.paper else None
    return summary.summarize(frames.load(args.records), paper, args.regress, link)


if __name__ == "__main__":
    sys.exit(main())
