"""Benchmarks: `python -m bench [--quick] [--json PATH]` runs the suite and prints one table."""
