"""Detectors: link down, flapping, latency SLA, congestion, topology drift; one file each.

The controller feeds a `DetectorSet` the events and samples agents push and asks it, each
tick, which findings are active; `controller.alerts` turns those into alerts.
"""

from clockfabric.controller.detectors.base import Finding
from clockfabric.controller.detectors.detector_set import DetectorSet

__all__ = ["DetectorSet", "Finding"]
