"""Cluster files: the real clusters of the performance model, one YAML file each (``clusters/NAME.yaml``,
schema ``monta.cluster/1``, every field in ``clusters/README.md``). The files are the one source: the
model (``get_cluster``), the emulator's topology profiles, the step clock and the pipeline read them here.

API:
- ``load_cluster(name_or_path) -> Cluster``: a name (a file of the clusters directory, or an alias one of
  them declares) or a path to a ``.yaml`` file. Anything malformed is ONE ``ValueError`` line naming the
  file, the key and what is expected.
- ``read(name_or_path) -> ClusterFile``: the same, with the validated document, its path and the numbers
  that have no entry under ``sources`` (``unsourced``: reported, not an error).
- ``cluster_names()``, ``aliases()``, ``clusters_dir()``: what ships, and where (``$MONTA_CLUSTERS_DIR``
  replaces the directory).
- ``to_doc(cluster, ...) -> dict``, ``to_yaml(cluster, ...) -> str``, ``dump(cluster, path, ...) -> Path``:
  write a ``Cluster`` as a file, e.g. one fitted by ``monta calibrate``::

      dump(fitted, "my-h100.yaml", base="h100", description="our H100 nodes, fitted to nccl-tests",
           sources={"collectives": "fitted by monta calibrate --nccl-tests a.log b.log"},
           extra={"calibration": {...}})

  ``base`` names the file the cluster was derived from: its descriptive fields, and the source of every
  number left unchanged, are carried over. ``dump`` writes atomically and reads the file back.
  ``Cluster.collective_links`` become ``collectives: {op: {intra|inter: {bandwidth_GBps, latency_us,
  efficiency}}}`` for op in alltoall, allgather, reducescatter, allreduce (the fields that differ from the
  plain ``nvlink`` / ``nic`` link; a reader takes the others from it).
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from monta.atomic import write_atomic
from monta.hardware import cluster_schema as schema
from monta.hardware.gpus import arch_of
from monta.hardware.links import CURVES, LINK_CLASSES, Cluster, Link

SCHEMA = "monta.cluster/1"
ENV_DIR = "MONTA_CLUSTERS_DIR"
OPS = ("alltoall", "allgather", "reducescatter", "allreduce")

# Cluster fields the emulator's link profiles set; a cluster file describes real GPUs and cannot hold them.
_EMULATOR_ONLY = ("intra_shared", "intra_machine_shared", "host_cores", "a2a_cpu_us", "ag_cpu_us")


@dataclass(frozen=True)
class ClusterFile:
    """A validated cluster file: its ``Cluster`` (one node unless the file says ``nodes``), the document
    as read (a copy: mutate freely), the path, and the numbers without a source."""

    cluster: Cluster
    doc: dict[str, Any]
    path: Path
    unsourced: tuple[str, ...] = field(default=())


# -- where the files are ------------------------------------------------------------------------------
def clusters_dir() -> Path:
    """``$MONTA_CLUSTERS_DIR``, else ``clusters/`` inside the installed package (a wheel), else the
    checkout's ``clusters/`` next to the ``monta`` package (an editable install)."""
    env = os.environ.get(ENV_DIR)
    if env:
        p = Path(env).expanduser()
        if not p.is_dir():
            raise ValueError(f"{ENV_DIR}={env}: not a directory (point it at a folder of cluster files, or unset it)")
        return p
    pkg = Path(__file__).resolve().parents[1]
    for cand in (pkg / "clusters", pkg.parent / "clusters"):
        if cand.is_dir():
            return cand
    raise ValueError(f"no clusters/ directory next to the monta package ({pkg}); set {ENV_DIR}")


def cluster_names() -> tuple[str, ...]:
    """The clusters of the directory, by file name, sorted."""
    return tuple(sorted(p.stem for p in clusters_dir().glob("*.yaml")))


def aliases() -> dict[str, str]:
    """alias -> cluster name, from every file's ``aliases``."""
    out: dict[str, str] = {}
    names = set(cluster_names())
    for name in sorted(names):
        cf = _read_path(clusters_dir() / f"{name}.yaml")
        for a in cf.doc.get("aliases") or ():
            if a in names or a in out:
                taken = a if a in names else f"{out[a]}.yaml's alias"
                raise ValueError(f"cluster file {cf.path}: aliases: {a!r} is already {taken}; choose another alias")
            out[a] = name
    return out


def is_path(spec: str | os.PathLike) -> bool:
    """A file path rather than a name: it ends in .yaml/.yml or has a directory part."""
    spec = os.fspath(spec)
    return spec.endswith((".yaml", ".yml")) or "/" in spec or os.sep in spec


