"""Snakemake script of rule `build_variant`: one variant's fully resolved config and environment.

Everything a run of this variant depends on, in one file: what it changes, the shared settings.
"""

import json
from pathlib import Path

sm = snakemake  # noqa: F821 - injected by Snakemake's script directive

# What the variant is (its exchange, schedule and gradient sync, and where they come from) is the
# registry's (monta.variants); everything else is shared between variants.
from monta import variants as registry  # noqa: E402

variant = sm.wildcards.variant
cfg = json.loads(sm.params.config)
env = json.loads(Path(sm.input.env).read_text())["env"]
resolved = {
    "variant": variant,
    **registry.describe(variant),
    "experiment": cfg["experiment"],
    "launcher": cfg["launcher"],
    "network": cfg["network"] if cfg["launcher"]["kind"] == "emulated" else "real fabric",
    "alltoall": {k: v for k, v in cfg["alltoall"].items() if k != "variants"}
    if variant in cfg["alltoall"]["variants"]
    else None,
    "step": {k: v for k, v in cfg["step"].items() if k != "variants"} if variant in cfg["step"]["variants"] else None,
    "env": env,
}
Path(sm.output[0]).write_text(json.dumps(resolved, indent=2, sort_keys=True) + "\n")
Path(sm.log[0]).write_text(f"resolved {variant}\n")
