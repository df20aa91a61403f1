"""Published competitors rebuilt as real schedules of the same DeepSpeed training step:
Lina-style (``monta_baselines.lina``) and Lancet-style (``monta_baselines.lancet``)."""
