"""Rows for data/published/steps.csv from Megatron-Bridge's performance pages (issue 44: "find more where the
sources hold them").

    python tools/bridge_perf_rows.py PAGE.md --source bridge-perf --url URL --releases 26.08 --first-id 101 > rows.csv

PAGE.md is ``docs/performance-summary.md`` (source key ``bridge-perf``) or ``docs/performance-summary-archive.md``
(``bridge-perf-archive``) of NVIDIA-NeMo/Megatron-Bridge. Every pre-training row of the named releases ("## 26.08
NeMo Container", ...) whose model has a template in steps.csv (:data:`TEMPLATES`: the model's shape and the
Bridge columns every Bridge row shares, copied from that row) becomes one row: the page's system, GPU count,
precision, GBS x sequence length, MBS, TP, PP, CP, VP, EP and tokens/s/GPU; the GPU's network columns come from
a Bridge row of the same GPU. Nothing is selected by what the model predicts: a release's MoE transformer rows go
in whole. Left out, and counted on stderr: models without a template (hybrid Mamba models such as Nemotron 3, whose
layers the step model does not price; DeepSeek-V4, whose shape no published config here gives; dense models),
NVFP4 rows (no FP4 GEMM in the step model) and FSDP rows (the step model prices the distributed optimizer); the
SFT and LoRA tables are not read.

The pipeline layout (``pp_layout``) is Megatron-Bridge's own for the model and the number of virtual stages
(:data:`LAYOUTS`): its recipes set it from (PP, VP) (``_get_deepseek_v3_pipeline_layout`` and
``_get_kimi_k2_pipeline_layout`` in ``src/megatron/bridge/recipes``, which map every (PP, VP) of one stage count to
one layout; DeepSeek-V3's MTP layer sits with the loss); the page does not print it."""

from __future__ import annotations

import argparse
import csv
import re
import sys
from pathlib import Path

STEPS = Path(__file__).resolve().parent.parent / "data" / "published" / "steps.csv"

# The page's model name -> (the steps.csv row whose shape it copies, extra column overrides).
TEMPLATES: dict[str, tuple[str, dict[str, str]]] = {
    "DeepSeekV3": ("S64", {}),
    "GPT OSS 120B": ("S68", {}),
    "Qwen3_30B_a3B": ("S73", {}),
    "Qwen3_235B_a22B": ("S78", {}),
    # Kimi K2: DeepSeek-V3's layout (MLA, one shared expert, dense first layer) with 384 experts, 64 heads, one
    # dense layer, a 163,840 vocabulary and no MTP layer (moonshotai/Kimi-K2-Instruct config.json)
    "Kimi_K2": ("S64", {
        "model": "Kimi-K2 1T", "experts": "384", "heads": "64", "dense_layers": "1", "vocab": "163840",
        "mtp_layers": "0", "shape_source": "https://huggingface.co/moonshotai/Kimi-K2-Instruct/blob/main/config.json",
    }),
}  # fmt: skip
# Megatron-Bridge's layouts by virtual pipeline stages (PP x VP), in steps.csv's pp_layout syntax (at 067f987:
# recipes/deepseek/h100/deepseek_v3.py, recipes/kimi/h100/kimi_k2.py; the DeepSeek-V3 map's (2, 8) entry is the
# GB300 perf config's of the 26.02 scripts, "Et*4|(t*4|)*14tmL", which steps.csv's S63 carries).
LAYOUTS: dict[str, dict[int, str]] = {
    "DeepSeekV3": {4: "Et*16|t*16|t*16|t*13mL", 8: "Et*8|(t*8|)*6t*5mL", 16: "Et*4|(t*4|)*14tmL"},
    "Kimi_K2": {4: "Et*16|t*16|t*16|t*13L", 8: "Et*8|(t*8|)*6t*5L", 16: "Et*4|(t*4|)*14tL"},
}
SHAPE = ("model", "layers", "hidden", "ffn_hidden", "experts", "topk", "shared_experts", "shared_ffn_hidden",
         "dense_layers", "dense_ffn_hidden", "attention", "heads", "kv_heads", "head_dim", "q_lora_rank",
         "kv_lora_rank", "qk_rope_dim", "v_head_dim", "vocab", "mtp_layers", "shape_source", "linear_bias",
         "rope_fusion", "cross_entropy", "source_gflop_per_token")  # fmt: skip
NETWORK = ("nics_per_node", "nic_gbps", "intra", "network")
PRECISION = {"BF16": "bf16", "FP8": "fp8", "FP8-CS": "fp8-cs", "MXFP8": "mxfp8"}


