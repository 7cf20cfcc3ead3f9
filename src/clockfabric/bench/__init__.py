"""Benchmarks shipped with the tool (`clockfabric bench ...`): they run on a lab and compare
against a baseline in the same run."""
