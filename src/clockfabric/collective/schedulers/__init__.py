"""The schedulers: which subflow carries each chunk of a message, one module each, registered
by name in SCHEDULERS (name -> class); scheduler(name) makes one. base.Scheduler is what the
transport asks of them.

    ecmp.py               a fixed, equal share of every message per subflow (the baseline)
    least_outstanding.py  the subflow with the fewest bytes unacknowledged (HPN's)
    owd.py                the subflow expected to deliver first, by one-way delays (ours)
"""

# importing each registers it, in this order
from clockfabric.collective.schedulers import ecmp, least_outstanding, owd  # noqa: F401, I001
from clockfabric.collective.schedulers.base import SCHEDULERS, Scheduler, SharedQueue, scheduler

__all__ = ["SCHEDULERS", "Scheduler", "SharedQueue", "scheduler"]
