"""How variants are named: a registered name (``monta+lina``) or a composition
``exchange=monta,schedule=lancet,sync=priority[,chunks=N]`` (``monta.variants`` resolves them), and how
a comma list of them splits. Pure string work, no registry; ``monta.variants`` re-exports it."""

from __future__ import annotations

from typing import Any

KEYS = ("exchange", "schedule", "sync", "chunks")
DEFAULT_PARTS = {"exchange": "deepspeed", "schedule": "deepspeed", "sync": "after-backward"}


def compose(
    exchange: str = "deepspeed", schedule: str = "deepspeed", sync: str = "after-backward", chunks: int | None = None
) -> str:
    """The canonical composed name (keys in a fixed order)."""
    s = f"exchange={exchange},schedule={schedule},sync={sync}"
    return s + (f",chunks={chunks}" if chunks is not None else "")


def is_composed(name: str) -> bool:
    return "=" in name


def parse_parts(name: str) -> dict[str, Any]:
    parts: dict[str, Any] = {}
    for tok in name.replace(";", ",").split(","):
        tok = tok.strip()
        if not tok:
            continue
        if "=" not in tok:
            raise ValueError(f"variant {name!r}: {tok!r} is not key=value (keys: {', '.join(KEYS)})")
        k, v = (x.strip() for x in tok.split("=", 1))
        if k not in KEYS:
            raise ValueError(f"variant {name!r}: unknown key {k!r}; keys: {', '.join(KEYS)}")
        if k in parts:
            raise ValueError(f"variant {name!r}: {k} given twice")
        if k == "chunks":
            try:
                v = int(v)
            except ValueError:
                raise ValueError(f"variant {name!r}: chunks={v!r} must be an integer >= 1") from None
            if v < 1:
                raise ValueError(f"variant {name!r}: chunks={v} must be an integer >= 1")
        parts[k] = v
    return parts


def split_list(spec: str | list[str] | tuple[str, ...]) -> list[str]:
    """Variant names from a comma list, keeping each composition's ``key=value`` items together:
    ``deepspeed,exchange=monta,schedule=lina,monta`` -> ``[deepspeed, exchange=monta,schedule=lina, monta]``."""
    if not isinstance(spec, str):
        return [s for item in spec for s in split_list(item)]
    out: list[str] = []
    group: list[str] = []
    keys: set[str] = set()

    def close():
        if group:
            out.append(",".join(group))
            group.clear()
            keys.clear()

    for tok in spec.split(","):
        tok = tok.strip()
        if not tok:
            continue
        if "=" in tok:
            k = tok.split("=", 1)[0].strip()
            if k in keys:
                close()
            group.append(tok)
            keys.add(k)
        else:
            close()
            out.append(tok)
    close()
    return out
