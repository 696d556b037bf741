"""Diagnostics: trainer-vs-engine parity probes (models check) and memory plans."""
