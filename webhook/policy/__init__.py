"""The policy gate: policy files, rules and RBAC grants (the privilege rule is the guard's:
webhook.guard.privilege)."""
