/*
 * Compiled paths of remotelog.kafka.records: the shallow batch iterator and the
 * record decoder of Kafka v2 record batches.
 *
 * The pure-Python functions in records.py are the reference; these are the same
 * algorithms with the same checks and the same error messages, compiled because
 * batch iteration is the fetch path's per-batch cost and record decoding the
 * Spark connector's per-record cost, and an interpreted loop cannot keep up with
 * aiokafka's Cython decoder. tests/kafka/test_fastrecords.py runs both on every
 * shared segment, every codec and hypothesis-made corrupt input.
 *
 * Body layout per record: varint length, i8 attributes, varlong timestampDelta,
 * varint offsetDelta, varint key length (-1 = null) + key, varint value length +
 * value, varint header count, then (varint key length + key, varint value
 * length + value) per header. All varints are zig-zag encoded.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define HEADER_SIZE 61
#define LOG_OVERHEAD 12
#define CRC_START 21
#define MAX_CODEC 4

/* Set once by configure(): the Record and BatchHeader NamedTuples, CorruptBatchError. */
static PyTypeObject *record_type = NULL;
static PyTypeObject *header_type = NULL;
static PyObject *corrupt_error = NULL;
static PyObject *empty_tuple = NULL;

/* CorruptBatchError("<source>: <kind> <position>: <message>"); returns -1. */
static int vcorrupt(PyObject *source, const char *kind, Py_ssize_t position, const char *fmt,
                    va_list args) {
    char message[160];
    vsnprintf(message, sizeof message, fmt, args);
    PyErr_Format(corrupt_error, "%U: %s %zd: %s", source, kind, position, message);
    return -1;
}

static int corrupt(PyObject *source, const char *kind, Py_ssize_t position, const char *fmt,
                   ...) {
    va_list args;
    va_start(args, fmt);
    vcorrupt(source, kind, position, fmt, args);
    va_end(args);
    return -1;
}

static inline int64_t be64(const unsigned char *p) {
    return (int64_t)(((uint64_t)p[0] << 56) | ((uint64_t)p[1] << 48) | ((uint64_t)p[2] << 40) |
                     ((uint64_t)p[3] << 32) | ((uint64_t)p[4] << 24) | ((uint64_t)p[5] << 16) |
                     ((uint64_t)p[6] << 8) | (uint64_t)p[7]);
}

static inline uint32_t be32u(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static inline int32_t be32(const unsigned char *p) { return (int32_t)be32u(p); }

static inline int16_t be16(const unsigned char *p) {
    return (int16_t)(((uint16_t)p[0] << 8) | p[1]);
}

/* A NamedTuple instance of ints, bytes, str, None and such tuples; steals `items`.
 *
 * Allocated like tuple.__new__ allocates subclasses, but left untracked by the
 * cycle collector: nothing in it can form a cycle, and CPython untracks such
 * tuples itself at their first collection; this skips that work. */
static PyObject *new_named(PyTypeObject *type, PyObject **items, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        if (items[i] == NULL) {
            for (Py_ssize_t j = 0; j < n; j++) {
                Py_XDECREF(items[j]);
            }
            return NULL;
        }
    }
    PyTupleObject *tuple = PyObject_GC_NewVar(PyTupleObject, type, n);
    if (tuple == NULL) {
        for (Py_ssize_t j = 0; j < n; j++) {
            Py_DECREF(items[j]);
        }
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        tuple->ob_item[i] = items[i];
    }
    return (PyObject *)tuple;
}

/* ------------------------------------------------------------------------ */
/* Shallow iteration: BatchIterator(data, source, crc_function_or_None, start) */

typedef struct {
    PyObject_HEAD Py_buffer view;
    Py_ssize_t position;
    PyObject *source;
    PyObject *crc; /* crc32c.crc32c, or None to skip CRC checks */
} BatchIterator;

