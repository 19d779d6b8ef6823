"""The CUDA sweep for a lent GPU: ``kit`` builds what travels (here), ``lease`` runs it (there)."""
