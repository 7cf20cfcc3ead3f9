"""The lab: a topology made real on one Linux machine, with network namespaces as hosts
and switches, veth pairs as cables, Linux routing as switching and htb as link speed."""
