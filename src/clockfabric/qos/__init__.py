"""Application-level QoS: a job's class from policy, enforced from the hosts.

- policy.py: the classes (their DSCP and default weights) and a policy's validation, one line
  per mistake;
- bpf.py: the marking program (cls_bpf) and its map of sockets, loaded with bpf();
- tc.py: the program on each NIC's clsact egress and the egress htb by class (netlink), found
  and removed by their tags alone;
- enforce.py: from the policies and the jobs' flows on this host to the kernel, all or nothing;
- pacing.py: the delay-based rate law for the lower classes on one link (pure);
- pace_loop.py: the hosts' pacing loop, the law per link and its rates onto sockets (pure);
- shared.py: queue readings shared between hosts for that loop, sealed and bounded;
- backlog.py, qdisc_stats.py: a NIC's egress queue, and its classes', read from the qdiscs;
- sockpace.py: another process's socket paced (pidfd_getfd, SO_MAX_PACING_RATE).
"""
