"""monta: a reproducibility and evaluation harness for network-traffic-aware MoE AllToAll.

Import-light on purpose: torch and deepspeed load only in the modules that need them.
"""

__version__ = "0.1.0"
