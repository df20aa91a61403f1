"""What the model tells people: the paper's headline figures, accuracy against measurements,
the sweep tables and records, and the ``monta plan`` / ``monta predict`` command line."""
