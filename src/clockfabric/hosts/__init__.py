"""How the product reaches a host: this machine, one over ssh, or (implemented from above) a
lab's namespace. See base.py for the seam."""

from clockfabric.hosts.base import Completed, Fleet, Host, HostFleet, Hosts, Proc, stop
from clockfabric.hosts.fleet import fleet_hosts, open_fleet
from clockfabric.hosts.local import LocalHost
from clockfabric.hosts.options import SshOptions
from clockfabric.hosts.ssh import SshHost

__all__ = ["Completed", "Fleet", "Host", "HostFleet", "Hosts", "LocalHost", "Proc", "SshHost", "SshOptions",
           "fleet_hosts", "open_fleet", "stop"]
