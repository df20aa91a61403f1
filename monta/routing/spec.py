"""Routing spec strings: ``W0`` .. ``W7``, ``lognormal:maxvio=1``, ``zipf:s=1.2``; parameters after a colon,
comma separated (``W1:hot=2,heat=8``). Every workload also takes ``seed`` and ``step``. A bad spec is one
ValueError line that says what to write instead (docs/routing.md defines each workload)."""

from __future__ import annotations

from dataclasses import dataclass, field

# name -> {parameter: (type, lowest allowed value, default (None: required, or derived from the shape))}
PARAMS: dict[str, dict[str, tuple[type, float, object]]] = {
    "W0": {},
    "W1": {"hot": (int, 1, None), "heat": (float, 1.0, 4.0)},
    "W2": {"hot": (int, 1, None), "heat": (float, 1.0, 4.0), "rank": (int, 0, 0)},
    "W3": {"hot": (int, 1, None), "heat": (float, 1.0, 4.0)},
    "W4": {"ragged": (float, 0.0, 0.5)},
    "W5": {"rank": (int, 0, None)},
    "W6": {"hot": (int, 1, None), "heat": (float, 1.0, 4.0), "rank": (int, 0, 0)},
    "W7": {"period": (int, 1, 4), "heat": (float, 1.0, 16.0)},
    "hotnode": {"node": (int, 0, 0), "heat": (float, 1.0, 4.0)},
    "lognormal": {"maxvio": (float, 0.0, "required")},
    "zipf": {"s": (float, 0.0, 1.0)},
}
COMMON = {"seed": (int, 0, 0), "step": (int, 0, 0)}
EXAMPLES = "W0..W7, lognormal:maxvio=1 or zipf:s=1.2"


@dataclass(frozen=True)
class RoutingSpec:
    """A parsed spec: the workload ``name``, its given parameters, ``seed``, ``step`` and the ``text``."""

    name: str
    params: dict = field(default_factory=dict)
    seed: int = 0
    step: int = 0
    text: str = "W0"

    def get(self, key: str, default=None):
        return self.params.get(key, default)

    @property
    def balanced(self) -> bool:
        return self.name == "W0"


def _canonical(name: str) -> str | None:
    n = name.strip()
    if n.upper() in PARAMS:
        return n.upper()
    if n.lower() in PARAMS:
        return n.lower()
    return None


def parse_spec(text: str) -> RoutingSpec:
    """``text`` -> RoutingSpec; ValueError (one line, naming the fix) for anything else."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"routing {text!r}: give a workload, one of {EXAMPLES}")
    head, _, rest = text.strip().partition(":")
    name = _canonical(head)
    if name is None:
        raise ValueError(f"routing {text!r}: unknown workload {head.strip()!r}; choose {EXAMPLES}")
    allowed = {**PARAMS[name], **COMMON}
    given: dict[str, object] = {}
    for part in (p.strip() for p in rest.split(",") if p.strip()):
        key, eq, value = part.partition("=")
        key = key.strip()
        if not eq or key not in allowed:
            raise ValueError(f"routing {text!r}: {name} takes {', '.join(f'{k}=' for k in allowed)} (got {part!r})")
        kind, low, _ = allowed[key]
        try:
            v = kind(value.strip())
        except ValueError:
            raise ValueError(
                f"routing {text!r}: {key}={value.strip()!r} is not {'an integer' if kind is int else 'a number'}"
            ) from None
        if not v >= low or v != v or v in (float("inf"),):
            raise ValueError(f"routing {text!r}: {key}={v} must be a finite number >= {low:g}")
        given[key] = v
    for key, (_, _, default) in PARAMS[name].items():
        if default == "required" and key not in given:
            raise ValueError(f"routing {text!r}: {name} needs {key}=VALUE, e.g. {name}:{key}=1")
    seed = int(given.pop("seed", 0))
    step = int(given.pop("step", 0))
    return RoutingSpec(name, given, seed, step, text.strip())


def param(spec: RoutingSpec, key: str, fallback=None):
    """A parameter's value: given, else its default, else ``fallback`` (a default derived from the shape)."""
    if key in spec.params:
        return spec.params[key]
    default = PARAMS[spec.name][key][2]
    return fallback if default is None else default
