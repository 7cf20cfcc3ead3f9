"""Fleet-key authentication of the agents' datagrams: keys.py reads the key file, seal.py signs and checks."""
