"""Token exchange strategies (legacy, deepspeed, monta), their collectives, and traffic accounting.

Import ``monta.comm.exchange`` for the strategies; this package init stays torch-free.
"""
