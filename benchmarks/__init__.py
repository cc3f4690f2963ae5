"""asv benchmark suite for sdpa-bench: thin wrappers over sdpa_impls.bench (grid, check, measure).

Why it is built this way: docs/explanation/asv-design.md."""
