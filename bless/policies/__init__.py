"""Sharing policies, one module each, registered in :data:`bless.core.policy.POLICIES`."""
