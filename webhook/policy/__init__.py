"""The policy gate: policy files, the privilege rule, RBAC grants."""
