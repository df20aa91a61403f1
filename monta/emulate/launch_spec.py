"""What the launcher hands the supervisor: one emulated cluster's launch, a frozen dataclass written as
``spec.json`` in the run's log folder (``write``) and read back strictly by the supervisor (``read``: an
unknown or missing key is a one-line error, not a silently dropped setting).

Torch-free at import.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from monta.emulate.topology import Topology
from monta.runconfig import check_keys

MODES = ("netns", "plain")  # ranks in network namespaces, or all on the loopback (the unshaped fallback)


@dataclass(frozen=True, kw_only=True)
class LaunchSpec:
    """One launch: ``nodes`` x ``gpus_per_node`` ranks of ``argv`` on ``topology``'s links."""

    mode: str  # one of MODES
    nodes: int
    gpus_per_node: int
    topology: Topology
    argv: tuple[str, ...]
    timeout_s: float | None = None  # the whole run's limit (None: none)
    stall_s: float | None = None  # no progress from any rank this long is a failure (None: the default)
    preload: tuple[str, ...] = ()  # modules imported once by the supervisor, which forks the ranks
    log_dir: str
    result_path: str  # where the supervisor writes its outcome (JSON)
    master_port: int

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"LaunchSpec: mode={self.mode!r}; use one of {', '.join(MODES)}")

    @property
    def emulated(self) -> bool:
        return self.mode == "netns"

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON: the topology as its dict, argv and preload as lists."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return dict(out, topology=self.topology.to_dict(), argv=list(self.argv), preload=list(self.preload))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LaunchSpec:
        check_keys(cls, data)
        required = [f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING]
        missing = [k for k in required if k not in data]
        if missing:
            raise ValueError(f"LaunchSpec: missing {', '.join(missing)}; the launcher writes every one")
        return cls(
            **dict(
                data,
                topology=Topology(**data["topology"]),
                argv=tuple(data["argv"]),
                preload=tuple(data.get("preload") or ()),
            )
        )

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_dict()))

    @classmethod
    def read(cls, path: Path) -> LaunchSpec:
        return cls.from_dict(json.loads(Path(path).read_text()))
