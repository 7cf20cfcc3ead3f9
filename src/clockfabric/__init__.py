"""clockfabric: make the fabric between GPUs visible, fault tolerant and fast, from the hosts."""

__version__ = "0.1.0"
