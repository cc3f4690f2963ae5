"""The measuring layer, in the order data flows: grid → inputs → check (fp64) → timing/memory → measure → Result.

machine and ceilings describe where it ran. Nothing here imports the command line, the gate or the reports.
"""
