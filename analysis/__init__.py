"""Analysis of monta result records: tables, seaborn figures, notebooks and the report page.

Reads only record files (monta.results), never wandb; every function degrades to "no data".
"""
