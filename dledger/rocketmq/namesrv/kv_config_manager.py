"""RocketMQ's KVConfigManager: the name server's namespaced key-value settings (PUT_KV_CONFIG,
GET_KV_CONFIG, DELETE_KV_CONFIG, GET_KVLIST_BY_NAMESPACE), kept in ``kvConfig.json`` when
given a path, as ``{"configTable": {namespace: {key: value}}}``."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)


class KVConfigManager:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self.config_table: dict[str, dict[str, str]] = {}
        if path is not None and path.exists():
            data = json.loads(path.read_text(encoding="utf-8") or "{}")
            self.config_table = {ns: dict(kv) for ns, kv in (data.get("configTable") or {}).items()}

    def put(self, namespace: str, key: str, value: str) -> None:
        self.config_table.setdefault(namespace, {})[key] = value
        self._persist()

    def get(self, namespace: str, key: str) -> str | None:
        return self.config_table.get(namespace, {}).get(key)

    def delete(self, namespace: str, key: str) -> None:
        kv = self.config_table.get(namespace)
        if kv is not None and kv.pop(key, None) is not None:
            self._persist()

    def list_by_namespace(self, namespace: str) -> dict[str, str] | None:
        return self.config_table.get(namespace)

    def _persist(self) -> None:
        if self.path is None:
            return
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"configTable": self.config_table}, ensure_ascii=False, indent=1), encoding="utf-8")
        os.replace(tmp, self.path)


__all__ = ["KVConfigManager"]
