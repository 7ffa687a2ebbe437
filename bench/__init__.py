"""Benchmarks, load generators and capacity runs, kept out of the product: every module here may import any package,
and no product package (protos, service, engine, models, clients, voxpool_cli) imports from here.

Run each from the repository root: `python -m bench.<module> --help`; docs/benchmarks.md holds the results.
"""
