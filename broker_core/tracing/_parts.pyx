# cython: language_level=3, boundscheck=False, wraparound=False
"""columns.message_parts compiled (Cython): a publish batch's trace columns in one C loop over its messages.

The pure Python message_parts makes about five C-level passes over a batch (a zip of the arrays, a join and a
NUL search of the ids, a count per string column, the body lengths and their count): about 200 ns a message,
the largest part of what tracing costs the broker on a publish. Here it is one pass reading each message's
fields in place, plus the ids' join: about 55 ns (bench/broker_trace_instructions.py). The result is the same
list message_parts returns; columns.py binds the classes and the field positions it needs (`bind`) and falls
back to message_parts where this module was not built.
"""

from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF
from libc.string cimport memchr, memcmp


cdef extern from "Python.h":
    bint PyUnicode_Check(object)
    bint PyUnicode_CheckExact(object)
    bint PyBytes_CheckExact(object)
    bint PyList_CheckExact(object)
    Py_ssize_t PyList_GET_SIZE(object)
    PyObject* PyList_GET_ITEM(object, Py_ssize_t)
    int PyUnicode_KIND(object)
    void* PyUnicode_DATA(object)
    Py_ssize_t PyUnicode_GET_LENGTH(object)
    Py_ssize_t PyBytes_GET_SIZE(object)
    int PyObject_RichCompareBool(object, object, int) except -1
    int Py_EQ
    int PyUnicode_1BYTE_KIND


cdef object Run = None
cdef object Joined = None
cdef object joined = None
cdef Py_ssize_t F_ID = 0, F_TYPE = 1, F_KEY = 2, F_BUSINESS_ID = 3, F_BODY = 5, F_TAKEN = 6


def bind(run, joined_maker, joined_fn, Py_ssize_t m_id, Py_ssize_t m_type, Py_ssize_t m_key,
         Py_ssize_t m_business_id, Py_ssize_t m_body):
    """What makes a Run and a Joined as shipped (values.run, values.joined), the function that joins a column of
    differing values (columns._joined) and the message fields' positions (protocol.M_*)."""
    global Run, Joined, joined, F_ID, F_TYPE, F_KEY, F_BUSINESS_ID, F_BODY, F_TAKEN
    Run, Joined, joined = run, joined_maker, joined_fn
    F_ID, F_TYPE, F_KEY, F_BUSINESS_ID, F_BODY = m_id, m_type, m_key, m_business_id, m_body
    F_TAKEN = max(m_id, m_type, m_key, m_business_id, m_body) + 1


cdef inline object _field(list arrays, Py_ssize_t i, Py_ssize_t j):
    return <object>PyList_GET_ITEM(<object>PyList_GET_ITEM(arrays, i), j)


cdef inline bint _has_nul(object text):
    if PyUnicode_KIND(text) == PyUnicode_1BYTE_KIND:
        return memchr(PyUnicode_DATA(text), 0, PyUnicode_GET_LENGTH(text)) != NULL
    return "\0" in text


cdef inline bint _equal(object value, object first) except -1:
    """value == first, two strings compared in place (a type shared by a batch: equal, not the same object)."""
    cdef Py_ssize_t n
    if value is first:
        return True
    if PyUnicode_CheckExact(value) and PyUnicode_CheckExact(first):
        n = PyUnicode_GET_LENGTH(value)  # (equal strings have the same length and the same kind)
        return (n == PyUnicode_GET_LENGTH(first) and PyUnicode_KIND(value) == PyUnicode_KIND(first)
                and memcmp(PyUnicode_DATA(value), PyUnicode_DATA(first), n * PyUnicode_KIND(value)) == 0)
    return PyObject_RichCompareBool(value, first, Py_EQ)


cdef list _column(list arrays, Py_ssize_t j, Py_ssize_t n):
    cdef list values = PyList_New(n)
    cdef Py_ssize_t i
    cdef object value
    for i in range(n):
        value = _field(arrays, i, j)
        Py_INCREF(value)
        PyList_SET_ITEM(values, i, value)
    return values


cdef object _strings(list arrays, Py_ssize_t j, Py_ssize_t n):
    """A string column: None when all are null, a Run when all are equal, else columns._joined of them."""
    cdef object first = _field(arrays, 0, j)
    cdef object value
    cdef Py_ssize_t i
    for i in range(1, n):
        value = _field(arrays, i, j)
        if not _equal(value, first):
            return joined(_column(arrays, j, n), n)
    return None if first is None else Run(first, n)


cdef inline Py_ssize_t _size(object body) except -1:
    return PyBytes_GET_SIZE(body) if PyBytes_CheckExact(body) else len(body)


def message_parts(list arrays, bint sized):
    """As columns.message_parts; None (the caller takes the Python way) when `arrays` is empty or holds anything
    but lists of the fields up to the body."""
    cdef Py_ssize_t n = len(arrays), i, first_size
    cdef object value
    cdef bint plain = True
    if n == 0 or Run is None:
        return None
    cdef list ids = PyList_New(n)
    for i in range(n):
        value = <object>PyList_GET_ITEM(arrays, i)
        if not PyList_CheckExact(value) or PyList_GET_SIZE(value) < F_TAKEN:
            return None
        value = <object>PyList_GET_ITEM(value, F_ID)
        Py_INCREF(value)
        PyList_SET_ITEM(ids, i, value)
        if plain and (not PyUnicode_Check(value) or _has_nul(value)):
            plain = False
    sizes = None
    if sized:
        first_size = _size(_field(arrays, 0, F_BODY))
        for i in range(1, n):
            if _size(_field(arrays, i, F_BODY)) != first_size:
                sizes = [_size(_field(arrays, k, F_BODY)) for k in range(n)]
                break
        else:
            sizes = Run(first_size, n)
    return [Joined("\0".join(ids), n) if plain else ids, _strings(arrays, F_TYPE, n), _strings(arrays, F_KEY, n),
            _strings(arrays, F_BUSINESS_ID, n), None, sizes]