def pretraining_tables(text: str, releases: set[str]):
    """(release, model, header, cells) for each row of a pre-training table of the named releases."""
    release = model = None
    in_pretrain = False
    header: list[str] = []
    for line in text.splitlines():
        if m := re.match(r"^## (\S+) NeMo Container", line):
            release, model, in_pretrain = m.group(1), None, False
        elif line.startswith("### "):
            in_pretrain = "Pre-Training" in line
        elif m := re.match(r"^#### Model: (.+?)\s*$", line):
            model = m.group(1)
        elif line.startswith("|") and release in releases and in_pretrain and model:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if cells[0] == "System":
                header = cells
            elif not set(cells[0]) <= set("-: "):
                yield release, model, header, cells


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("page", type=Path)
    ap.add_argument("--source", required=True, help="source key (one key names one page)")
    ap.add_argument("--url", required=True, help="the page's address, for source_url")
    ap.add_argument("--releases", required=True, help="comma-separated, as the page's '## X NeMo Container'")
    ap.add_argument("--first-id", type=int, required=True, help="number of the first new S id")
    ap.add_argument("--steps", type=Path, default=STEPS, help="the table the templates come from")
    a = ap.parse_args(argv)

    rows = list(csv.DictReader(a.steps.open()))
    cols = list(rows[0].keys())
    by_id = {r["id"]: r for r in rows}
    bridge_gpu = {}
    for r in rows:
        if r["source"].startswith("bridge") and r["gpu"] not in bridge_gpu:
            bridge_gpu[r["gpu"]] = r
    out = csv.DictWriter(sys.stdout, fieldnames=cols, lineterminator="\n")
    out.writeheader()
    n, skipped = a.first_id, {}
    for release, model, header, cells in pretraining_tables(a.page.read_text(), set(a.releases.split(","))):
        v = dict(zip(header, cells))
        gpu = v["System"].removeprefix("DGX-")
        precision = PRECISION.get(v["Precision"].upper())
        fsdp = v.get("FSDP", "0") not in ("0", "", "n/a")
        why = ("precision " + v["Precision"] if not precision else "no template" if model not in TEMPLATES
               else "FSDP" if fsdp else "no Bridge row of " + gpu if gpu not in bridge_gpu else "")  # fmt: skip
        if why:
            skipped[f"{release} {model} ({why})"] = skipped.get(f"{release} {model} ({why})", 0) + 1
            continue
        tid, over = TEMPLATES[model]
        t = by_id[tid]
        row = {c: "" for c in cols}
        row.update({c: t[c] for c in SHAPE}, **over)
        row.update({c: bridge_gpu[gpu][c] for c in NETWORK})
        seq, gbs = int(v["Sequence Length"]), int(v["GBS"])
        vp = v["VP"] if v["VP"].isdigit() else "1"
        stages = int(v["PP"]) * int(vp)
        layout = LAYOUTS.get(model, {}).get(stages, "")
        tflops = re.sub(r"\[.*?\]", "", v["Model TFLOP / sec / GPU"])
        row.update({
            "id": f"S{n}", "source": a.source, "source_url": a.url, "system": f"Megatron-Bridge {release}",
            "pp_layout": layout if stages > 1 else "",
            "seq_len": str(seq), "global_batch_tokens": str(gbs * seq), "micro_batch": v["MBS"], "tp": v["TP"],
            "ep": v["EP"], "pp": v["PP"], "vpp": vp, "cp": v["CP"], "fsdp": "no", "gpus": v["#-GPUs"], "gpu": gpu,
            "precision": precision, "routing": "forced", "software": f"Megatron-Bridge {release}",
            "metric": "tokens_per_s_per_gpu", "value": v["Tokens / sec / GPU"], "unit": "tok/s/GPU",
            "notes": f"{release} table, {v['System']}: {tflops} Model TFLOP/s/GPU. GBS {gbs} sequences. The page: "
                     "MoE benchmarks force-balance the tokens and are dropless.",
            "uncertainty": "Dispatcher, recompute and CUDA graphs not stated on the page."
                           + (f" pp_layout: Megatron-Bridge's recipe layout for {stages} virtual stages (read at "
                              "067f987, a later release than some rows')." if layout and stages > 1 else "")
                           + (f" No Bridge layout for {stages} virtual stages: the default split."
                              if model in LAYOUTS and not layout and stages > 1 else "")
                           + (" Muon optimizer (the page's note); the step model prices Adam's." if model == "Kimi_K2"
                              else "")
                           + (" The page footnotes a GPT-OSS regression (cudnn-frontend issue 256)."
                              if "[^gpt-oss-note]" in v["Model TFLOP / sec / GPU"] else ""),
        })  # fmt: skip
        out.writerow(row)
        n += 1
    for k, c in skipped.items():
        print(f"left out: {k}: {c} row(s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
