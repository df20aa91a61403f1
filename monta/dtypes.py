"""The element types the benchmarks and the model accept, by name: their sizes in bytes (torch-free)
and their torch dtypes. The one map of them (the CLI's choices, the config check and the ranks read it)."""

from __future__ import annotations

from typing import Any

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
DTYPES = tuple(DTYPE_BYTES)  # the names, in the CLI's order


def torch_dtype(name: str) -> Any:
    """The torch dtype of ``name`` (one of ``DTYPES``)."""
    import torch

    if name not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {name!r}: choose from {', '.join(DTYPES)}")
    return getattr(torch, name)
