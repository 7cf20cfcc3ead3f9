"""Doctor's checks, one module per concern; importing this package registers them all, in this order."""

# in the order an operator fixes a host: its files, its clock and NICs, then the network and services
from clockfabric.doctor.checks import files, clock, nics, ports, controller, unit  # noqa: F401, I001
