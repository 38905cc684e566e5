"""Coordination between service instances: leases with fencing tokens (Redis, or in-process)."""
