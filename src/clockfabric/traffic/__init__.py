"""Path control on the host: failover between planes, restore with hold-down and damping."""
