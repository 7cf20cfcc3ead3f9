"""Every audit check, one file each; importing this package registers them all.

The order matters within a category: a NIC found broken early (not initialised, no link,
miscabled) is not blamed again by the tests that follow."""

from clockfabric.audit.checks import (  # noqa: F401, I001 - imported to register, in this order
    config_software, config_memory, config_pcie, config_gpu,
    frontend_reach, frontend_mtu, frontend_names,
    backend_nic_init, backend_nic_active, backend_cabling, backend_gid, backend_connectivity, backend_latency,
    collective_allreduce)
