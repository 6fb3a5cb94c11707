"""Test clusters: a real Kubernetes 1.20 control plane (lite) or one-node cluster (full).

    from tests.cluster import Cluster
    cluster = Cluster("lite").up(); cluster.kubectl("get", "ns"); cluster.down()

CLI: python -m tests.cluster up|down|status|kubeconfig|load-image [--mode lite|full]
pytest: fixtures `lite_cluster` and `full_cluster` (tests/cluster/pytest_plugin.py).
"""

from tests.cluster.cluster import ADMIN, PLAIN_USERS, Cluster, ClusterError, running

__all__ = ["ADMIN", "PLAIN_USERS", "Cluster", "ClusterError", "running"]