static PyObject *parse_header(BatchIterator *it) {
    const unsigned char *data = (const unsigned char *)it->view.buf;
    Py_ssize_t end = it->view.len;
    Py_ssize_t position = it->position;
    const unsigned char *p = data + position;
    if (end - position < HEADER_SIZE) {
        corrupt(it->source, "position", position, "truncated batch header (%zd of %d bytes)",
                end - position, HEADER_SIZE);
        return NULL;
    }
    int32_t batch_length = be32(p + 8);
    int magic = (signed char)p[16];
    int16_t attributes = be16(p + 21);
    int32_t last_offset_delta = be32(p + 23);
    int32_t records_count = be32(p + 57);
    uint32_t stored_crc = be32u(p + 17);
    if (magic != 2) {
        corrupt(it->source, "position", position, "unsupported magic %d", magic);
        return NULL;
    }
    if (batch_length < HEADER_SIZE - LOG_OVERHEAD) {
        corrupt(it->source, "position", position,
                "batch length %d is below the %d-byte minimum", batch_length,
                HEADER_SIZE - LOG_OVERHEAD);
        return NULL;
    }
    if ((attributes & 0x07) > MAX_CODEC) {
        corrupt(it->source, "position", position, "unknown compression codec %d",
                attributes & 0x07);
        return NULL;
    }
    if (records_count < 0 || last_offset_delta < 0) {
        corrupt(it->source, "position", position,
                "negative records count or last offset delta");
        return NULL;
    }
    Py_ssize_t size = (Py_ssize_t)batch_length + LOG_OVERHEAD;
    if (size > end - position) {
        corrupt(it->source, "position", position,
                "batch of %zd bytes passes the end of the data at %zd", size, end);
        return NULL;
    }
    if (it->crc != Py_None) {
        PyObject *span = PyMemoryView_FromMemory((char *)p + CRC_START, size - CRC_START,
                                                 PyBUF_READ);
        PyObject *actual = span ? PyObject_CallOneArg(it->crc, span) : NULL;
        Py_XDECREF(span);
        if (actual == NULL) {
            return NULL;
        }
        unsigned long computed = PyLong_AsUnsignedLong(actual);
        Py_DECREF(actual);
        if (computed == (unsigned long)-1 && PyErr_Occurred()) {
            return NULL;
        }
        if (computed != stored_crc) {
            corrupt(it->source, "position", position,
                    "CRC-32C mismatch (stored 0x%08x, computed 0x%08lx)", stored_crc, computed);
            return NULL;
        }
    }
    int64_t base_timestamp = be64(p + 27), max_timestamp = be64(p + 35);
    PyObject *base_timestamp_object = PyLong_FromLongLong(base_timestamp);
    PyObject *items[14] = {
        PyLong_FromLongLong(be64(p)),
        PyLong_FromLong(batch_length),
        PyLong_FromLong(be32(p + 12)),
        PyLong_FromLong(magic),
        PyLong_FromUnsignedLong(stored_crc),
        PyLong_FromLong(attributes),
        PyLong_FromLong(last_offset_delta),
        base_timestamp_object,
        /* one object for both when equal, as in every single-record batch */
        max_timestamp == base_timestamp ? Py_XNewRef(base_timestamp_object)
                                        : PyLong_FromLongLong(max_timestamp),
        PyLong_FromLongLong(be64(p + 43)),
        PyLong_FromLong(be16(p + 51)),
        PyLong_FromLong(be32(p + 53)),
        PyLong_FromLong(records_count),
        PyLong_FromSsize_t(position),
    };
    PyObject *header = new_named(header_type, items, 14);
    if (header != NULL) {
        it->position += size;
    }
    return header;
}

static PyObject *batch_iterator_next(BatchIterator *it) {
    if (it->position >= it->view.len) {
        return NULL; /* StopIteration */
    }
    PyObject *header = parse_header(it);
    if (header == NULL) {
        it->position = it->view.len; /* like a generator that raised: finished */
    }
    return header;
}

