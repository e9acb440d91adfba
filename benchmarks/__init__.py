"""Benchmarks: ``python -m benchmarks solver --pods N --instance-types M [--mix ...] [--json]``."""
