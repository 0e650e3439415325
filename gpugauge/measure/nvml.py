"""A narrow adapter over NVML (the official ``nvidia-ml-py`` bindings, module ``pynvml``).

NVML is initialised once per pytest session by :class:`Nvml` (a context manager). Every
query that a GPU or driver does not support returns ``None`` instead of raising, and a
machine without NVML yields :class:`NvmlUnavailable` with the reason, which the rest of
the suite turns into null fields, never a crash.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from gpugauge.core.json_records import from_plain, to_plain

_T = TypeVar("_T")

# Clock-event ("throttle") reason bits from nvml.h; names as NVML documents them.
CLOCK_EVENT_REASONS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
# Reasons that mean the chip itself slowed down (not a policy or idle state).
SLOWDOWN_MASK = 0x8 | 0x20 | 0x40 | 0x80


def reason_names(mask: int | None) -> tuple[str, ...]:
    """Names of the reason bits set in ``mask``."""
    if not mask:
        return ()
    return tuple(name for bit, name in CLOCK_EVENT_REASONS.items() if mask & bit)


class NvmlUnavailable(RuntimeError):
    """NVML cannot be used here; ``str(err)`` is the reason recorded in results."""


@dataclass(frozen=True)
class GpuState:
    """A point-in-time reading of one GPU, for before/after snapshots."""

    sm_clock_mhz: int | None
    mem_clock_mhz: int | None
    temperature_c: int | None
    power_w: float | None
    clock_event_reasons: tuple[str, ...]
    memory_used_bytes: int | None

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON."""
        return to_plain(self)

    @classmethod
    def from_dict(cls, data: Any, where: str = "gpu_state") -> GpuState:
        """Read back :meth:`as_dict`."""
        return from_plain(cls, data, where, {"clock_event_reasons": tuple})


