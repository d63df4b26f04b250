"""The device catalog, now data: see twin.hardware (the shipped YAML files under twin/hardware/data)."""

from twin.hardware import DEVICES, DeviceSpec, Figure

__all__ = ["DEVICES", "DeviceSpec", "Figure"]
