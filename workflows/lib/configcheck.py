"""Validate the pipeline config against config/schema.yaml and fill in its defaults.

One clear error naming the offending key, raised before any rule runs.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from configrules import first_problem  # this folder's: imported while it is on sys.path, as this module is


class ConfigError(ValueError):
    """A user-caused config problem; the message names the key and what to change."""


def _path(err: jsonschema.ValidationError) -> str:
    return ".".join(str(p) for p in err.absolute_path) or "<top level>"


def _message(err: jsonschema.ValidationError) -> str:
    where = _path(err)
    if err.validator == "additionalProperties":
        extra = sorted(set(err.instance) - set(err.schema.get("properties", {})))
        allowed = ", ".join(sorted(err.schema.get("properties", {})))
        keys = ", ".join(repr(k) for k in extra)
        full = ", ".join(f"{where}.{k}" if where != "<top level>" else k for k in extra)
        return f"unknown config key {full} ({keys} is not allowed in {where}; allowed: {allowed})"
    return f"config key {where}: {err.message}"


def _fill_defaults(schema: Mapping[str, Any], node: Any, root: Mapping[str, Any]) -> Any:
    """Recursively add schema defaults for missing object properties (after validation)."""
    if "$ref" in schema:
        ref = schema["$ref"].lstrip("#/").split("/")
        target: Any = root
        for part in ref:
            target = target[part]
        schema = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
    if isinstance(node, dict) and "properties" in schema:
        for key, sub in schema["properties"].items():
            if key not in node and "default" in sub:
                node[key] = copy.deepcopy(sub["default"])
            if key in node:
                node[key] = _fill_defaults(sub, node[key], root)
    elif isinstance(node, list) and isinstance(schema.get("items"), Mapping):
        node[:] = [_fill_defaults(schema["items"], item, root) for item in node]
    return node


def _resolve(schema: Mapping[str, Any], root: Mapping[str, Any]) -> Mapping[str, Any]:
    if "$ref" in schema:
        target: Any = root
        for part in schema["$ref"].lstrip("#/").split("/"):
            target = target[part]
        schema = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
    return schema


_YAML_TYPES = {
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
}


def _coerce(schema: Mapping[str, Any], node: Any, root: Mapping[str, Any]) -> Any:
    """What Snakemake users type, as the schema means it: ``--config 'alltoall={iters: 3}'`` reaches
    the config as {'iters': '3'} (Snakemake parses nested values with YAML's BaseLoader, every
    scalar a string), so a string where the schema wants no string is read as YAML and kept when
    it then has a type the schema allows. Anything else is left for the validator to name."""
    schema = _resolve(schema, root)
    if isinstance(node, dict) and "properties" in schema:
        for key, sub in schema["properties"].items():
            if key in node:
                node[key] = _coerce(sub, node[key], root)
        return node
    if isinstance(node, list) and isinstance(schema.get("items"), Mapping):
        return [_coerce(schema["items"], item, root) for item in node]
    types = schema.get("type")
    types = [types] if isinstance(types, str) else list(types or [])
    if isinstance(node, str) and types and "string" not in types:
        try:
            value = yaml.safe_load(node)
        except yaml.YAMLError:
            return node
        if any(_YAML_TYPES[t](value) for t in types if t in _YAML_TYPES):
            return _coerce(schema, value, root) if isinstance(value, (list, dict)) else value
    return node


def _variant_keyword(validator, kind, instance, schema):
    """``x-monta-variant: step | exchange``: the value names a variant of the registry (monta.variants)."""
    if not isinstance(instance, str):
        return
    from monta import variants as registry

    if kind == "exchange":
        known = registry.exchanges()  # the core's and the plugins'
        if instance not in known:
            yield jsonschema.ValidationError(f"{instance!r} is not an exchange; choose from {', '.join(known)}")
        return
    try:
        registry.check(instance)
    except ValueError as e:
        yield jsonschema.ValidationError(str(e))


# Draft 7 plus the registry keyword: the allowed variants are the registry's, never a list here.
_Validator = jsonschema.validators.extend(jsonschema.Draft7Validator, {"x-monta-variant": _variant_keyword})


def load_schema(path: str | Path) -> dict[str, Any]:
    return yaml.safe_load(Path(path).read_text())


def check_config(config: Mapping[str, Any], schema_path: str | Path) -> dict[str, Any]:
    """Return a validated copy of ``config`` with every default filled in; raise ConfigError."""
    schema = load_schema(schema_path)
    cfg = _coerce(schema, copy.deepcopy(dict(config)), schema)
    validator = _Validator(schema)
    errors = sorted(validator.iter_errors(cfg), key=lambda e: (len(e.absolute_path), _path(e)))
    if errors:
        raise ConfigError(_message(errors[0]))
    cfg = _fill_defaults(schema, cfg, schema)
    # Defaults are themselves validated: a bad default in the schema is our bug, not the user's.
    errors = list(validator.iter_errors(cfg))
    if errors:
        raise ConfigError("schema default invalid: " + _message(errors[0]))
    if not cfg["regress"]["cluster"]:  # the first sweep's cluster, whatever a config names it
        cfg["regress"]["cluster"] = cfg["alltoall"]["clusters"][0]["name"]
    _check_semantics(cfg)
    return cfg


def _check_semantics(cfg: Mapping[str, Any]) -> None:
    """Cross-key rules that JSON schema cannot state."""
    clusters = [("alltoall.clusters", c) for c in cfg["alltoall"]["clusters"]]
    clusters += [("step.clusters", c) for c in cfg["step"]["clusters"]]
    clusters.append(("ablation.cluster", cfg["ablation"]["cluster"]))
    for where, c in clusters:
        if c["gpus_per_node"] % c["tp"]:
            raise ConfigError(
                f"config key {where}: tp={c['tp']} must divide gpus_per_node={c['gpus_per_node']} (cluster {c['name']})"
            )
    for tp in cfg["ablation"]["tp"]:
        if cfg["ablation"]["cluster"]["gpus_per_node"] % tp:
            raise ConfigError(
                f"config key ablation.tp: {tp} does not divide "
                f"ablation.cluster.gpus_per_node={cfg['ablation']['cluster']['gpus_per_node']}"
            )
    for section in ("alltoall", "step"):
        names = [c["name"] for c in cfg[section]["clusters"]]
        if len(set(names)) != len(names):
            raise ConfigError(f"config key {section}.clusters: cluster names must be unique, got {names}")
    _check_sweeps(cfg)
    _check_clusters(cfg)
    problem = first_problem(cfg)
    if problem:
        raise ConfigError(problem)
    if cfg["launcher"]["kind"] == "emulated" and cfg["launcher"]["backend"] != "gloo":
        raise ConfigError(
            "config key launcher.backend: the emulated cluster has no GPUs; set backend: gloo"
            " (nccl needs launcher.kind: srun-torchrun on GPU nodes)"
        )


def _validate_module():
    """monta.validate: the same checks `monta bench alltoall` runs on its flags."""
    try:
        from monta import validate
    except ImportError:  # Snakemake run from outside the project's environment: import from the checkout
        import sys

        sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
        from monta import validate
    return validate


def _check_clusters(cfg: Mapping[str, Any]) -> None:
    """predict.cluster and network.topology name a cluster (a file of clusters/) or a cluster file's path:
    a typo or a malformed file stops here, not in the first job that reads it."""
    _validate_module()  # puts the checkout on sys.path when Snakemake runs outside the environment
    from monta.hardware import clusterfile

    named = []
    spec = cfg["predict"]["cluster"]
    if cfg["predict"]["enabled"] and not (spec.startswith("emulator:") or spec.endswith(".json")):
        named.append(("predict.cluster", spec))
    if cfg["network"]["topology"] not in ("", "unshaped"):
        named.append(("network.topology", cfg["network"]["topology"]))
    for key, spec in named:
        try:
            clusterfile.read(spec)
        except ValueError as e:
            raise ConfigError(f"config key {key}: {e}") from None


def _check_sweeps(cfg: Mapping[str, Any]) -> None:
    """Each benchmark the config asks for, checked as `monta bench alltoall` / `monta predict alltoall`
    would check its flags (monta.validate), so a config that cannot run stops before any job:
    sizes with min > max, chunk counts beyond the capacity slice, too many sizes, ..."""
    V = _validate_module()
    a = cfg["alltoall"]
    common = {
        "variants": a["variants"],
        "chunks": a["chunks"],
        "dtype": a["dtype"],
        "warmup": a["warmup"],
        "iters": a["iters"],
        "max_iters": a["max_iters"],
        "target_ci": a["target_ci"],
        "budget_s": a["budget_s"],
    }
    try:
        if a["enabled"]:
            for i, c in enumerate(a["clusters"]):
                own = bool(c.get("sizes"))
                V.alltoall_sweep(
                    nodes=c["nodes"],
                    gpus_per_node=c["gpus_per_node"],
                    tp=c["tp"],
                    sizes_spec=c["sizes"] if own else a["sizes"],
                    where=V.config_key("alltoall"),
                    keys={
                        "sizes": f"clusters[{i}].sizes" if own else "sizes",
                        "nodes": f"clusters[{i}].nodes",
                        "gpus_per_node": f"clusters[{i}].gpus_per_node",
                        "tp": f"clusters[{i}].tp",
                    },
                    **common,
                )
            V.slowdown(a["inject_slowdown"], a["variants"], where=V.config_key("alltoall"))
        abl = cfg["ablation"]
        if abl["enabled"]:
            c = abl["cluster"]
            shape = {"nodes": c["nodes"], "gpus_per_node": c["gpus_per_node"]}
            where = V.config_key("ablation")
            if abl["chunks"]:
                V.alltoall_sweep(
                    **shape,
                    tp=c["tp"],
                    sizes_spec=abl["size"],
                    where=where,
                    **{**common, "variants": ["legacy", "monta"], "chunks": abl["chunks"]},
                )
            for tp in abl["tp"]:
                V.alltoall_sweep(**shape, tp=tp, sizes_spec=abl["size"], where=where, **common)
            if abl["buffer_sizes"]:
                V.alltoall_sweep(
                    **shape,
                    tp=c["tp"],
                    sizes_spec=abl["buffer_sizes"],
                    where=where,
                    keys={"sizes": "buffer_sizes"},
                    **common,
                )
        p = cfg["predict"]
        if p["enabled"]:
            V.sizes(p["sizes"], "sizes", V.config_key("predict"))
    except V.UsageError as e:
        raise ConfigError(str(e)) from None