static PyObject *batch_iterator_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyObject *data, *source, *crc;
    Py_ssize_t start;
    if (header_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_fastrecords.configure() was not called");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "OUOn", &data, &source, &crc, &start)) {
        return NULL;
    }
    if (start < 0) {
        PyErr_SetString(PyExc_ValueError, "start must not be negative");
        return NULL;
    }
    BatchIterator *it = (BatchIterator *)type->tp_alloc(type, 0);
    if (it == NULL) {
        return NULL;
    }
    if (PyObject_GetBuffer(data, &it->view, PyBUF_SIMPLE) < 0) {
        it->view.obj = NULL;
        Py_DECREF(it);
        return NULL;
    }
    it->position = start;
    it->source = Py_NewRef(source);
    it->crc = Py_NewRef(crc);
    return (PyObject *)it;
}

static void batch_iterator_dealloc(BatchIterator *it) {
    if (it->view.obj != NULL) {
        PyBuffer_Release(&it->view);
    }
    Py_XDECREF(it->source);
    Py_XDECREF(it->crc);
    Py_TYPE(it)->tp_free((PyObject *)it);
}

static PyTypeObject BatchIteratorType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "remotelog.kafka._fastrecords.BatchIterator",
    .tp_basicsize = sizeof(BatchIterator),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "BatchIterator(data, source, crc_function_or_None, start): BatchHeaders of data.",
    .tp_new = batch_iterator_new,
    .tp_dealloc = (destructor)batch_iterator_dealloc,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)batch_iterator_next,
};

/* ------------------------------------------------------------------------ */
/* Full decode: decode_records(data, header, *, source) */

typedef struct {
    const unsigned char *data;
    Py_ssize_t size;
    Py_ssize_t pos;
    PyObject *source;
    Py_ssize_t batch_position;
} cursor;

/* CorruptBatchError naming the batch the cursor reads; returns -1. */
static int fail(cursor *c, const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    vcorrupt(c->source, "batch at position", c->batch_position, fmt, args);
    va_end(args);
    return -1;
}

/* Zig-zag varlong, at most 10 bytes, whose value fits 64 bits (as Kafka's
 * ByteUtils.readVarlong); the Python decoder applies the same limit. */
static int read_varint(cursor *c, int64_t *out) {
    uint64_t result = 0;
    int shift = 0;
    for (;;) {
        if (c->pos >= c->size) {
            return fail(c, "truncated varint");
        }
        unsigned char byte = c->data[c->pos++];
        if (shift == 63 && (byte & 0x7E)) {
            return fail(c, "varint longer than 10 bytes");
        }
        result |= (uint64_t)(byte & 0x7F) << shift;
        if (!(byte & 0x80)) {
            *out = (int64_t)(result >> 1) ^ -(int64_t)(result & 1);
            return 0;
        }
        shift += 7;
        if (shift > 63) {
            return fail(c, "varint longer than 10 bytes");
        }
    }
}

/* A varint-length-prefixed byte field: *start and *length, length -1 for null. */
static int read_field(cursor *c, Py_ssize_t *start, int64_t *length) {
    if (c->pos < c->size && c->data[c->pos] < 0x80) { /* one-byte length: the common case */
        unsigned char byte = c->data[c->pos++];
        *length = (int64_t)(byte >> 1) ^ -(int64_t)(byte & 1);
    } else if (read_varint(c, length) < 0) {
        return -1;
    }
    *start = c->pos;
    if (*length < 0) {
        *length = -1;
        return 0;
    }
    if (*length > c->size - c->pos) {
        return fail(c, "field of %lld bytes passes the end", (long long)*length);
    }
    c->pos += (Py_ssize_t)*length;
    return 0;
}

static PyObject *field_bytes(cursor *c, Py_ssize_t start, int64_t length) {
    if (length < 0) {
        Py_RETURN_NONE;
    }
    return PyBytes_FromStringAndSize((const char *)c->data + start, (Py_ssize_t)length);
}

