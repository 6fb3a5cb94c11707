"""Serving certificates: generation and inspection, rotation, TLS contexts that reload."""
