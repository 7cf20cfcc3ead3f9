"""Detectors: link down, flapping, congestion, topology drift, slow flow, in-band vs probe
mismatch; one file each. Each raises what needs state beyond one series; a threshold on a
series is a rule (deploy/prometheus/clockfabric-rules.yml), and docs/alerts.md says which is which.

The controller feeds a `DetectorSet` the events and samples agents push and asks it, each
tick, which findings are active; `controller.alerts` turns those into alerts. Importing this
package registers every detector, in the order their findings are listed.
"""

from clockfabric.controller.detectors import (  # noqa: F401, I001 - imported to register, in this order
    link_down, flapping, congestion, drift, slow_flow, owd_mismatch)
from clockfabric.controller.detectors.base import Finding
from clockfabric.controller.detectors.detector_set import DetectorSet

__all__ = ["DetectorSet", "Finding"]
