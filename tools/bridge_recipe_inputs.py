"""State what Megatron-Bridge's performance recipes ran, for the Bridge rows of a published-steps table
(issue 44: the software's share of the step error).

    python tools/bridge_recipe_inputs.py BRIDGE_GIT_DIR data/published/steps-bridge-releases.csv > stated.csv

Megatron-Bridge's performance pages print each run's layout and throughput, not its dispatcher, CUDA-graph scope,
A2A overlap or recompute; its ``scripts/performance/configs/*/*workload_base_configs.py`` (one
``WorkloadBaseConfig`` per model, GPU, precision and variant) set them. For each row whose ``software`` is
"Megatron-Bridge RELEASE", the tool reads the configs of the Megatron-Bridge version RELEASE's NeMo container
ships (:func:`release_versions`: Megatron-Bridge's ``docs/releases/software-versions.md``, "## NeMo Framework
26.06 ... | Megatron-Bridge | 0.5.0 |", and ``known-issues.md``'s "26.02.01 (r0.3.1)"; for a release neither
names, the first tag whose performance summary opens with RELEASE's table, marked as assumed). Of those, the
configs named for the row's model, GPU and precision (:func:`candidates`: the names Bridge's
``get_workload_base_config`` resolves) whose layout (GPUs, TP, PP, VP, CP, EP, MBS, GBS; expert TP 1) is the
row's: one match, or several that state the same inputs, fills the row's ``dispatcher``, ``cuda_graphs``,
``a2a_overlap`` and ``recompute`` (:func:`stated`; the dispatcher is the config's flex backend unless the version's
perf script for the model and GPU sets the AlltoAll token dispatcher, :func:`script_dispatchers`) and adds what it
read to the row's ``uncertainty``, with the config's other non-default settings named as not priced (CuTe DSL
fused grouped MLP, FP8 attention, ...; what the perf scripts derive from them at run time, such as the padded
experts under full-iteration graphs, is not read).
A row whose release has no known version, or whose version has no config of its layout or configs that disagree,
keeps its columns, says why in its ``uncertainty`` and is counted on stderr. The pages publish a release's table
after the version is tagged, so the tool does not ask the version's pages for the row. Nothing is chosen by what
the model predicts: every row is looked up.

What the configs leave unset is the training default: the AlltoAll dispatcher, no CUDA graphs, no A2A overlap;
an empty recompute list is no recompute, an unset one is left "not stated" (the model recipe's own default is
not read). The configs are plain dataclasses (their module says it exists so that the head node need not import
Megatron-Bridge), so they are executed as they are, with the revision's ``scripts/performance/utils/utils.py`` for
``WorkloadBaseConfig``; later releases moved the settings into Python recipes that need Megatron-Bridge to run,
and their rows are left not stated.
"""

from __future__ import annotations

import argparse
import ast
import csv
import re
import subprocess
import sys
import types
from dataclasses import fields, is_dataclass

# steps.csv's model name (a regex on the ``model`` column) -> the configs' name prefix
MODEL_PREFIX = (
    (r"^DeepSeek-V3\b", "DEEPSEEK_V3"),
    (r"^GPT-OSS-120B\b", "GPT_OSS_120B"),
    (r"^Qwen3-30B-A3B\b", "QWEN3_30B_A3B"),
    (r"^Qwen3-235B-A22B\b", "QWEN3_235B_A22B"),
    (r"^Kimi-K2\b", "KIMI_K2"),
)
# steps.csv's precision -> the configs' precision tokens (the H100's "FP8" rows are current scaling: FP8_CS)
PRECISION_TOKENS = {"bf16": ("BF16",), "mxfp8": ("FP8_MX",), "fp8": ("FP8_CS",), "fp8-cs": ("FP8_CS",)}
# The config fields the tool compares with the row or states; the others are named as not priced when set
MAPPED = {"num_gpus", "tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
          "virtual_pipeline_model_parallel_size", "expert_model_parallel_size", "expert_tensor_parallel_size",
          "global_batch_size", "micro_batch_size", "cuda_graph_impl", "cuda_graph_scope", "recompute_modules",
          "moe_flex_dispatcher_backend", "moe_a2a_overlap"}  # fmt: skip


