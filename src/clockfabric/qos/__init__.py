"""Application-level QoS: a job's class from policy, enforced from the hosts.

- policy.py: the classes (their DSCP and default weights) and a policy's validation, one line
  per mistake;
- bpf.py: the marking program (cls_bpf) and its map of sockets, loaded with bpf();
- tc.py: the program on each NIC's clsact egress and the egress htb by class (netlink), found
  and removed by their tags alone;
- enforce.py: from the policies and the jobs' flows on this host to the kernel, all or nothing;
- pacing.py: the delay-based rate law for lower classes on one-FIFO fabrics (pure).
"""