class NvmlDevice:
    """One GPU's NVML handle. Methods return ``None`` for what this GPU does not support."""

    def __init__(self, pynvml: Any, handle: Any) -> None:
        self._nv = pynvml
        self._h = handle

    def _get(self, fn: Callable[..., _T], *args: Any) -> _T | None:
        try:
            return fn(self._h, *args)
        except self._nv.NVMLError:
            return None

    def name(self) -> str | None:
        """Marketing name, e.g. 'NVIDIA H100 80GB HBM3'."""
        n = self._get(self._nv.nvmlDeviceGetName)
        return n.decode() if isinstance(n, bytes) else n

    def uuid(self) -> str | None:
        """NVML's UUID, 'GPU-8f2c…': the card's identity wherever it is installed."""
        u = self._get(self._nv.nvmlDeviceGetUUID)
        return u.decode() if isinstance(u, bytes) else u

    def energy_mj(self) -> int | None:
        """Total energy since the driver loaded, millijoules (Volta and newer)."""
        return self._get(self._nv.nvmlDeviceGetTotalEnergyConsumption)

    def power_w(self) -> float | None:
        """Board power, watts; a 1-second average on Ampere and newer."""
        mw = self._get(self._nv.nvmlDeviceGetPowerUsage)
        return None if mw is None else mw / 1000.0

    def power_limit_w(self) -> float | None:
        """Enforced power limit, watts."""
        mw = self._get(self._nv.nvmlDeviceGetEnforcedPowerLimit)
        return None if mw is None else mw / 1000.0

    def temperature_c(self) -> int | None:
        """GPU die temperature, degrees Celsius."""
        return self._get(self._nv.nvmlDeviceGetTemperature, self._nv.NVML_TEMPERATURE_GPU)

    def sm_clock_mhz(self) -> int | None:
        """Current SM clock, MHz."""
        return self._get(self._nv.nvmlDeviceGetClockInfo, self._nv.NVML_CLOCK_SM)

    def mem_clock_mhz(self) -> int | None:
        """Current memory clock, MHz."""
        return self._get(self._nv.nvmlDeviceGetClockInfo, self._nv.NVML_CLOCK_MEM)

    def max_sm_clock_mhz(self) -> int | None:
        """Highest SM clock the GPU may run at, MHz."""
        return self._get(self._nv.nvmlDeviceGetMaxClockInfo, self._nv.NVML_CLOCK_SM)

    def clock_event_mask(self) -> int | None:
        """Bitmask of current clock-event (throttle) reasons."""
        fn = getattr(self._nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
        if fn is None:  # older bindings
            fn = self._nv.nvmlDeviceGetCurrentClocksThrottleReasons
        return self._get(fn)

    def memory_used_bytes(self) -> int | None:
        """Device memory in use by every process and context, bytes."""
        info = self._get(self._nv.nvmlDeviceGetMemoryInfo)
        return None if info is None else int(info.used)

    def state(self) -> GpuState:
        """Snapshot of clocks, temperature, power, reasons and memory."""
        return GpuState(
            sm_clock_mhz=self.sm_clock_mhz(),
            mem_clock_mhz=self.mem_clock_mhz(),
            temperature_c=self.temperature_c(),
            power_w=self.power_w(),
            clock_event_reasons=reason_names(self.clock_event_mask()),
            memory_used_bytes=self.memory_used_bytes(),
        )


class Nvml:
    """NVML for one pytest session: ``with Nvml() as nvml: nvml.device(0)``.

    Entering raises :class:`NvmlUnavailable` when the bindings or the driver library are
    missing (a CPU machine, a container without the driver).
    """

    def __init__(self) -> None:
        self._nv: Any = None

    def __enter__(self) -> Nvml:
        try:
            import pynvml
        except ImportError as err:  # pragma: no cover - nvidia-ml-py is a dependency
            raise NvmlUnavailable(f"nvidia-ml-py is not installed ({err})") from err
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as err:
            raise NvmlUnavailable(f"NVML could not be initialised: {err}") from err
        self._nv = pynvml
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):
            self._nv.nvmlShutdown()
        self._nv = None

    def driver_version(self) -> str | None:
        """The NVIDIA driver's version string."""
        try:
            v = self._nv.nvmlSystemGetDriverVersion()
        except self._nv.NVMLError:
            return None
        return v.decode() if isinstance(v, bytes) else v

    def uuids(self) -> tuple[str, ...]:
        """Every GPU's UUID ('GPU-6a1e0e49-...'), in NVML's order.

        :class:`NvmlUnavailable` where NVML cannot list them (a GPU lost from the bus).
        """
        nv = self._nv
        out = []
        try:
            for i in range(nv.nvmlDeviceGetCount()):
                u = nv.nvmlDeviceGetUUID(nv.nvmlDeviceGetHandleByIndex(i))
                out.append(u.decode() if isinstance(u, bytes) else u)
        except nv.NVMLError as err:
            raise NvmlUnavailable(f"NVML could not list the GPUs: {err}") from err
        return tuple(out)

    def device(self, torch_index: int) -> NvmlDevice:
        """The NVML device behind torch's ``cuda:<torch_index>``.

        Matched by UUID, so CUDA_VISIBLE_DEVICES reordering cannot mix devices up.
        """
        import torch

        nv = self._nv
        uuid = getattr(torch.cuda.get_device_properties(torch_index), "uuid", None)
        if uuid is not None:
            with contextlib.suppress(nv.NVMLError):
                return NvmlDevice(nv, nv.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}"))
        return NvmlDevice(nv, nv.nvmlDeviceGetHandleByIndex(torch_index))


@contextlib.contextmanager
def maybe_nvml() -> Iterator[Nvml | NvmlUnavailable]:
    """Yield an open :class:`Nvml`, or the :class:`NvmlUnavailable` saying why not."""
    try:
        nvml = Nvml().__enter__()
    except NvmlUnavailable as err:
        yield err
        return
    try:
        yield nvml
    finally:
        nvml.__exit__(None, None, None)
