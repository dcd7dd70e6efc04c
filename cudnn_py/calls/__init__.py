"""The call machinery: the prepared call (one path for every family), the engine choice and the algorithm choices."""
