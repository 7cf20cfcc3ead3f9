"""The ptp4l baseline in a real lab: free-running slaves measure their error many times a
second, the numbers are ptp4l's own, and stopping leaves nothing running."""

import statistics
import time

from clockfabric.clock.ptp4l import Ptp4lMesh, parse_offsets
from clockfabric.lab import netns
from clockfabric.topology import leafspine


def ptp4l_running(lab) -> list[int]:
    found = []
    for node in lab.topology.nodes():
        for pid in netns.pids(lab.ns(node)):
            try:
                with open(f"/proc/{pid}/comm") as f:
                    if f.read().strip() == "ptp4l":
                        found.append(pid)
            except OSError:
                pass
    return found


def test_free_running_slaves_report_their_error(make_lab):
    lab = make_lab(leafspine(3, 2, 1))  # h1 shares h0's leaf, h2 is across the spine
    started = time.time()
    with Ptp4lMesh(lab, "h0", ["h1", "h2"], work_dir=lab.dir / "ptp4l") as mesh:
        time.sleep(6)
        assert len(lab.processes()) == 3  # known to the lab: `lab down` would stop them
    assert not ptp4l_running(lab)
    assert not lab.processes()

    for host, samples in mesh.samples().items():
        # 16 Syncs a second, the first about 2 s in (announce, then unicast grants)
        assert len(samples) >= 10, (host, len(samples))
        times = [t for t, _ in samples]
        assert started < times[0] and times == sorted(times) and times[-1] < time.time()
        # idle lab, one real clock: observed median |offset| 3-12 us, bias up to -7 us
        median = statistics.median(abs(o) for _, o in samples)
        assert median < 50_000, (host, median)
        # the few offsets ptp4l logs itself (once a second) are among the polled ones
        # (a poller stalled for a whole Sync interval may miss one)
        logged = {o for _, o in parse_offsets(mesh.log(host).read_text())}
        assert logged and len(logged - {o for _, o in samples}) <= 1, (host, logged)
