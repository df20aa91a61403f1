"""The contention ablation's table: `python -m monta_analysis.contention RECORDS.jsonl... --out-dir results`
writes results/tables/contention.{md,csv,tex} (``step_tables.contention_ablation``) from `monta bench step
--contention` and `monta predict contention` records, with the footer every contention table carries."""

from __future__ import annotations

import argparse
import sys

from monta_analysis import frames, step_tables, table_files

CAPTION = "Contention: step time with compute overlapped by communication (1 + c) x as long"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Write the contention ablation table (results/tables/contention.*).")
    ap.add_argument("records", nargs="+", help="step records (JSONL) with params.contention")
    ap.add_argument("--out-dir", default="results", help="the tables go to OUT_DIR/tables")
    args = ap.parse_args(argv)
    df = step_tables.contention_ablation(frames.load(args.records))
    paths = table_files.write_table(df, args.out_dir, "contention", CAPTION, footer=step_tables.CONTENTION_FOOTER)
    print(f"wrote {', '.join(str(p) for p in paths)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
