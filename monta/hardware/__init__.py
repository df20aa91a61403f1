"""The hardware, on the ground floor: links and ``Cluster`` (``links``), the cluster files and their schema
(``clusterfile``, ``cluster_schema``), the emulator's calibrated link profiles and ``get_cluster``
(``profile``) and the one GPU-name lookup (``gpus``). Read by the emulator, the performance model, the bench
and the reports alike; imports none of them (tests/test_imports.py). Pure Python, no torch."""
