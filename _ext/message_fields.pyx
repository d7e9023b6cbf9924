# cython: language_level=3, auto_pickle=False
"""The fields of ``dledger.rocketmq.store.message.Message`` in a C type (issue 40): a caller
builds one per put, and a slots dataclass's generated ``__init__`` (a Python frame fed a tuple
and a dict) cost ~0.44 us of that, this type's ~0.11 us. No numpy here: a client that only
builds messages must not load it."""

# properties=: a new dict for each message, as the dataclass's default_factory gave.
cdef object _NEW_DICT = object()

# What a deleted field holds (a slots dataclass's field is then unset): reading it raises
# AttributeError, as before. The single-put kernel never matches it to a template or a type, so
# such a message goes to the general path, whose getattr raises.
cdef object _DELETED = object()
DELETED = _DELETED  # what the single-put kernel takes for an unset field


cdef inline object _present(object value, str name):
    if value is _DELETED:
        raise AttributeError(name)
    return value


# The names, in the constructor's order (message.py checks them against its dataclass spec).
MESSAGE_FIELDS = ("topic", "body", "queue_id", "flag", "tags", "keys", "properties", "delay_level", "sys_flag",
                  "born_timestamp", "born_host", "reconsume_times", "prepared_offset")


cdef class MessageFields:
    """Storage and constructor of Message's thirteen fields; Message (message.py) adds the
    dataclass's metadata, equality, repr and its properties."""

    # What a subclass made by ``dataclass(slots=True)`` (MessageExt) reads to leave these
    # names to this type rather than declare slots of its own over them.
    __slots__ = MESSAGE_FIELDS

    cdef object _topic, _body, _queue_id, _flag, _tags, _keys, _properties, _delay_level, _sys_flag
    cdef object _born_timestamp, _born_host, _reconsume_times, _prepared_offset

    def __init__(self, topic, body=b"", queue_id=0, flag=0, tags=None, keys=None, properties=_NEW_DICT,
                 delay_level=0, sys_flag=0, born_timestamp=0, born_host=None, reconsume_times=0,
                 prepared_offset=0):
        self._topic = topic
        self._body = body
        self._queue_id = queue_id
        self._flag = flag
        self._tags = tags
        self._keys = keys
        self._properties = {} if properties is _NEW_DICT else properties
        self._delay_level = delay_level
        self._sys_flag = sys_flag
        self._born_timestamp = born_timestamp
        self._born_host = born_host
        self._reconsume_times = reconsume_times
        self._prepared_offset = prepared_offset

    property topic:
        def __get__(self):
            return _present(self._topic, "topic")

        def __set__(self, value):
            self._topic = value

        def __del__(self):
            _present(self._topic, "topic")
            self._topic = _DELETED

    property body:
        def __get__(self):
            return _present(self._body, "body")

        def __set__(self, value):
            self._body = value

        def __del__(self):
            _present(self._body, "body")
            self._body = _DELETED

    property queue_id:
        def __get__(self):
            return _present(self._queue_id, "queue_id")

        def __set__(self, value):
            self._queue_id = value

        def __del__(self):
            _present(self._queue_id, "queue_id")
            self._queue_id = _DELETED

    property flag:
        def __get__(self):
            return _present(self._flag, "flag")

        def __set__(self, value):
            self._flag = value

        def __del__(self):
            _present(self._flag, "flag")
            self._flag = _DELETED

    property tags:
        def __get__(self):
            return _present(self._tags, "tags")

        def __set__(self, value):
            self._tags = value

        def __del__(self):
            _present(self._tags, "tags")
            self._tags = _DELETED

    property keys:
        def __get__(self):
            return _present(self._keys, "keys")

        def __set__(self, value):
            self._keys = value

        def __del__(self):
            _present(self._keys, "keys")
            self._keys = _DELETED

    property properties:
        def __get__(self):
            return _present(self._properties, "properties")

        def __set__(self, value):
            self._properties = value

        def __del__(self):
            _present(self._properties, "properties")
            self._properties = _DELETED

    property delay_level:
        def __get__(self):
            return _present(self._delay_level, "delay_level")

        def __set__(self, value):
            self._delay_level = value

        def __del__(self):
            _present(self._delay_level, "delay_level")
            self._delay_level = _DELETED

    property sys_flag:
        def __get__(self):
            return _present(self._sys_flag, "sys_flag")

        def __set__(self, value):
            self._sys_flag = value

        def __del__(self):
            _present(self._sys_flag, "sys_flag")
            self._sys_flag = _DELETED

    property born_timestamp:
        def __get__(self):
            return _present(self._born_timestamp, "born_timestamp")

        def __set__(self, value):
            self._born_timestamp = value

        def __del__(self):
            _present(self._born_timestamp, "born_timestamp")
            self._born_timestamp = _DELETED

    property born_host:
        def __get__(self):
            return _present(self._born_host, "born_host")

        def __set__(self, value):
            self._born_host = value

        def __del__(self):
            _present(self._born_host, "born_host")
            self._born_host = _DELETED

    property reconsume_times:
        def __get__(self):
            return _present(self._reconsume_times, "reconsume_times")

        def __set__(self, value):
            self._reconsume_times = value

        def __del__(self):
            _present(self._reconsume_times, "reconsume_times")
            self._reconsume_times = _DELETED

    property prepared_offset:
        def __get__(self):
            return _present(self._prepared_offset, "prepared_offset")

        def __set__(self, value):
            self._prepared_offset = value

        def __del__(self):
            _present(self._prepared_offset, "prepared_offset")
            self._prepared_offset = _DELETED

    def __reduce__(self):
        # Every field positionally, in the constructor's order (MessageExt's too: its dataclass
        # __init__ takes Message's fields first, then its own).
        return type(self), tuple([getattr(self, name) for name in type(self).__dataclass_fields__])
