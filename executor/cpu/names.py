"""Names shared by the CPU plugin (inside verl processes) and the launcher (outside them)."""

PLUGIN_MODULE = "executor.cpu.verl_plugin"
"""Module named in VERL_USE_EXTERNAL_MODULES; verl imports it in every one of its processes."""

PLATFORM_NAME = "cpu"
"""Key of the CPU platform in verl's PlatformRegistry, selected with VERL_PLATFORM."""
