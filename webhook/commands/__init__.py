"""The `sidecar-debug` command line: argparse only, calling into the packages."""
