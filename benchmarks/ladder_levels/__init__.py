"""The reference document's reproduction ladder (§10, Levels 0-6) as benchmarks: one module per level,
run by `benchmarks/ladder.py --level N`. Gate thresholds come only from `benchmarks/ladder_gates.yaml`."""