def _git(gitdir: str, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", gitdir, *args], check=True, capture_output=True, text=True).stdout


def _config_files(gitdir: str, rev: str, suffix: str) -> list[str]:
    """The revision's perf-config files whose names end with ``suffix``."""
    names = _git(gitdir, "ls-tree", "-r", "--name-only", rev, "scripts/performance/configs").split()
    return [p for p in names if p.endswith(suffix)]


def _model_prefix(row: dict[str, str]) -> str | None:
    """The configs' name prefix for the row's model (:data:`MODEL_PREFIX`), or None."""
    return next((p for rx, p in MODEL_PREFIX if re.search(rx, row["model"])), None)


def _show(gitdir: str, spec: str) -> str:
    """A file at a revision, or "" where the revision lacks it."""
    try:
        return _git(gitdir, "show", spec)
    except subprocess.CalledProcessError:
        return ""


def release_versions(gitdir: str) -> dict[str, tuple[str, str]]:
    """Release ("26.06") -> (the tag of the Megatron-Bridge version its NeMo container ships, how that is known):
    Megatron-Bridge's release notes at HEAD first, then, for a release they do not name, the first tag (by
    creation date) whose performance summary opens with the release's table."""
    out: dict[str, tuple[str, str]] = {}
    tags = _git(gitdir, "for-each-ref", "--sort=creatordate", "--format=%(refname:short)", "refs/tags").split()
    versions, issues = (_show(gitdir, f"HEAD:docs/releases/{f}.md") for f in ("software-versions", "known-issues"))
    if not versions:
        print("no docs/releases/software-versions.md at HEAD: versions by the pages only (assumed)", file=sys.stderr)
    notes = r"^## NeMo Framework (\S+)\n(?:(?!^## ).*\n)*?\|\s*Megatron-Bridge\s*\|\s*(\S+)\s*\|"
    for release, version in re.findall(notes, versions, re.M):
        if f"v{version}" in tags:
            out[release] = (f"v{version}", "docs/releases/software-versions.md")
    for release, version in re.findall(r"\b(\d\d\.\d\d(?:\.\d\d)?) \(r(\d+\.\d+\.\d+)\)", issues):
        if f"v{version}" in tags:
            out.setdefault(release, (f"v{version}", "docs/releases/known-issues.md"))
    for tag in tags:
        if m := re.search(r"^## (\S+) NeMo Container", _show(gitdir, f"{tag}:docs/performance-summary.md"), re.M):
            out.setdefault(m.group(1), (tag, "assumed: the first tag that publishes its table"))
    return out


def load_configs(gitdir: str, rev: str) -> dict[str, object]:
    """Every WorkloadBaseConfig the revision's workload base config modules define, by name (none where the
    revision has no such module: later releases moved the settings into Python recipes that need Megatron-Bridge
    to run)."""
    paths = _config_files(gitdir, rev, "workload_base_configs.py")
    if not paths:
        return {}
    utils_pkg = types.ModuleType("utils")
    utils_pkg.__path__ = []
    utils_mod = types.ModuleType("utils.utils")
    utils_mod.__file__ = "scripts/performance/utils/utils.py"
    saved = {k: sys.modules.get(k) for k in ("utils", "utils.utils")}
    sys.modules["utils"], sys.modules["utils.utils"] = utils_pkg, utils_mod
    try:
        exec(compile(_git(gitdir, "show", f"{rev}:scripts/performance/utils/utils.py"), "utils.py", "exec"),
             utils_mod.__dict__)  # fmt: skip
        utils_pkg.utils = utils_mod
        found: dict[str, object] = {}
        for path in paths:
            ns: dict[str, object] = {"__name__": path}
            exec(compile(_git(gitdir, "show", f"{rev}:{path}"), path, "exec"), ns)
            found.update({k: v for k, v in ns.items() if k.isupper() and is_dataclass(v) and not isinstance(v, type)})
        return found
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


def candidates(configs: dict[str, object], row: dict[str, str]) -> list[str]:
    """Config names for the row's model, GPU and precision, any variant: the names Bridge's
    ``get_workload_base_config`` resolves ("{MODEL}_PRETRAIN_CONFIG_{GPU}_{PRECISION}[_V2]" from v0.3.0,
    "{MODEL}_{GPU}_{PRECISION}_BASE_CONFIG" in v0.2.x), never a name without the precision."""
    prefix = _model_prefix(row)
    tokens = PRECISION_TOKENS.get(row["precision"].strip().lower())
    if prefix is None or tokens is None:
        return []
    gpu = row["gpu"].strip().upper()
    alts = "|".join(re.escape(t) for t in tokens)
    rx = re.compile(rf"^{prefix}(?:_PRETRAIN_CONFIG)?_{gpu}_(?:{alts})(?:_V\d+|_BASE_CONFIG)?$")
    return sorted(n for n in configs if rx.match(n))


def _int(s: str, default: int | None = None) -> int | None:
    s = (s or "").strip()
    return int(float(s)) if s else default


def layout_matches(cfg, row: dict[str, str]) -> bool:
    """The config's GPUs, parallel sizes and batch are the row's."""
    seq = _int(row["seq_len"])
    gbs = _int(row["global_batch_tokens"]) // seq if seq and row["global_batch_tokens"].strip() else None
    vp = cfg.virtual_pipeline_model_parallel_size or 1
    if getattr(cfg, "expert_tensor_parallel_size", None) not in (None, 1):
        return False  # the published rows have no expert TP column; the step model prices experts without TP
    return (cfg.num_gpus, cfg.tensor_model_parallel_size, cfg.pipeline_model_parallel_size, vp,
            cfg.context_parallel_size, cfg.expert_model_parallel_size, cfg.micro_batch_size,
            cfg.global_batch_size) == (_int(row["gpus"]), _int(row["tp"], 1), _int(row["pp"], 1),
                                       _int(row["vpp"], 1), _int(row["cp"], 1), _int(row["ep"], 1),
                                       _int(row["micro_batch"], 1), gbs)  # fmt: skip


def _scope_text(impl, scope) -> str:
    """steps.csv's ``cuda_graphs`` for a config's CUDA-graph implementation and scope."""
    if impl in (None, "", "none"):
        return "no"
    names = [scope] if isinstance(scope, str) else list(scope or [])
    if impl == "full_iteration" or "full_iteration" in names:
        return "full_iteration"
    return " ".join(names) if names else "full"  # no scope: whole layers (Megatron-Core's "full")


def script_dispatchers(gitdir: str, rev: str) -> dict[str, str]:
    """Perf-script function name ("qwen3_235b_a22b_pretrain_config_h100") -> the token dispatcher type it assigns
    (``cfg.model.moe_token_dispatcher_type = "alltoall"``): the scripts of some versions set it per GPU, and under
    "alltoall" the config's flex backend is not used (Megatron-Core runs the flex backend only under "flex")."""
    out: dict[str, str] = {}
    paths = _config_files(gitdir, rev, "_llm_pretrain.py")
    for path in paths:
        for fn in ast.parse(_git(gitdir, "show", f"{rev}:{path}")).body:
            if not isinstance(fn, ast.FunctionDef):
                continue
            for node in ast.walk(fn):
                if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                        and any(isinstance(t, ast.Attribute) and t.attr == "moe_token_dispatcher_type"
                                for t in node.targets)):  # fmt: skip
                    out[fn.name] = node.value.value
    return out


