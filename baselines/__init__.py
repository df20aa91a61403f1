"""Published competitors rebuilt as real schedules of the same DeepSpeed training step:
Lina-style (``baselines.lina``) and Lancet-style (``baselines.lancet``)."""