def locate(spec: str | os.PathLike) -> Path:
    """The file of a cluster name, alias or path (ValueError naming the choices)."""
    s = os.fspath(spec)
    if is_path(s):
        p = Path(s).expanduser()
        if not p.is_file():
            raise ValueError(f"cluster file {p} not found (write one as clusters/README.md says, or name a cluster)")
        return p
    d = clusters_dir()
    if (d / f"{s}.yaml").is_file():
        return d / f"{s}.yaml"
    al = aliases()
    if s in al:
        return d / f"{al[s]}.yaml"
    raise ValueError(
        f"unknown cluster preset {s!r}: choose one of {', '.join([*cluster_names(), *al])}, "
        "a cluster file PATH.yaml (clusters/README.md) or emulator:PATH/TO/linkprofile.json"
    )


def read(spec: str | os.PathLike) -> ClusterFile:
    """Read and validate a cluster file by name, alias or path."""
    path = locate(spec)
    cf = _read_path(path)
    s = os.fspath(spec)
    if not is_path(s) and cf.doc["name"] != path.stem:
        # Found by its name: a record saying another name would not lead back to the file.
        raise ValueError(f"cluster file {path}: name: expected {path.stem!r} (the file's name), got {cf.doc['name']!r}")
    return cf


def load_cluster(spec: str | os.PathLike) -> Cluster:
    """The ``Cluster`` of a cluster name, alias or file path (one node unless the file says ``nodes``)."""
    return read(spec).cluster


def _read_path(path: Path) -> ClusterFile:
    st = path.stat()
    cf = _cached(str(path.resolve()), st.st_mtime_ns, st.st_size)
    return replace(cf, doc=copy.deepcopy(cf.doc), path=path)


@lru_cache(maxsize=64)
def _cached(path: str, _mtime_ns: int, _size: int) -> ClusterFile:
    p = Path(path)
    try:
        doc = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or "cannot be parsed"
        raise ValueError(f"cluster file {p}: not valid YAML ({problem}{where})") from None
    except UnicodeDecodeError:
        raise ValueError(f"cluster file {p}: not a text file (expected YAML, schema {SCHEMA})") from None
    return from_doc(doc, p)


