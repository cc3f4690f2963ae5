"""asv benchmark suite for sdpa-bench: thin wrappers over sdpa_impls.bench (grid, check, measure) (see docs/asv.md)."""
