"""The pure injection core: decide, plan, inject, diff. No Kubernetes client, no server."""