def from_doc(doc: Any, path: str | os.PathLike = "<document>") -> ClusterFile:
    """Validate a parsed ``monta.cluster/1`` document and build its ``Cluster``."""
    where = f"cluster file {os.fspath(path)}"
    ck = schema.DocCheck(where)
    if not isinstance(doc, dict):
        keys = "schema, name, gpu, gpus_per_node, nvlink, nic"
        ck.fail("", f"expected a mapping with {keys} (schema {SCHEMA}); got {schema.show(doc)}")
    if doc.get("schema") != SCHEMA:
        ck.fail("schema", f"expected {SCHEMA!r}, got {schema.show(doc.get('schema'))}")
    top = ck.section(doc, schema.TOP)
    gpu = ck.section(top["gpu"], schema.GPU, "gpu")
    nv = ck.section(top["nvlink"], schema.NVLINK, "nvlink")
    nic = ck.section(top["nic"], schema.NIC, "nic")
    intra = Link(nv["bandwidth_GBps"], nv["latency_us"], nv.get("efficiency", ()))
    inter = Link(nic["bandwidth_GBps"], nic["latency_us"], nic.get("efficiency", ()))
    coll = []
    for op, by_cls in (top.get("collectives") or {}).items():
        if op not in OPS:
            ck.fail(f"collectives.{op}", f"unknown collective (choose from {', '.join(OPS)})")
        if not isinstance(by_cls, dict):
            ck.fail(f"collectives.{op}", f"expected a mapping intra/inter -> link, got {schema.show(by_cls)}")
        for cls, o in by_cls.items():
            if cls not in LINK_CLASSES:
                ck.fail(f"collectives.{op}.{cls}", f"unknown link class (choose from {', '.join(LINK_CLASSES)})")
            o = ck.section(o, schema.OVERRIDE, f"collectives.{op}.{cls}")
            base = intra if cls == "intra" else inter
            # Unset fields are the base link's: a file may override just the curve, or just the rate.
            link = Link(
                o.get("bandwidth_GBps", base.bandwidth_GBps),
                o.get("latency_us", base.latency_us),
                o["efficiency"] if "efficiency" in o else base.efficiency,
            )
            coll.append(((op, cls), link))
    coll.sort(key=lambda kv: (OPS.index(kv[0][0]), LINK_CLASSES.index(kv[0][1])))
    nccl = ck.section(top.get("nccl") or {}, schema.NCCL, "nccl")
    algos = tuple(nccl.get("allreduce", ("ring",)))
    for a in algos:
        if a not in schema.ALLREDUCE_ALGORITHMS:
            ck.fail("nccl.allreduce", f"unknown algorithm {a!r} (choose from {', '.join(schema.ALLREDUCE_ALGORITHMS)})")
    if "nvls" in algos and "nvls_algbw_GBps" not in nccl:
        ck.fail("nccl.nvls_algbw_GBps", "nvls needs its algorithm bandwidth per GPU (GB/s)")
    if not isinstance(nccl.get("protocols", True), bool):
        ck.fail("nccl.protocols", f"expected true or false, got {schema.show(nccl['protocols'])}")
    sources = top.get("sources") or {}
    for k, v in sources.items():
        if not isinstance(v, str) or not v.strip():
            ck.fail(f"sources.{k}", f"expected a string (a URL or document and what it says), got {schema.show(v)}")
        if not _has_path(doc, str(k)):
            ck.fail(f"sources.{k}", "names no key of this file (a source belongs to a key, e.g. nvlink.bandwidth_GBps)")
    unsourced = tuple(p for p in _number_paths(doc) if not _sourced(p, sources))
    desc = top.get("description") or top["name"]
    note = f"; unsourced: {', '.join(unsourced)}" if unsourced else ""
    cluster = Cluster(
        top["name"],
        intra,
        inter,
        gpus_per_node=top["gpus_per_node"],
        nodes=top.get("nodes", 1),
        nics_per_node=nic["count"],
        peak_tflops=gpu["peak_tflops"],
        gemm_eff=gpu.get("gemm_eff", Cluster.gemm_eff),
        attn_eff=gpu.get("attn_eff", Cluster.attn_eff),
        mem_GB=gpu["mem_GB"],
        copy_GBps=gpu["copy_GBps"],
        hbm_GBps=gpu["hbm_GBps"],
        collective_links=tuple(coll),
        source=f"{desc} [{_display(path)}{note}]",
        allreduce_algorithms=algos,
        nvls_algbw_GBps=float(nccl.get("nvls_algbw_GBps", 0.0)),
        nccl_arch=arch_of(gpu.get("model", "")) if nccl.get("protocols", True) else "",
    )
    return ClusterFile(cluster, doc, Path(path), unsourced)


