"""``python -m monta.bench.step``: how every rank of ``monta bench step`` starts (``--worker CONFIG``, from
``monta.bench.step.launch``); the same flags as ``monta bench step``."""

import argparse
import sys

from monta.bench.common_args import HelpFormatter
from monta.bench.step import add_arguments, main

_p = argparse.ArgumentParser(prog="monta bench step", formatter_class=HelpFormatter)
add_arguments(_p)
sys.exit(main(_p.parse_args()))
