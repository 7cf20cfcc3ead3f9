"""Application-level QoS: a job's class from policy, enforced from the hosts.

- policy.py: the classes (their DSCP and default weights) and a policy's validation, one line
  per mistake;
- tc.py: what the kernel is asked (tc batches): per-flow DSCP marks on each NIC's clsact egress,
  the egress htb by class; read back and removed by their tags alone;
- enforce.py: from the policies and the jobs' flows on this host to the kernel, all or nothing;
- pacing.py: the delay-based rate law for lower classes on one-FIFO fabrics (pure).
"""
