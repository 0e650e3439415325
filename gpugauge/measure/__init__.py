"""How numbers are taken: timing, statistics, memory, energy, clocks, ceilings, fingerprint."""