/* Header keys repeat from record to record ("traceparent", "content-type"): the
 * last ASCII key seen at each header index is reused instead of decoded again. */
#define KEY_CACHE_SIZE 16
static PyObject *key_cache[KEY_CACHE_SIZE];

static PyObject *header_key(cursor *c, int64_t index, Py_ssize_t start, Py_ssize_t length) {
    const char *bytes = (const char *)c->data + start;
    PyObject **slot = index < KEY_CACHE_SIZE ? &key_cache[index] : NULL;
    if (slot != NULL && *slot != NULL && PyUnicode_GET_LENGTH(*slot) == length &&
        memcmp(PyUnicode_DATA(*slot), bytes, (size_t)length) == 0) {
        return Py_NewRef(*slot);
    }
    PyObject *key = PyUnicode_DecodeUTF8(bytes, length, "replace");
    if (key != NULL && slot != NULL && PyUnicode_IS_ASCII(key)) {
        Py_XSETREF(*slot, Py_NewRef(key));
    }
    return key;
}

static PyObject *read_headers(cursor *c, int64_t count) {
    if (count == 0) {
        return Py_NewRef(empty_tuple);
    }
    PyObject *headers = PyTuple_New((Py_ssize_t)count);
    if (headers == NULL) {
        return NULL;
    }
    for (int64_t i = 0; i < count; i++) {
        Py_ssize_t key_start, value_start;
        int64_t key_length, value_length;
        if (read_field(c, &key_start, &key_length) < 0) {
            goto error;
        }
        if (key_length < 0) {
            fail(c, "null header key");
            goto error;
        }
        if (read_field(c, &value_start, &value_length) < 0) {
            goto error;
        }
        PyObject *key = header_key(c, i, key_start, (Py_ssize_t)key_length);
        PyObject *value = key ? field_bytes(c, value_start, value_length) : NULL;
        PyObject *pair = value ? PyTuple_Pack(2, key, value) : NULL;
        Py_XDECREF(key);
        Py_XDECREF(value);
        if (pair == NULL) {
            goto error;
        }
        PyObject_GC_UnTrack(pair); /* a str and bytes or None: no cycle possible */
        PyTuple_SET_ITEM(headers, (Py_ssize_t)i, pair);
    }
    PyObject_GC_UnTrack(headers); /* of untracked pairs only */
    return headers;
error:
    Py_DECREF(headers);
    return NULL;
}

/* a + b as a Python int, exact even where the sum leaves 64 bits (corrupt deltas),
 * as in the Python decoder. */
static PyObject *add_longs(long long a, long long b) {
    long long sum;
    if (!__builtin_add_overflow(a, b, &sum)) {
        return PyLong_FromLongLong(sum);
    }
    PyObject *left = PyLong_FromLongLong(a);
    PyObject *right = left ? PyLong_FromLongLong(b) : NULL;
    PyObject *result = right ? PyNumber_Add(left, right) : NULL;
    Py_XDECREF(left);
    Py_XDECREF(right);
    return result;
}

typedef struct {
    long long base_offset;
    long long base_timestamp;
    long long max_timestamp;
    int log_append_time;
    PyObject *base_offset_object; /* the header's, reused for offset delta 0 */
    /* The previous record's timestamp: records of a batch often share one. */
    PyObject *last_timestamp;
    long long last_timestamp_value;
} batch_fields;

static PyObject *timestamp_of(batch_fields *batch, int64_t timestamp_delta) {
    long long value;
    if (batch->log_append_time) {
        value = batch->max_timestamp;
    } else if (__builtin_add_overflow(batch->base_timestamp, timestamp_delta, &value)) {
        return add_longs(batch->base_timestamp, timestamp_delta);
    }
    if (batch->last_timestamp == NULL || batch->last_timestamp_value != value) {
        PyObject *timestamp = PyLong_FromLongLong(value);
        if (timestamp == NULL) {
            return NULL;
        }
        Py_XSETREF(batch->last_timestamp, timestamp);
        batch->last_timestamp_value = value;
    }
    return Py_NewRef(batch->last_timestamp);
}

