"""asv benchmark suite for sdpa-bench: thin wrappers over sdpa_impls.grid and sdpa_impls.measure (see docs/asv.md)."""
