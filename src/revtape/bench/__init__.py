"""Benchmark support for ``python -m revtape bench`` (peer AD tools live in :mod:`revtape.bench.peers`)."""