static PyObject *decode_one(cursor *c, batch_fields *batch) {
    int64_t length, timestamp_delta, offset_delta, header_count, key_length, value_length;
    Py_ssize_t key_start, value_start;
    if (read_varint(c, &length) < 0) {
        return NULL;
    }
    if (length < 0 || length > c->size - c->pos) {
        fail(c, "record of %lld bytes passes the end", (long long)length);
        return NULL;
    }
    Py_ssize_t record_end = c->pos + (Py_ssize_t)length;
    c->pos += 1; /* record attributes: unused in v2 */
    if (read_varint(c, &timestamp_delta) < 0 || read_varint(c, &offset_delta) < 0 ||
        read_field(c, &key_start, &key_length) < 0 ||
        read_field(c, &value_start, &value_length) < 0 || read_varint(c, &header_count) < 0) {
        return NULL;
    }
    if (header_count < 0 || header_count > length) {
        fail(c, "bad header count %lld", (long long)header_count);
        return NULL;
    }
    PyObject *headers = read_headers(c, header_count);
    if (headers == NULL) {
        return NULL;
    }
    if (c->pos != record_end) {
        Py_DECREF(headers);
        fail(c, "record length %lld disagrees with its fields", (long long)length);
        return NULL;
    }
    PyObject *items[5] = {
        offset_delta == 0 ? Py_NewRef(batch->base_offset_object)
                          : add_longs(batch->base_offset, offset_delta),
        timestamp_of(batch, timestamp_delta),
        field_bytes(c, key_start, key_length),
        field_bytes(c, value_start, value_length),
        headers,
    };
    return new_named(record_type, items, 5);
}

static int header_field(PyObject *header, Py_ssize_t index, long long *out) {
    *out = PyLong_AsLongLong(PyTuple_GET_ITEM(header, index));
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* Set by configure(): decompress_body(data, header, source) -> bytes, for compressed batches. */
static PyObject *decompress_body = NULL;
static PyObject *default_source = NULL;

static PyObject *decode(PyObject *data, PyObject *header, PyObject *source) {
    long long batch_length, attributes, count, position;
    batch_fields batch;
    if (header_field(header, 0, &batch.base_offset) < 0 ||
        header_field(header, 1, &batch_length) < 0 || header_field(header, 5, &attributes) < 0 ||
        header_field(header, 7, &batch.base_timestamp) < 0 ||
        header_field(header, 8, &batch.max_timestamp) < 0 ||
        header_field(header, 12, &count) < 0 || header_field(header, 13, &position) < 0) {
        return NULL;
    }
    batch.log_append_time = (attributes & 0x08) != 0;
    batch.base_offset_object = PyTuple_GET_ITEM(header, 0);
    PyObject *body = NULL; /* the decompressed records of a compressed batch */
    if (attributes & 0x07) {
        body = PyObject_CallFunctionObjArgs(decompress_body, data, header, source, NULL);
        if (body == NULL) {
            return NULL;
        }
    }
    Py_buffer view;
    int got = PyObject_GetBuffer(body == NULL ? data : body, &view, PyBUF_SIMPLE);
    Py_XDECREF(body); /* the buffer export keeps it alive */
    if (got < 0) {
        return NULL;
    }
    cursor c = {(const unsigned char *)view.buf, view.len, 0, source, (Py_ssize_t)position};
    if (body == NULL) { /* uncompressed: the records sit in `data` after the header */
        long long start = position + HEADER_SIZE;
        long long end = position + LOG_OVERHEAD + batch_length;
        if (position < 0 || start > end || end > view.len) {
            fail(&c, "batch passes the end of the data");
            PyBuffer_Release(&view);
            return NULL;
        }
        c.data += start;
        c.size = (Py_ssize_t)(end - start);
    }
    /* Every record takes at least 7 bytes: a corrupt count allocates no more than that. */
    if (count > c.size / 7 + 1) {
        fail(&c, "records count %lld does not fit in %zd bytes", count, c.size);
        PyBuffer_Release(&view);
        return NULL;
    }
    PyObject *records = PyList_New((Py_ssize_t)count);
    if (records == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    batch.last_timestamp = Py_NewRef(PyTuple_GET_ITEM(header, 7));
    batch.last_timestamp_value = batch.base_timestamp;
    for (Py_ssize_t i = 0; i < (Py_ssize_t)count; i++) {
        PyObject *record = decode_one(&c, &batch);
        if (record == NULL) {
            goto error; /* list_dealloc skips the NULL slots left */
        }
        PyList_SET_ITEM(records, i, record);
    }
    if (c.pos != c.size) {
        fail(&c, "%zd bytes after the last record", c.size - c.pos);
        goto error;
    }
    PyBuffer_Release(&view);
    Py_XDECREF(batch.last_timestamp);
    return records;
error:
    PyBuffer_Release(&view);
    Py_XDECREF(batch.last_timestamp);
    Py_DECREF(records);
    return NULL;
}

/* decode_records(data, header, *, source="<bytes>"), called once per batch: fastcall. */
static PyObject *decode_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames) {
    if (record_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_fastrecords.configure() was not called");
        return NULL;
    }
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    PyObject *source = default_source;
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "decode_records() takes 2 positional arguments (%zd given)",
                     nargs);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, i);
        if (!PyUnicode_Check(name) || PyUnicode_CompareWithASCIIString(name, "source") != 0) {
            PyErr_Format(PyExc_TypeError, "decode_records() got an unexpected keyword %R", name);
            return NULL;
        }
        source = args[nargs + i];
    }
    if (!PyUnicode_Check(source)) {
        PyErr_SetString(PyExc_TypeError, "decode_records() source must be a str");
        return NULL;
    }
    if (!PyObject_TypeCheck(args[1], header_type)) {
        PyErr_SetString(PyExc_TypeError, "decode_records() header must be a BatchHeader");
        return NULL;
    }
    return decode(args[0], args[1], source);
}

