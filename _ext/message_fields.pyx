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


# -- Message(...) by vectorcall ------------------------------------------------------------
# Cython's own vectorcall serves MessageFields alone: a subclass (Message) is called through
# type_call, an args tuple and a kwargs dict turned back into a vector for __init__ (~0.35 us
# of a ~0.5 us construction). ``install_vectorcall`` gives Message a vectorcall of its own.

from cpython.object cimport PyObject
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE

cdef extern from "Python.h":
    Py_ssize_t PyVectorcall_NARGS(size_t nargsf)
    ctypedef struct _VectorcallType "PyTypeObject":
        void *tp_vectorcall

cdef enum:
    _N_FIELDS = 13

# MESSAGE_FIELDS' strings (the tuple keeps them alive), interned as keyword names are.
cdef PyObject *_NAMES[_N_FIELDS]
for _i, _name in enumerate(MESSAGE_FIELDS):
    _NAMES[_i] = <PyObject *>_name


cdef object _construct(PyObject *cls, PyObject **args, size_t nargsf, PyObject *kwnames):
    """``cls(*args, **kwargs)`` as the vectorcall protocol passes them, with __init__'s
    parameters, defaults and TypeErrors."""
    cdef Py_ssize_t nargs = PyVectorcall_NARGS(nargsf), nkw = 0, k, j, i
    cdef PyObject *key
    cdef PyObject *vals[_N_FIELDS]
    if nargs > _N_FIELDS:
        raise TypeError(f"__init__() takes from 2 to {_N_FIELDS + 1} positional arguments but {nargs + 1} were given")
    for k in range(_N_FIELDS):
        vals[k] = args[k] if k < nargs else NULL
    if kwnames != NULL:
        nkw = PyTuple_GET_SIZE(<object>kwnames)
    for j in range(nkw):
        key = PyTuple_GET_ITEM(<object>kwnames, j)
        k = -1
        # Keyword names are interned: a pointer compare finds them; == only for others.
        for i in range(_N_FIELDS):
            if key == _NAMES[i]:
                k = i
                break
        name = <object>key
        if k < 0:
            for i in range(_N_FIELDS):
                if name == <object>_NAMES[i]:
                    k = i
                    break
        if k < 0:
            raise TypeError(f"__init__() got an unexpected keyword argument {name!r}")
        if vals[k] != NULL:
            raise TypeError(f"__init__() got multiple values for argument {name!r}")
        vals[k] = args[nargs + j]
    if vals[0] == NULL:
        raise TypeError("__init__() missing required argument 'topic' (pos 1)")
    cdef MessageFields m = MessageFields.__new__(<type>cls)
    m._topic = <object>vals[0]
    m._body = <object>vals[1] if vals[1] != NULL else b""
    m._queue_id = <object>vals[2] if vals[2] != NULL else 0
    m._flag = <object>vals[3] if vals[3] != NULL else 0
    m._tags = <object>vals[4] if vals[4] != NULL else None
    m._keys = <object>vals[5] if vals[5] != NULL else None
    m._properties = <object>vals[6] if vals[6] != NULL and <object>vals[6] is not _NEW_DICT else {}
    m._delay_level = <object>vals[7] if vals[7] != NULL else 0
    m._sys_flag = <object>vals[8] if vals[8] != NULL else 0
    m._born_timestamp = <object>vals[9] if vals[9] != NULL else 0
    m._born_host = <object>vals[10] if vals[10] != NULL else None
    m._reconsume_times = <object>vals[11] if vals[11] != NULL else 0
    m._prepared_offset = <object>vals[12] if vals[12] != NULL else 0
    return m


def install_vectorcall(cls):
    """Make ``cls(...)`` (a subclass of MessageFields that keeps its __init__ and __new__) build
    its instances by ``_construct``. Its own subclasses are not affected (a type's vectorcall
    is not inherited)."""
    if not (isinstance(cls, type) and issubclass(cls, MessageFields)):
        raise TypeError(f"{cls!r} is no MessageFields type")
    if cls.__init__ is not MessageFields.__init__ or cls.__new__ is not MessageFields.__new__:
        raise TypeError(f"{cls!r} has an __init__ or __new__ of its own")
    (<_VectorcallType *><PyObject *>cls).tp_vectorcall = <void *>_construct
