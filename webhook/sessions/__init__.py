"""Debugging sessions from a workstation over the exec subresource."""
