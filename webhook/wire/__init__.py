"""The wire layer, the bottom of the house: review and object shapes, the parsed pod, the status
annotation, identity, image references, RFC 3339 time, JSON, constants and exit codes. It
imports nothing of the project outside itself (tests/unit/test_layout.py)."""