static PyObject *configure(PyObject *module, PyObject *args) {
    PyObject *records, *headers, *error, *decompress;
    if (!PyArg_ParseTuple(args, "O!O!OO", &PyType_Type, &records, &PyType_Type, &headers,
                          &error, &decompress)) {
        return NULL;
    }
    if (!PyType_IsSubtype((PyTypeObject *)records, &PyTuple_Type) ||
        !PyType_IsSubtype((PyTypeObject *)headers, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "Record and BatchHeader must be tuple subclasses");
        return NULL;
    }
    Py_XSETREF(record_type, (PyTypeObject *)Py_NewRef(records));
    Py_XSETREF(header_type, (PyTypeObject *)Py_NewRef(headers));
    Py_XSETREF(corrupt_error, Py_NewRef(error));
    Py_XSETREF(decompress_body, Py_NewRef(decompress));
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"configure", configure, METH_VARARGS,
     "configure(Record, BatchHeader, CorruptBatchError, decompress_body): the types this "
     "module builds and the function that decompresses a compressed batch's records."},
    {"decode_records", (PyCFunction)(void (*)(void))decode_records,
     METH_FASTCALL | METH_KEYWORDS,
     "decode_records(data, header, *, source='<bytes>') -> list[Record]: the records of the "
     "batch `header` describes in `data`."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_fastrecords", "Compiled Kafka v2 batch iteration and decoding.",
    -1, methods,
};

PyMODINIT_FUNC PyInit__fastrecords(void) {
    empty_tuple = PyTuple_New(0);
    default_source = PyUnicode_FromString("<bytes>");
    if (empty_tuple == NULL || default_source == NULL || PyType_Ready(&BatchIteratorType) < 0) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL) {
        return NULL;
    }
    if (PyModule_AddObjectRef(module, "BatchIterator", (PyObject *)&BatchIteratorType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
