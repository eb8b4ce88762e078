"""Python client for the resolver service."""
