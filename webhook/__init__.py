"""sidecar-debug: inject a debugging toolset sidecar into Kubernetes pods."""

__version__ = "0.1.0"
