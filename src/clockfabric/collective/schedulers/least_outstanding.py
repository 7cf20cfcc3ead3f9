"""`least-outstanding`: HPN's scheduler, the strong baseline: the chunk goes to the subflow
with the fewest bytes sent and not yet acknowledged."""

from __future__ import annotations

from clockfabric.collective.schedule import SubflowState
from clockfabric.collective.schedulers.base import SCHEDULERS, SharedQueue


@SCHEDULERS.register("least-outstanding", help="the subflow with the fewest bytes unacknowledged")
class LeastOutstanding(SharedQueue):
    def choose(self, subs: list[SubflowState], length: int, owed: list[int]) -> int | None:
        """The subflow with the fewest bytes outstanding among those with room in their windows
        (windows differ: a slow subflow's is smaller)."""
        room = [j for j in range(len(subs)) if not subs[j].parked and subs[j].outstanding < subs[j].window]
        return min(room, key=lambda j: subs[j].outstanding) if room else None
