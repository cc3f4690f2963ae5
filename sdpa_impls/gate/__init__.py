"""The CI gate, in the order data flows: points (read pytest-benchmark JSON or results.json) → config (thresholds)
→ rules (time, memory, correctness, in-run ratios; ranktest) → compare (a Verdict) → render (text, Markdown, JSON)."""
