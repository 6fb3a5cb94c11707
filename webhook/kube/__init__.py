"""Every call to the Kubernetes API goes through here: configuration, access reviews, secrets."""