def script_name(row: dict[str, str]) -> str | None:
    """The perf script's function for the row's model and GPU."""
    prefix = _model_prefix(row)
    return f"{prefix.lower()}_pretrain_config_{row['gpu'].strip().lower()}" if prefix else None


def stated(cfg) -> tuple[dict[str, str], list[str]]:
    """(the columns the config states, its other non-default settings, which the step model does not price)."""
    cols = {
        "dispatcher": cfg.moe_flex_dispatcher_backend or "alltoall",
        "cuda_graphs": _scope_text(cfg.cuda_graph_impl, cfg.cuda_graph_scope),
        "a2a_overlap": "yes" if cfg.moe_a2a_overlap else "no",
    }
    if cfg.recompute_modules:
        cols["recompute"] = "selective:" + ",".join(cfg.recompute_modules)
    elif cfg.recompute_modules is not None:
        cols["recompute"] = "none"  # an empty list: no module recomputed
    defaults = type(cfg)()
    other = [f"{f.name}={getattr(cfg, f.name)!r}" for f in fields(cfg)
             if f.name not in MAPPED and getattr(cfg, f.name) != getattr(defaults, f.name)]  # fmt: skip
    return cols, other


def state_rows(rows: list[dict[str, str]], gitdir: str) -> tuple[list[dict[str, str]], dict[str, int]]:
    """The rows with their recipes' inputs stated where their version's configs give them; counts of what was
    not, by reason."""
    versions, loaded, dispatch_types, skipped = release_versions(gitdir), {}, {}, {}
    out = []
    for row in rows:
        row = dict(row)
        m = re.match(r"^Megatron-Bridge (\S+)$", row.get("software", "").strip())
        why = None
        if not m:
            why = "not a Megatron-Bridge release"
        elif m.group(1) not in versions:
            why = f"no known Megatron-Bridge version for release {m.group(1)}"
        else:
            tag, how = versions[m.group(1)]
            if tag not in loaded:
                loaded[tag] = load_configs(gitdir, tag)
            configs = loaded[tag]
            if tag not in dispatch_types:
                dispatch_types[tag] = script_dispatchers(gitdir, tag)
            forced = dispatch_types[tag].get(script_name(row)) == "alltoall"
            hits = [n for n in candidates(configs, row) if layout_matches(configs[n], row)]
            inputs = {n: stated(configs[n]) for n in hits}
            if forced:  # the script's AlltoAll over the config's flex backend
                inputs = {n: ({**c, "dispatcher": "alltoall"}, o) for n, (c, o) in inputs.items()}
            if not configs:
                why = f"{tag} has no workload base configs"
            elif not hits:
                why = f"no config of {tag} has this layout"
            elif len({repr(v) for v in inputs.values()}) > 1:
                why = f"configs of {tag} disagree ({', '.join(hits)})"
            else:
                cols, other = inputs[hits[0]]
                row.update(cols)
                script = f" and {script_name(row)}'s AlltoAll dispatcher" if forced else ""
                note = (
                    f"Inputs stated from Megatron-Bridge {tag}'s {' / '.join(hits)}{script} ({m.group(1)}'s version: "
                    f"{how}; "
                    f"tools/bridge_recipe_inputs.py): " + ", ".join(f"{k} {v}" for k, v in cols.items())
                )
                if other:
                    note += "; not priced: " + ", ".join(other)
                row["uncertainty"] = (row.get("uncertainty", "").rstrip() + " " + note + ".").strip()
        if why:
            skipped[why] = skipped.get(why, 0) + 1
            if m:  # a Bridge row left as published says why
                note = f"Recipe inputs not stated (tools/bridge_recipe_inputs.py): {why}."
                row["uncertainty"] = (row.get("uncertainty", "").rstrip() + " " + note).strip()
        out.append(row)
    return out, skipped


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("gitdir", help="a Megatron-Bridge git directory (its tags and HEAD's release notes)")
    ap.add_argument("rows", help="a steps table (columns of data/published/steps.csv)")
    args = ap.parse_args(argv)
    with open(args.rows, newline="") as f:
        reader = csv.DictReader(f)
        names, rows = reader.fieldnames or [], list(reader)
    out, skipped = state_rows(rows, args.gitdir)
    w = csv.DictWriter(sys.stdout, fieldnames=names, lineterminator="\n")
    w.writeheader()
    w.writerows(out)
    print(f"stated {len(rows) - sum(skipped.values())} of {len(rows)} rows", file=sys.stderr)
    for why, n in sorted(skipped.items()):
        print(f"  left as published: {n} ({why})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
