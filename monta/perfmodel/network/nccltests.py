"""Reads nccl-tests standard output (``all_reduce_perf``, ``all_gather_perf``, ``reduce_scatter_perf``,
``alltoall_perf``) as users paste it: with mpirun/srun prefixes, NCCL INFO noise, MPI warnings, old and
new column layouts, ``N/A`` for #wrong, and several runs concatenated in one file.

One run gives a ``NcclTestsLog``: the collective, the ranks and where they ran (hosts -> nodes, GPUs per
node, GPU model) and its table rows (out-of-place and in-place). Nothing here imports torch.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

# nccl-tests binary stem -> the cost model's collective name (monta.perfmodel.network.collectives).
OPS = {
    "all_reduce": "allreduce",
    "all_gather": "allgather",
    "reduce_scatter": "reducescatter",
    "alltoall": "alltoall",
}
# Names a user may write (in --collective or a file name) for each collective.
_ALIASES = {
    "all_reduce": "all_reduce",
    "allreduce": "all_reduce",
    "all_gather": "all_gather",
    "allgather": "all_gather",
    "reduce_scatter": "reduce_scatter",
    "reducescatter": "reduce_scatter",
    "alltoall": "alltoall",
    "all_to_all": "alltoall",
    "a2a": "alltoall",
}
_DTYPES = {
    "float", "half", "bfloat16", "double", "int8", "uint8", "int32", "uint32", "int64", "uint64",
    "int", "char", "fp8_e4m3", "fp8_e5m2", "f8e4m3", "f8e5m2",
}  # fmt: skip

# Launcher prefixes: mpirun --tag-output "[1,0]<stdout>:", srun -l " 0: ", "[0] ".
_PREFIX = re.compile(r"^\s*(?:\[\d+,\d+\]<std(?:out|err)>:|\d+:(?=\s|$)|\[\d+\](?=\s))\s?")
_MARKER = re.compile(r"#\s*Collective test starting:\s*(\S+)")
_NTHREAD = re.compile(r"^#?\s*nThread\s+\d+\s+nGpus\s+\d+")
_DEVICE = re.compile(
    r"^#?\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)\s+\[([^\]]*)\]\s+(.+?)\s*$"
)
_AVG = re.compile(r"#\s*Avg bus bandwidth\s*:\s*([0-9.eE+-]+)")
_NRANKS = re.compile(r"\bnranks\s+(\d+)")
_BINARY = re.compile(r"\b(all_reduce|all_gather|reduce_scatter|alltoall)_perf(?:_mpi)?\b")


@dataclass(frozen=True)
class Device:
    rank: int
    pid: int
    host: str
    device: int
    bus_id: str
    gpu: str


@dataclass(frozen=True)
class Row:
    """One table line: the out-of-place result and, when printed, the in-place one."""

    size: int
    count: int
    dtype: str
    redop: str
    root: int
    time_us: float
    algbw_GBps: float
    busbw_GBps: float
    wrong: str
    ip_time_us: float | None = None
    ip_algbw_GBps: float | None = None
    ip_busbw_GBps: float | None = None
    ip_wrong: str | None = None


@dataclass
class NcclTestsLog:
    """One nccl-tests run."""

    collective: str  # nccl-tests name: all_reduce, all_gather, reduce_scatter, alltoall
    rows: list[Row]
    devices: list[Device] = field(default_factory=list)
    source: str = ""
    avg_busbw_GBps: float | None = None
    nranks_hint: int | None = None  # from "nranks N" in NCCL INFO lines or the caller
    nodes_hint: int | None = None  # the caller's, for a table without "# Rank" lines

    @property
    def op(self) -> str:
        """The cost model's name for the collective (allreduce, allgather, reducescatter, alltoall)."""
        return OPS[self.collective]

    @property
    def ranks(self) -> int:
        if self.devices:
            return len({d.rank for d in self.devices})
        if self.nranks_hint:
            return self.nranks_hint
        raise ValueError(
            f"{self.source}: no '# Rank N ... on HOST device D' lines and no rank count: "
            "give --nodes and --gpus-per-node for this log"
        )

    @property
    def hosts(self) -> list[str]:
        return list(dict.fromkeys(d.host for d in self.devices))

    @property
    def nodes(self) -> int:
        if self.devices:
            return len(self.hosts)
        if self.nodes_hint:
            return self.nodes_hint
        raise ValueError(f"{self.source}: the log names no hosts: give --nodes and --gpus-per-node for this log")

    @property
    def gpus_per_node(self) -> int:
        ranks, nodes = self.ranks, self.nodes
        if ranks % nodes:
            raise ValueError(f"{self.source}: {ranks} ranks on {nodes} hosts is not the same count on every node")
        return ranks // nodes

    @property
    def gpu(self) -> str:
        return Counter(d.gpu for d in self.devices).most_common(1)[0][0] if self.devices else ""


