"""Two revisions side by side: checkouts (revisions), installed sides and interleaved runs (sides), the verdict."""
