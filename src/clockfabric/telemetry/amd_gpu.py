"""AMD GPUs through AMD SMI: the `amdsmi` module that ships with ROCm (so not a dependency of ours).

Each field is read on its own and skipped when the GPU, driver or amdsmi version does not
offer it (MI300 has no edge sensor; older amdsmi lacks some calls). AMD's own exporter uses
unprefixed names (gpu_edge_temperature, pcie_replay_count, ...), so these take ours.
"""

from __future__ import annotations

import logging

from clockfabric.telemetry.base import COLLECTORS, Collector, CollectorContext, Metric

log = logging.getLogger(__name__)
P = "clockfabric_amd_gpu_"


def _temperature(sensor: str):
    def read(smi, h, labels):
        t = smi.amdsmi_get_temp_metric(h, getattr(smi.AmdSmiTemperatureType, sensor.upper()),
                                       smi.AmdSmiTemperatureMetric.CURRENT)
        return [Metric(P + "temperature_celsius", t, {**labels, "sensor": sensor}, help="GPU temperature")]
    return read


def _power(smi, h, labels):
    info = smi.amdsmi_get_power_info(h)
    # ROCm 7 names it socket_power; before, current_ (MI300) or average_ (older); unread ones are "N/A"
    watts = next((v for k in ("socket_power", "current_socket_power", "average_socket_power")
                  if isinstance(v := info.get(k), int | float)), None)
    return [] if watts is None else [Metric(P + "power_watts", watts, labels, help="Socket power draw")]


def _ecc(smi, h, labels):
    n = smi.amdsmi_get_gpu_total_ecc_count(h)
    return [Metric(P + "ecc_errors_total", n[f"{kind}_count"], {**labels, "type": kind}, "counter",
                   "ECC errors over all blocks") for kind in ("correctable", "uncorrectable")]


def _pcie_replay(smi, h, labels):
    return [Metric(P + "pcie_replay_total", smi.amdsmi_get_gpu_pci_replay_counter(h), labels, "counter",
                   "PCIe packets replayed after a link error")]


FIELDS = [_temperature("edge"), _temperature("junction"), _power, _ecc, _pcie_replay]


class AmdGpuCollector(Collector):
    name = "amd_gpu"

    def __init__(self, amdsmi=None):
        self.smi = amdsmi  # a stand-in with amdsmi's names, or None for amdsmi itself
        self._why: str | None = None
        self._handles: list = []  # empty until started: absent() never keeps an empty list

    def absent(self) -> str | None:
        if not self._handles and self._why is None:
            self._why = self._start()
        return self._why

    def _start(self) -> str | None:
        if self.smi is None:
            try:
                import amdsmi
            except Exception as e:  # noqa: BLE001 - a ROCm without its library fails with OSError or KeyError too
                return f"amdsmi not importable: {e}"
            self.smi = amdsmi
        try:
            self.smi.amdsmi_init()
            handles = self.smi.amdsmi_get_processor_handles()
        except self.smi.AmdSmiException as e:  # no amdgpu driver loaded, no permission, ...
            return f"amdsmi_init: {e}"
        if not handles:
            return "AMD SMI sees no GPUs"
        self._handles = handles
        return None

    def collect(self) -> list[Metric]:
        if why := self.absent():
            raise RuntimeError(f"not present: {why}")
        out = []
        for i, h in enumerate(self._handles):
            for read in FIELDS:
                try:
                    out += read(self.smi, h, {"device": str(i)})
                except (self.smi.AmdSmiException, AttributeError, KeyError) as e:  # not offered here
                    log.debug("AMD GPU %d: %s", i, e)
        return out


@COLLECTORS.register("amd_gpu", help="AMD GPUs by amdsmi: temperature, power, ECC, PCIe replays")
def amd_gpu_collector(ctx: CollectorContext) -> AmdGpuCollector:
    return AmdGpuCollector()
