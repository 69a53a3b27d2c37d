"""PluginManager: plugin discovery, the lock-protected device list, images."""
from __future__ import annotations

import importlib
from dataclasses import dataclass

from . import locks
from .config import Config, TargetOffload
from .device import Device
from .errors import ErrorCode, OffloadError
from .plugins.common import GenericPlugin

ENTRY_POINT_GROUP = "offload.plugins"
BUILTIN = {
    "cuda": "offload.plugins.cuda:CUDAPlugin",
    "amdgpu": "offload.plugins.amdgpu:AMDGPUPlugin",
    "host": "offload.plugins.host:HostPlugin",
}


@dataclass
class PluginRecord:
    name: str
    plugin: GenericPlugin | None
    reason: str = ""           # why it has no devices (or failed to load)
    num_devices: int = 0


def _load_class(target: str):
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def discover() -> tuple[dict[str, str], list[str]]:
    """(plugin name -> 'module:Class', clashes): the built-ins plus the entry-point group.

    An entry point never replaces a built-in plugin (nor an earlier entry point of the
    same name): it is ignored, and the clash is reported (offload-info prints it)."""
    from importlib import metadata  # here: a C program's start-up skips it
    found = dict(BUILTIN)
    clashes: list[str] = []
    try:
        eps = list(metadata.entry_points(group=ENTRY_POINT_GROUP))
    except Exception as exc:        # a broken distribution must not break import
        return found, [f"entry points of group {ENTRY_POINT_GROUP!r} unreadable: {exc}"]
    for ep in eps:
        known = found.get(ep.name)
        if known is None:
            found[ep.name] = ep.value
        elif known != ep.value:
            dist = getattr(getattr(ep, "dist", None), "name", None) or "an installed package"
            kind = "built-in" if ep.name in BUILTIN else "first registered"
            clashes.append(f"entry point {ep.name} = {ep.value} (from {dist}) ignored: the "
                           f"{kind} plugin {ep.name!r} ({known}) wins")
    return found, clashes


class PluginManager:
    """Loads plugins and numbers their devices: GPUs first, host last."""

    def __init__(self, config: Config):
        self.config = config
        self.records: list[PluginRecord] = []
        #: entry points that tried to replace a plugin already known (ignored)
        self.clashes: list[str] = []
        self._lock = locks.new_lock()
        self._devices: list[tuple[GenericPlugin, int]] = []
        #: global number -> Device, filled as devices are first used (emptied at shutdown)
        self.devices_made: dict[int, Device] = {}
        self._shut = False
        self._initial: GenericPlugin | None = None
        self._load_plugins()

    def _load_plugins(self) -> None:
        wanted = self.config.plugins
        if wanted is not None and all(n in BUILTIN for n in wanted):
            available = dict(BUILTIN)     # only built-ins asked for: no entry-point scan
        else:
            available, self.clashes = discover()
        loaded = []
        names = self.config.plugins or list(available)
        for name in names:
            target = available.get(name)
            if target is None:
                self.records.append(PluginRecord(name, None, f"unknown plugin (known: "
                                                 f"{', '.join(available)})"))
                continue
            try:
                plugin = _load_class(target)(self.config)
            except Exception as exc:      # a plugin never breaks the runtime
                self.records.append(PluginRecord(name, None, f"failed to load: {exc}"))
                continue
            loaded.append(plugin)
        if self.config.plugins is None:
            loaded.sort(key=lambda p: p.priority)
        for plugin in loaded:
            rec = PluginRecord(plugin.name, plugin)
            if self.config.target_offload is TargetOffload.DISABLED:
                rec.reason = "OMP_TARGET_OFFLOAD=disabled"
            else:
                rec.num_devices = plugin.number_of_devices()
                rec.reason = plugin.reason if rec.num_devices == 0 else ""
                self._devices += [(plugin, d) for d in range(rec.num_devices)]
            self.records.append(rec)

    @property
    def plugins(self) -> list[GenericPlugin]:
        return [r.plugin for r in self.records if r.plugin is not None]

    def num_devices(self) -> int:
        return len(self._devices)

    def get_device(self, n: int) -> Device:
        """The Device for global number n; the list lock is held until we have it."""
        dev = self.devices_made.get(n)          # made once, never moved: no lock needed
        if dev is not None:
            return dev
        with self._lock:
            dev = self.devices_made.get(n)
            if dev is not None:
                return dev
            if self._shut:
                raise OffloadError(ErrorCode.UNINITIALIZED, "the offload runtime was shut down")
            if not (isinstance(n, int) and 0 <= n < len(self._devices)):
                raise OffloadError(ErrorCode.INVALID_VALUE,
                                   f"device number '{n}' out of range, only "
                                   f"{len(self._devices)} devices available")
            plugin, local = self._devices[n]
            plugin.init_device(local)
            dev = self.devices_made[n] = Device(n, plugin, local, self.config)
            return dev

    def initial_plugin(self) -> GenericPlugin:
        """A private host plugin that runs host binaries for the initial device."""
        if self._initial is None:
            from .plugins.host import HostPlugin
            with self._lock:
                if self._initial is None:
                    p = HostPlugin(Config(cache_dir=self.config.cache_dir, host_num_devices=1))
                    p.init_device(0)
                    self._initial = p
        return self._initial

    def architecture(self, plugin: str) -> str | None:
        """The architecture of the first device of `plugin` (e.g. 'sm_90'), or None."""
        for p in self.plugins:
            if p.name == plugin:
                return p.architecture()
        return None

    def initialized(self) -> list[Device]:
        with self._lock:
            return list(self.devices_made.values())

    @property
    def is_shut(self) -> bool:
        return self._shut

    def shutdown(self) -> None:
        """Tear every plugin down once, in the order of docs/semantics.md, "Devices and plugins"."""
        with self._lock:
            if self._shut:
                return
            self._shut = True
            devices = list(self.devices_made.values())
        for dev in devices:
            dev.table.clear()
        for plugin in self.plugins + ([self._initial] if self._initial else []):
            try:
                plugin.deinit()
            except Exception:
                pass

    def forget(self) -> None:
        """In a fork child: drop everything without touching a driver."""
        for plugin in self.plugins + ([self._initial] if self._initial else []):
            plugin.forget()
        self._devices = []
        self.devices_made.clear()              # in place: runtimes look devices up in it
        self._shut = True
