"""The topology model: hosts, NICs on planes, switches, links, paths, addresses, routes."""

from clockfabric.topology.addressing import Interface, host_of_address, interfaces, plane_subnet
from clockfabric.topology.classes import TrafficClass, TrafficClasses
from clockfabric.topology.generators import leafspine, multirail
from clockfabric.topology.load import TopologyError, dumps, load, parse, save
from clockfabric.topology.model import Host, Link, Nic, Path, Port, Switch, Topology
from clockfabric.topology.rates import RateError, format_rate, parse_rate
from clockfabric.topology.routing import NextHop, Route, routing_tables

__all__ = [
    "Host", "Interface", "Link", "NextHop", "Nic", "Path", "Port", "RateError", "Route", "Switch",
    "Topology", "TopologyError", "TrafficClass", "TrafficClasses", "dumps", "format_rate", "host_of_address",
    "interfaces", "leafspine", "load", "multirail", "parse", "parse_rate", "plane_subnet", "routing_tables", "save",
]
