"""The cluster files (``*.yaml``, schema ``monta.cluster/1``; README.md). Data only: this file lets
setuptools ship them inside the wheel as ``monta/clusters/`` (pyproject.toml); read them with
``monta.hardware.clusterfile``."""
