"""Type stub for the ``dledger._ext.message_fields`` Cython kernel (Message's C fields)."""

from typing import Any

MESSAGE_FIELDS: tuple[str, ...]
DELETED: object

class MessageFields:
    def __init__(self, topic: str, *args: Any, **kwargs: Any) -> None: ...
    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]: ...

def install_vectorcall(cls: type) -> None: ...
