"""What a sweep leaves behind, in the order data flows: results (the file) → tables → csvfile, plots, markdown;
`write.write_report` writes them all; `targets` evaluates the CPU performance targets."""