def _display(path: str | os.PathLike) -> str:
    p = Path(path)
    try:
        return str(p.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(p)


def _has_path(doc: dict, dotted: str) -> bool:
    node: Any = doc
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def _number_paths(doc: dict) -> list[str]:
    """Dotted keys of every number of the file (a curve given as a list counts as one), sources and the
    free-form calibration notes excepted."""
    out = []

    def walk(node: Any, prefix: str) -> None:
        for k, v in node.items():
            key = f"{prefix}.{k}" if prefix else str(k)
            if isinstance(v, dict):
                walk(v, key)
            elif (isinstance(v, (int, float)) and not isinstance(v, bool)) or (
                k == "efficiency" and isinstance(v, list)
            ):
                out.append(key)

    walk({k: v for k, v in doc.items() if k not in ("sources", "calibration")}, "")
    return out


def _sourced(path: str, sources: dict) -> bool:
    return any(path == k or path.startswith(f"{k}.") for k in map(str, sources))


# -- writing ------------------------------------------------------------------------------------------
def _curve_doc(link: Link) -> Any:
    for name, pts in CURVES.items():
        if link.efficiency == Link(1.0, 0.0, pts).efficiency:
            return name
    return [[s, e] for s, e in link.efficiency]


def _collectives_doc(cluster: Cluster) -> dict[str, dict]:
    """``cluster.collective_links`` as ``{op: {intra|inter: link fields}}``."""
    coll: dict[str, dict] = {}
    for (op, cls), link in cluster.collective_links:
        if op not in OPS or cls not in LINK_CLASSES:
            raise ValueError(f"cluster {cluster.name}: collective ({op}, {cls}) is not one of {OPS} x {LINK_CLASSES}")
        plain = cluster.intra if cls == "intra" else cluster.inter
        # Only what differs from the plain link: the reader takes the rest from it.
        entry = {
            k: v
            for k, v, same in (
                ("bandwidth_GBps", link.bandwidth_GBps, link.bandwidth_GBps == plain.bandwidth_GBps),
                ("latency_us", link.latency_us, link.latency_us == plain.latency_us),
                ("efficiency", _curve_doc(link), link.efficiency == plain.efficiency),
            )
            if not same
        }
        coll.setdefault(op, {})[cls] = entry or {"bandwidth_GBps": link.bandwidth_GBps}
    return coll


def to_doc(
    cluster: Cluster,
    *,
    description: str | None = None,
    base: str | None = None,
    sources: dict[str, str] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``cluster`` as a ``monta.cluster/1`` document. ``base``: the cluster file it derives from (its
    descriptive fields and the sources of unchanged numbers carry over); ``sources`` add to or replace
    those; ``extra``: more top-level keys (``calibration``, ``aliases``)."""
    busy = [f for f in _EMULATOR_ONLY if getattr(cluster, f) != getattr(Cluster, f)]
    if busy:
        raise ValueError(
            f"cluster {cluster.name}: {', '.join(busy)} belong to an emulator link profile; a cluster file "
            "describes real GPUs (save the LinkProfile instead)"
        )
    doc: dict[str, Any] = {"schema": SCHEMA, "name": cluster.name}
    bdoc = read(base).doc if base else {}
    if description or bdoc.get("description"):
        doc["description"] = description or bdoc["description"]
    if base:
        doc["base"] = base
    bgpu, bnv, bnic = (bdoc.get(k) or {} for k in ("gpu", "nvlink", "nic"))
    doc["gpu"] = {
        **({"model": bgpu["model"]} if "model" in bgpu else {}),
        "peak_tflops": cluster.peak_tflops,
        "gemm_eff": cluster.gemm_eff,
        "attn_eff": cluster.attn_eff,
        "mem_GB": cluster.mem_GB,
        "hbm_GBps": cluster.hbm_GBps,
        "copy_GBps": cluster.copy_GBps,
    }
    doc["gpus_per_node"] = cluster.gpus_per_node
    if cluster.nodes != 1:
        doc["nodes"] = cluster.nodes
    doc["nvlink"] = {
        **({"generation": bnv["generation"]} if "generation" in bnv else {}),
        "bandwidth_GBps": cluster.intra.bandwidth_GBps,
        "latency_us": cluster.intra.latency_us,
        "efficiency": _curve_doc(cluster.intra),
    }
    doc["nic"] = {
        **({"model": bnic["model"]} if "model" in bnic else {}),
        "count": cluster.nics_per_node,
        **({"rate_gbps": bnic["rate_gbps"]} if "rate_gbps" in bnic else {}),
        "bandwidth_GBps": cluster.inter.bandwidth_GBps,
        "latency_us": cluster.inter.latency_us,
        "efficiency": _curve_doc(cluster.inter),
    }
    coll = _collectives_doc(cluster)
    if coll:
        doc["collectives"] = coll
    if cluster.allreduce_algorithms != ("ring",) or cluster.nvls_algbw_GBps:
        doc["nccl"] = {"allreduce": list(cluster.allreduce_algorithms)}
        if cluster.nvls_algbw_GBps:
            doc["nccl"]["nvls_algbw_GBps"] = cluster.nvls_algbw_GBps
    if not cluster.nccl_arch and arch_of(doc["gpu"].get("model", "")):  # fitted end to end: keep it so
        doc.setdefault("nccl", {})["protocols"] = False
    src = {}
    bsrc = bdoc.get("sources") or {}
    for p in _number_paths(doc):
        # A number the derived cluster kept keeps its source; a changed one needs a new one.
        if _has_path(bdoc, p) and _get(bdoc, p) == _get(doc, p):
            src.update({k: v for k, v in bsrc.items() if p == k or p.startswith(f"{k}.")})
    src.update(sources or {})
    if src:
        doc["sources"] = src
    doc.update(extra or {})
    return doc


def _get(doc: dict, dotted: str) -> Any:
    node: Any = doc
    for part in dotted.split("."):
        node = node[part]
    return node


def to_yaml(cluster: Cluster, **kw: Any) -> str:
    """``to_doc`` as YAML text, keys in the schema's order."""
    return yaml.safe_dump(to_doc(cluster, **kw), sort_keys=False, width=120)


def dump(cluster: Cluster, path: str | os.PathLike, *, overwrite: bool = False, **kw: Any) -> Path:
    """Write ``cluster`` to ``path`` atomically (a temporary file renamed: a crash leaves no half file),
    then read it back (a file that would not load is not left behind). ``kw``: see ``to_doc``."""
    p = Path(path)
    if p.exists() and not overwrite:
        raise ValueError(f"{p} exists: choose another path, or overwrite it on purpose")
    text = to_yaml(cluster, **kw)
    from_doc(yaml.safe_load(text), p)  # the document must load before it replaces anything
    p.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(p, text)
    return p
