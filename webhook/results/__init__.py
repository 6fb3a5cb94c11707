"""Profiling results kept on a directory: the store, its output formats and the results page."""
