"""Snakemake script of rule `build_variant`: one variant's fully resolved config and environment.

Everything a run of this variant depends on, in one file: what it changes, the shared settings.
"""

import json
from pathlib import Path

sm = snakemake  # noqa: F821 - injected by Snakemake's script directive

# What each variant is about (BRIEF section 2); everything else is shared between variants.
ABOUT = {
    "legacy": {"exchange": "legacy", "schedule": "none",
               "note": "pre-0.14.5 DeepSpeed: every TP rank sends its full buffer (TP-fold inter-node traffic)"},
    "deepspeed": {"exchange": "deepspeed", "schedule": "none",
                  "note": "DeepSpeed >= 0.14.5: drop -> EP AllToAll -> TP AllGather, sequential"},
    "monta": {"exchange": "monta", "schedule": "none",
              "note": "drop -> chunked EP AllToAll pipelined with TP AllGather"},
    "lina": {"exchange": "deepspeed", "schedule": "lina",
             "note": "chunked gradient AllReduce launched only when no AllToAll waits (priority + partitioning)"},
    "lancet": {"exchange": "deepspeed", "schedule": "lancet",
               "note": "batch-partitioned forward overlap with AllToAll, dW deferred into AllToAll"},
    "monta+priority": {"exchange": "monta", "schedule": "priority",
                       "note": "MoNTA exchange with AllToAll priority over gradient collectives"},
}

variant = sm.wildcards.variant
cfg = json.loads(sm.params.config)
env = json.loads(Path(sm.input.env).read_text())["env"]
resolved = {
    "variant": variant,
    **ABOUT[variant],
    "experiment": cfg["experiment"],
    "launcher": cfg["launcher"],
    "network": cfg["network"] if cfg["launcher"]["kind"] == "emulated" else "real fabric",
    "alltoall": {k: v for k, v in cfg["alltoall"].items() if k != "variants"}
    if variant in cfg["alltoall"]["variants"] else None,
    "step": {k: v for k, v in cfg["step"].items() if k != "variants"}
    if variant in cfg["step"]["variants"] else None,
    "env": env,
}
Path(sm.output[0]).write_text(json.dumps(resolved, indent=2, sort_keys=True) + "\n")
Path(sm.log[0]).write_text(f"resolved {variant}\n")
