"""`clockfabric bench rootcause`: `job why` judged on random fabrics, jobs and faults."""
