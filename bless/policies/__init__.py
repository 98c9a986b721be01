"""Sharing policies, one module each, registered in :data:`bless.policy.POLICIES`."""
