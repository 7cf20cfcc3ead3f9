"""`clockfabric bench qos`: a critical DDP job beside a scavenger bulk job, with and without QoS."""
