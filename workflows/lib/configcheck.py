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


def _variant_keyword(validator, kind, instance, schema):
    """``x-monta-variant: step | exchange``: the value names a variant of the registry (monta.variants)."""
    if not isinstance(instance, str):
        return
    from monta import variants as registry

    if kind == "exchange":
        if instance not in registry.EXCHANGES:
            yield jsonschema.ValidationError(f"{instance!r} is not an exchange; choose from {', '.join(registry.EXCHANGES)}")
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
    cfg = copy.deepcopy(dict(config))
    validator = _Validator(schema)
    errors = sorted(validator.iter_errors(cfg), key=lambda e: (len(e.absolute_path), _path(e)))
    if errors:
        raise ConfigError(_message(errors[0]))
    cfg = _fill_defaults(schema, cfg, schema)
    # Defaults are themselves validated: a bad default in the schema is our bug, not the user's.
    errors = list(validator.iter_errors(cfg))
    if errors:
        raise ConfigError("schema default invalid: " + _message(errors[0]))
    _check_semantics(cfg)
    return cfg


def _check_semantics(cfg: Mapping[str, Any]) -> None:
    """Cross-key rules that JSON schema cannot state."""
    clusters = [("alltoall.clusters", c) for c in cfg["alltoall"]["clusters"]]
    clusters += [("step.clusters", c) for c in cfg["step"]["clusters"]]
    clusters.append(("ablation.cluster", cfg["ablation"]["cluster"]))
    for where, c in clusters:
        if c["gpus_per_node"] % c["tp"]:
            raise ConfigError(f"config key {where}: tp={c['tp']} must divide gpus_per_node={c['gpus_per_node']}"
                              f" (cluster {c['name']})")
    for tp in cfg["ablation"]["tp"]:
        if cfg["ablation"]["cluster"]["gpus_per_node"] % tp:
            raise ConfigError(f"config key ablation.tp: {tp} does not divide "
                              f"ablation.cluster.gpus_per_node={cfg['ablation']['cluster']['gpus_per_node']}")
    for section in ("alltoall", "step"):
        names = [c["name"] for c in cfg[section]["clusters"]]
        if len(set(names)) != len(names):
            raise ConfigError(f"config key {section}.clusters: cluster names must be unique, got {names}")
    if cfg["launcher"]["kind"] == "emulated" and cfg["launcher"]["backend"] != "gloo":
        raise ConfigError("config key launcher.backend: the emulated cluster has no GPUs; set backend: gloo"
                          " (nccl needs launcher.kind: srun-torchrun on GPU nodes)")
