"""Test doubles and reference implementations shared by the tests (and the benchmarks that need them)."""