def canonical(name: str) -> str:
    """``all_reduce_perf``, ``allreduce``, ``AllReduce`` ... -> ``all_reduce`` (ValueError if unknown)."""
    key = name.strip().lower().removesuffix("_mpi").removesuffix("_perf").replace("-", "_")
    if key in _ALIASES:
        return _ALIASES[key]
    raise ValueError(
        f"unknown collective {name!r}: use one of all_reduce, all_gather, reduce_scatter, alltoall (nccl-tests names)"
    )


def _from_filename(name: str) -> str | None:
    stem = Path(name).name.lower().replace("-", "_")
    for alias in sorted(_ALIASES, key=len, reverse=True):
        if alias != "a2a" and alias in stem:
            return _ALIASES[alias]
    return None


def _strip(line: str) -> str:
    return _PREFIX.sub("", line, count=1).rstrip("\n")


def _row(tokens: list[str]) -> Row | None:
    """A table line, or None. Layouts: size count type [redop] [root] then 4 out-of-place fields
    (time algbw busbw #wrong) and 4 in-place ones; v2.9-era tables lack root, alltoall's redop may be blank."""
    if len(tokens) < 7 or not (tokens[0].isdigit() and tokens[1].isdigit()) or tokens[2] not in _DTYPES:
        return None
    rest = tokens[3:]
    redop, root = "none", -1
    if rest and not _is_num(rest[0]):
        redop, rest = rest[0], rest[1:]
    for width in (8, 4):
        if len(rest) in (width, width + 1):
            try:
                if len(rest) == width + 1:
                    root, rest = int(rest[0]), rest[1:]
                oop = [float(t) for t in rest[:3]]
                ip = [float(t) for t in rest[4:7]] if width == 8 else [None, None, None]
            except ValueError:
                return None
            return Row(
                int(tokens[0]), int(tokens[1]), tokens[2], redop, root, *oop, rest[3],
                *ip, rest[7] if width == 8 else None,
            )  # fmt: skip
    return None


def _is_num(tok: str) -> bool:
    try:
        float(tok)
    except ValueError:
        return False
    return True


def parse(text: str, source: str = "<text>", collective: str | None = None) -> list[NcclTestsLog]:
    """Every run in ``text`` with at least one table row. ``collective`` names the binary for a run
    whose output does not (old nccl-tests print no "Collective test starting" line)."""
    hint = canonical(collective) if collective else None
    runs: list[dict] = []
    cur: dict | None = None
    mentioned: str | None = None  # last binary named in a command line echoed before the table

    def start(marker: str | None) -> dict:
        nonlocal mentioned
        # A command echoed before this run names its binary; one echoed before an earlier run does not.
        run = {"marker": marker, "devices": [], "rows": [], "avg": None, "nranks": None, "mentioned": mentioned}
        mentioned = None
        runs.append(run)
        return run

    for raw in text.splitlines():
        line = _strip(raw)
        if m := _MARKER.search(line):
            cur = start(canonical(m.group(1)))
            continue
        if _NTHREAD.search(line):
            if cur is None or cur["rows"]:
                cur = start(None)
            continue
        if m := _DEVICE.search(line):
            if cur is None or cur["rows"]:
                cur = start(None)
            r, pid, host, dev, bus, gpu = m.groups()
            cur["devices"].append(Device(int(r), int(pid), host, int(dev), bus, gpu))
            continue
        if m := _AVG.search(line):
            if cur is not None:
                cur["avg"] = float(m.group(1))
            continue
        if not line.lstrip().startswith("#"):
            if (row := _row(line.split())) is not None:
                if cur is None:
                    cur = start(None)
                cur["rows"].append(row)
                continue
        if m := _NRANKS.search(line):
            if cur is not None and cur["nranks"] is None:
                cur["nranks"] = int(m.group(1))
        if "test concluded" not in line and (m := _BINARY.search(line)):
            mentioned = m.group(1)
            if cur is not None and not cur["rows"] and cur["mentioned"] is None:
                cur["mentioned"] = mentioned

    out = []
    for run in runs:
        if not run["rows"]:
            continue
        name = run["marker"]
        if name and hint and name != hint:
            raise ValueError(f"{source}: the log says {name}_perf but --collective says {hint}: drop --collective")
        name = name or hint or run["mentioned"] or _from_filename(source)
        if name is None:
            raise ValueError(
                f"{source}: cannot tell which collective this is (no 'Collective test starting' line, "
                "no *_perf command, file name names none): "
                "pass --collective all_reduce|all_gather|reduce_scatter|alltoall"
            )
        out.append(NcclTestsLog(name, run["rows"], run["devices"], source, run["avg"], run["nranks"]))
    if not out:
        raise ValueError(
            f"{source}: no nccl-tests table found (expected rows like "
            "'1048576  262144  float  sum  -1  78.77  13.31  23.29  0 ...' from all_reduce_perf, all_gather_perf, "
            "reduce_scatter_perf or alltoall_perf)"
        )
    return out


def parse_file(path: str | Path, collective: str | None = None) -> list[NcclTestsLog]:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"nccl-tests log {p} not found")
    # errors="replace": a stray byte in pasted output must not hide the table around it.
    return parse(p.read_text(errors="replace"), source=str(p), collective=collective)
