"""RocketMQ's Configuration (rocketmq-common): the broker's properties as GET_BROKER_CONFIG
answers them and UPDATE_BROKER_CONFIG changes them.

As Java's ``update``: a key the broker does not have is left out (mergeIfExist), with no error;
a key it has is stored, and the data version moves. Java sets every such key on its config
objects, but most are read once at start, so they change nothing until a restart; here the keys
a broker takes at runtime are ``RUNTIME_KEYS`` (handed to ``apply``), the others are stored and
written to the file, for the next start. With ``store_path`` (a classic broker's ``-c`` file, a
DLedger member's ``config/broker.properties`` in its store) the properties are written there
after each update (Java's persist), atomically; a member takes its file's keys back at start
(``with_saved_properties``).

Unlike Java, a value that does not parse as its key's type (``brokerPermission=x``) is refused
with the key named: Java stores the text, ignores it, and writes it into the file.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from dledger.config import DLedgerConfig
from dledger.config_check import ConfigError
from dledger.rocketmq.remoting.protocol.register_broker_body import DataVersion
from dledger.rocketmq.remoting.protocol.topic_route_data import PERM_READ, PERM_WRITE

log = logging.getLogger(__name__)

# The keys a broker takes while it runs, with their types.
RUNTIME_KEYS: dict[str, type] = {
    "brokerPermission": int,
    "slaveReadEnable": bool,
    "autoCreateTopicEnable": bool,
    "autoCreateSubscriptionGroup": bool,
    "brokerFastFailureEnable": bool,
    "osPageCacheBusyTimeOutMills": int,
}
# BrokerConfig.brokerPermission's default: PermName.PERM_READ | PermName.PERM_WRITE.
DEFAULT_BROKER_PERMISSION = PERM_READ | PERM_WRITE


def parse_bool(text: str) -> bool:
    """Boolean.parseBoolean."""
    return text.strip().lower() == "true"


class Configuration:
    def __init__(
        self,
        properties: dict[str, str],
        store_path: Path | None = None,
        file_keys: set[str] | None = None,
    ) -> None:
        """``properties``: every key the broker has, as text. ``store_path``: the file to
        write after an update; ``file_keys``: the keys it held (written with the ones updated
        since; the others keep their defaults without being written)."""
        self.all_configs = dict(properties)
        self.store_path = store_path
        self._file_keys = set(file_keys or ())
        self.data_version = DataVersion(int(time.time() * 1000), 0)
        self._lock = threading.Lock()

    def all_configs_format_string(self) -> str:
        """MixAll.properties2String: ``key=value`` lines."""
        with self._lock:
            return "".join(f"{k}={v}\n" for k, v in self.all_configs.items())

    def update(self, properties: dict[str, str]) -> dict[str, str]:
        """The known keys of ``properties`` stored (and the file written); returns them. A value
        of a runtime key that does not parse raises ValueError, and nothing is stored."""
        known = {k: v for k, v in properties.items() if k in self.all_configs}
        for key, value in known.items():
            kind = RUNTIME_KEYS.get(key)
            if kind is int:
                try:
                    int(value)
                except ValueError:
                    raise ValueError(f"{key}={value!r}: want an integer") from None
        with self._lock:
            self.all_configs.update(known)
            self._file_keys |= set(known)
            self.data_version = DataVersion(int(time.time() * 1000), self.data_version.counter + 1)
        self.persist()
        return known

    def persist(self) -> None:
        if self.store_path is None:
            return
        # Here, not at the top: dledger.store loads numpy.
        from dledger.store.properties import write_properties

        with self._lock:
            values: dict[str, object] = {k: v for k, v in self.all_configs.items() if k in self._file_keys}
        try:
            self.store_path.parent.mkdir(parents=True, exist_ok=True)
            write_properties(self.store_path, values)
        except OSError as exc:
            log.warning("could not write %s: %s", self.store_path, exc)


# A DLedger member's own properties file, in its store's config directory beside topics.json:
# Java's default brokerConfigPath (``store/config/broker.properties``), where Configuration
# persists when the broker was not started with ``-c``.
MEMBER_CONFIG_FILE = "broker.properties"


def member_config_path(store_root: Path) -> Path:
    return store_root / "config" / MEMBER_CONFIG_FILE


def with_saved_properties(cfg: DLedgerConfig, saved: dict[str, str]) -> DLedgerConfig:
    """A member's options with the ones UPDATE_BROKER_CONFIG saved in its file: they win over
    its flags and ``--config``, as a Java broker's rewritten ``-c`` file does at its next start.
    Keys that are not options (``brokerPermission``, ``brokerId``) or do not parse are left to
    the caller (the first is applied with the runtime keys) or skipped with a warning."""
    from dledger.config import _ALIASES, snake_case  # the camelCase names DLedgerConfig takes

    types = {f.name: str(f.type) for f in dataclasses.fields(cfg)}
    changes: dict[str, object] = {}
    for key, text in saved.items():
        name = _ALIASES.get(key) or snake_case(key)
        kind = types.get(name)
        if kind is None:
            continue
        try:
            if "bool" in kind:
                changes[name] = parse_bool(text)
            elif "int" in kind:
                changes[name] = int(text)
            elif "float" in kind:
                changes[name] = float(text)
            else:
                changes[name] = text
        except ValueError:
            log.warning("saved broker property %s=%r does not parse: ignored", key, text)
    if not changes:
        return cfg
    try:
        return dataclasses.replace(cfg, **changes)  # type: ignore[arg-type]
    except ConfigError as exc:
        log.warning("saved broker properties %s refused (%s): the options stay as given", changes, exc)
        return cfg


def apply_runtime(changed: dict[str, str], setters: dict[str, Callable[[bool | int], None]]) -> None:
    """Hand each runtime key ``changed`` holds to its setter."""
    for key, setter in setters.items():
        if key in changed:
            kind = RUNTIME_KEYS[key]
            setter(parse_bool(changed[key]) if kind is bool else int(changed[key]))


__all__ = [
    "DEFAULT_BROKER_PERMISSION",
    "MEMBER_CONFIG_FILE",
    "RUNTIME_KEYS",
    "Configuration",
    "apply_runtime",
    "member_config_path",
    "parse_bool",
    "with_saved_properties",
]
