"""Klaw: a light, reliable personal AI agent with a Rust core."""

__version__ = "0.1.0"
