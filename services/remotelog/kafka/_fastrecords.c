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

static inline int64_t zigzag(uint64_t v) { return (int64_t)(v >> 1) ^ -(int64_t)(v & 1); }

/* Zig-zag varlong, at most 10 bytes, whose value fits 64 bits (as Kafka's
 * ByteUtils.readVarlong); the Python decoder applies the same limit. */
static int read_varint_slow(cursor *c, int64_t *out) {
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
            *out = zigzag(result);
            return 0;
        }
        shift += 7;
        if (shift > 63) {
            return fail(c, "varint longer than 10 bytes");
        }
    }
}

/* A varint of one or two bytes at data[pos] (a length under 8192, an offset delta
 * under 8192: the common case): the position after it, or -1 for anything else. */
static inline Py_ssize_t short_varint(const unsigned char *data, Py_ssize_t end, Py_ssize_t pos,
                                      int64_t *out) {
    if (pos >= end) {
        return -1;
    }
    uint64_t v = data[pos];
    if (v < 0x80) {
        *out = zigzag(v);
        return pos + 1;
    }
    if (pos + 1 >= end || data[pos + 1] >= 0x80) {
        return -1;
    }
    *out = zigzag((v & 0x7F) | ((uint64_t)data[pos + 1] << 7));
    return pos + 2;
}

static inline int read_varint(cursor *c, int64_t *out) {
    Py_ssize_t next = short_varint(c->data, c->size, c->pos, out);
    if (next < 0) {
        return read_varint_slow(c, out);
    }
    c->pos = next;
    return 0;
}

/* A varint-length-prefixed byte field: *start and *length, length -1 for null. */
static inline int read_field(cursor *c, Py_ssize_t *start, int64_t *length) {
    if (read_varint(c, length) < 0) {
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

/* A record's fields up to its header count, checked; its headers follow at c->pos. */
typedef struct {
    int64_t length, timestamp_delta, offset_delta, header_count, key_length, value_length;
    Py_ssize_t key_start, value_start, record_end;
} record_fields;

static inline int parse_record(cursor *c, record_fields *r) {
    if (read_varint(c, &r->length) < 0) {
        return -1;
    }
    if (r->length < 0 || r->length > c->size - c->pos) {
        return fail(c, "record of %lld bytes passes the end", (long long)r->length);
    }
    r->record_end = c->pos + (Py_ssize_t)r->length;
    c->pos += 1; /* record attributes: unused in v2 */
    if (read_varint(c, &r->timestamp_delta) < 0 || read_varint(c, &r->offset_delta) < 0 ||
        read_field(c, &r->key_start, &r->key_length) < 0 ||
        read_field(c, &r->value_start, &r->value_length) < 0 ||
        read_varint(c, &r->header_count) < 0) {
        return -1;
    }
    if (r->header_count < 0 || r->header_count > r->length) {
        return fail(c, "bad header count %lld", (long long)r->header_count);
    }
    return 0;
}

/* A length-prefixed field inside [pos, end) as short_varint reads it. */
static inline Py_ssize_t short_field(const unsigned char *data, Py_ssize_t end, Py_ssize_t pos,
                                     Py_ssize_t *start, int64_t *length) {
    pos = short_varint(data, end, pos, length);
    if (pos < 0) {
        return -1;
    }
    *start = pos;
    if (*length < 0) {
        *length = -1;
        return pos;
    }
    return *length > end - pos ? -1 : pos + (Py_ssize_t)*length;
}

/* parse_record's common case, its position in a register rather than the cursor's
 * in memory: every field's position waits on the field before it (about 1 ns of a
 * record's 44). 0 and the cursor moved when the record parsed; -1, nothing moved,
 * when anything is unusual (a long varint, a field past the record's end):
 * parse_record then parses it again and says what is wrong. */
static inline int parse_record_fast(cursor *c, record_fields *r) {
    const unsigned char *data = c->data;
    Py_ssize_t pos = short_varint(data, c->size, c->pos, &r->length);
    if (pos < 0 || r->length < 0 || r->length > c->size - pos) {
        return -1;
    }
    Py_ssize_t end = pos + (Py_ssize_t)r->length;
    r->record_end = end;
    pos += 1; /* record attributes: unused in v2 */
    pos = short_varint(data, end, pos, &r->timestamp_delta);
    pos = pos < 0 ? -1 : short_varint(data, end, pos, &r->offset_delta);
    pos = pos < 0 ? -1 : short_field(data, end, pos, &r->key_start, &r->key_length);
    pos = pos < 0 ? -1 : short_field(data, end, pos, &r->value_start, &r->value_length);
    pos = pos < 0 ? -1 : short_varint(data, end, pos, &r->header_count);
    if (pos < 0 || r->header_count < 0 || r->header_count > r->length) {
        return -1;
    }
    c->pos = pos;
    return 0;
}

static int check_record_end(cursor *c, record_fields *r) {
    if (c->pos != r->record_end) {
        return fail(c, "record length %lld disagrees with its fields", (long long)r->length);
    }
    return 0;
}

static PyObject *decode_one(cursor *c, batch_fields *batch) {
    record_fields r;
    if (parse_record(c, &r) < 0) {
        return NULL;
    }
    PyObject *headers = read_headers(c, r.header_count);
    if (headers == NULL) {
        return NULL;
    }
    if (check_record_end(c, &r) < 0) {
        Py_DECREF(headers);
        return NULL;
    }
    PyObject *items[5] = {
        r.offset_delta == 0 ? Py_NewRef(batch->base_offset_object)
                            : add_longs(batch->base_offset, r.offset_delta),
        timestamp_of(batch, r.timestamp_delta),
        field_bytes(c, r.key_start, r.key_length),
        field_bytes(c, r.value_start, r.value_length),
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

/* One batch's records, opened for decoding: decompressed when compressed, its
 * buffer held, the cursor on its first record and its count checked. */
typedef struct {
    Py_buffer view;
    cursor c;
    long long count;
} opened_batch;

static int open_batch(PyObject *data, PyObject *header, PyObject *source, batch_fields *batch,
                      opened_batch *b) {
    long long batch_length, attributes, position;
    if (header_field(header, 0, &batch->base_offset) < 0 ||
        header_field(header, 1, &batch_length) < 0 || header_field(header, 5, &attributes) < 0 ||
        header_field(header, 7, &batch->base_timestamp) < 0 ||
        header_field(header, 8, &batch->max_timestamp) < 0 ||
        header_field(header, 12, &b->count) < 0 || header_field(header, 13, &position) < 0) {
        return -1;
    }
    batch->log_append_time = (attributes & 0x08) != 0;
    batch->base_offset_object = PyTuple_GET_ITEM(header, 0);
    batch->last_timestamp = NULL;
    PyObject *body = NULL; /* the decompressed records of a compressed batch */
    if (attributes & 0x07) {
        body = PyObject_CallFunctionObjArgs(decompress_body, data, header, source, NULL);
        if (body == NULL) {
            return -1;
        }
    }
    int got = PyObject_GetBuffer(body == NULL ? data : body, &b->view, PyBUF_SIMPLE);
    Py_XDECREF(body); /* the buffer export keeps it alive */
    if (got < 0) {
        return -1;
    }
    b->c = (cursor){(const unsigned char *)b->view.buf, b->view.len, 0, source,
                    (Py_ssize_t)position};
    if (body == NULL) { /* uncompressed: the records sit in `data` after the header */
        long long start = position + HEADER_SIZE;
        long long end = position + LOG_OVERHEAD + batch_length;
        if (position < 0 || start > end || end > b->view.len) {
            fail(&b->c, "batch passes the end of the data");
            PyBuffer_Release(&b->view);
            return -1;
        }
        b->c.data += start;
        b->c.size = (Py_ssize_t)(end - start);
    }
    /* Every record takes at least 7 bytes: a corrupt count allocates no more than that. */
    if (b->count > b->c.size / 7 + 1) {
        fail(&b->c, "records count %lld does not fit in %zd bytes", b->count, b->c.size);
        PyBuffer_Release(&b->view);
        return -1;
    }
    return 0;
}

/* After the last record: nothing may follow it. */
static int check_batch_end(opened_batch *b) {
    if (b->c.pos != b->c.size) {
        return fail(&b->c, "%zd bytes after the last record", b->c.size - b->c.pos);
    }
    return 0;
}

static PyObject *decode(PyObject *data, PyObject *header, PyObject *source) {
    batch_fields batch;
    opened_batch b;
    if (open_batch(data, header, source, &batch, &b) < 0) {
        return NULL;
    }
    PyObject *records = PyList_New((Py_ssize_t)b.count);
    if (records == NULL) {
        PyBuffer_Release(&b.view);
        return NULL;
    }
    batch.last_timestamp = Py_NewRef(PyTuple_GET_ITEM(header, 7));
    batch.last_timestamp_value = batch.base_timestamp;
    for (Py_ssize_t i = 0; i < (Py_ssize_t)b.count; i++) {
        PyObject *record = decode_one(&b.c, &batch);
        if (record == NULL) {
            goto error; /* list_dealloc skips the NULL slots left */
        }
        PyList_SET_ITEM(records, i, record);
    }
    if (check_batch_end(&b) < 0) {
        goto error;
    }
    PyBuffer_Release(&b.view);
    Py_XDECREF(batch.last_timestamp);
    return records;
error:
    PyBuffer_Release(&b.view);
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

/* ------------------------------------------------------------------------ */
/* Columnar decode: decode_columns(data, headers, start_offset, end_offset,
 * include_headers, source), the records of a fetch's batches as Arrow buffers
 * (native byte order, as Arrow's): no Python object per record. columns.py
 * holds the reference and turns the tuple into RecordColumns. */

/* A buffer growing inside a bytes object, handed over without a copy at the end. */
typedef struct {
    PyObject *bytes;
    char *data;
    Py_ssize_t len, cap;
} growbuf;

static int grow(growbuf *b, Py_ssize_t extra) {
    Py_ssize_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra) {
        cap *= 2;
    }
    if (b->bytes == NULL) {
        b->bytes = PyBytes_FromStringAndSize(NULL, cap);
    } else {
        _PyBytes_Resize(&b->bytes, cap); /* NULL, the old released, when it fails */
    }
    if (b->bytes == NULL) {
        return -1;
    }
    b->data = PyBytes_AS_STRING(b->bytes);
    b->cap = cap;
    return 0;
}

static inline int reserve(growbuf *b, Py_ssize_t extra) {
    return b->len + extra <= b->cap ? 0 : grow(b, extra);
}

static inline int put(growbuf *b, const void *source, Py_ssize_t n) {
    if (reserve(b, n) < 0) {
        return -1;
    }
    memcpy(b->data + b->len, source, (size_t)n);
    b->len += n;
    return 0;
}

/* The bytes, cut to what was put; the buffer is empty after. */
static PyObject *growbuf_bytes(growbuf *b) {
    if (b->bytes == NULL) {
        return PyBytes_FromStringAndSize(NULL, 0);
    }
    PyObject *bytes = b->bytes;
    Py_ssize_t len = b->len;
    *b = (growbuf){NULL, NULL, 0, 0};
    return _PyBytes_Resize(&bytes, len) < 0 ? NULL : bytes;
}

/* An Arrow variable-size binary column: validity bitmap, int32 offsets, data. */
typedef struct {
    growbuf validity, offsets, data;
    Py_ssize_t count, nulls;
} binary_column;

/* A validity bit for the `count`th slot: the bitmap grows a zeroed byte per eight. */
static inline int put_valid(growbuf *validity, Py_ssize_t count, int valid) {
    if (count % 8 == 0) {
        unsigned char zero = 0;
        if (put(validity, &zero, 1) < 0) {
            return -1;
        }
    }
    if (valid) {
        validity->data[count / 8] |= (char)(1 << (count % 8));
    }
    return 0;
}

static inline int put_offset(growbuf *offsets, Py_ssize_t end) {
    if (end > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError,
                        "a column of one fetch passes Arrow's 2 GiB binary limit");
        return -1;
    }
    int32_t value = (int32_t)end;
    return put(offsets, &value, sizeof value);
}

/* A null when length < 0. Always inlined: left to the compiler it stayed a call per
 * column per record, about 2 ns of a record's 44 (bench/README.md). */
static inline __attribute__((always_inline)) int
binary_append(binary_column *col, const char *bytes, Py_ssize_t length) {
    if (put_valid(&col->validity, col->count, length >= 0) < 0) {
        return -1;
    }
    if (length < 0) {
        col->nulls++;
    } else if (put(&col->data, bytes, length) < 0) {
        return -1;
    }
    col->count++;
    return put_offset(&col->offsets, col->data.len);
}

static PyObject *optional_bytes(growbuf *b, int present) {
    return present ? growbuf_bytes(b) : Py_NewRef(Py_None);
}

/* A tuple of `items`, which it steals; NULL (all released) if any is NULL. */
static PyObject *tuple_of(PyObject **items, Py_ssize_t n) {
    PyObject *tuple = PyTuple_New(n);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (items[i] == NULL || tuple == NULL) {
            for (Py_ssize_t j = i; j < n; j++) {
                Py_XDECREF(items[j]);
            }
            Py_XDECREF(tuple);
            return NULL;
        }
        PyTuple_SET_ITEM(tuple, i, items[i]);
    }
    return tuple;
}

/* (validity or None when nothing is null, offsets, data) */
static PyObject *binary_finish(binary_column *col) {
    PyObject *items[3] = {
        optional_bytes(&col->validity, col->nulls > 0),
        growbuf_bytes(&col->offsets),
        growbuf_bytes(&col->data),
    };
    return tuple_of(items, 3);
}

typedef struct {
    Py_ssize_t count;
    growbuf offset, timestamp, timestamp_type; /* int64, int64 microseconds, int32 */
    binary_column key, value;
    int include_headers;
    /* headers: a list per record (null without headers) of (string key, binary value) */
    growbuf header_validity, header_offsets;
    Py_ssize_t header_nulls;
    binary_column header_key, header_value;
} columns;

static void binary_free(binary_column *col) {
    Py_XDECREF(col->validity.bytes);
    Py_XDECREF(col->offsets.bytes);
    Py_XDECREF(col->data.bytes);
}

static void columns_free(columns *cols) {
    Py_XDECREF(cols->offset.bytes);
    Py_XDECREF(cols->timestamp.bytes);
    Py_XDECREF(cols->timestamp_type.bytes);
    Py_XDECREF(cols->header_validity.bytes);
    Py_XDECREF(cols->header_offsets.bytes);
    binary_free(&cols->key);
    binary_free(&cols->value);
    binary_free(&cols->header_key);
    binary_free(&cols->header_value);
}

/* Room for a batch of `count` records in `size` bytes, so that its records are put
 * without growing a buffer: keys and values take at most the batch's bytes. */
static int columns_reserve(columns *cols, Py_ssize_t count, Py_ssize_t size) {
    Py_ssize_t bits = count / 8 + 1;
    return (reserve(&cols->offset, 8 * count) < 0 || reserve(&cols->timestamp, 8 * count) < 0 ||
            reserve(&cols->timestamp_type, 4 * count) < 0 ||
            reserve(&cols->key.validity, bits) < 0 || reserve(&cols->key.offsets, 4 * count) < 0 ||
            reserve(&cols->key.data, size) < 0 || reserve(&cols->value.validity, bits) < 0 ||
            reserve(&cols->value.offsets, 4 * count) < 0 || reserve(&cols->value.data, size) < 0)
               ? -1
               : 0;
}

static int columns_init(columns *cols, int include_headers) {
    memset(cols, 0, sizeof *cols);
    cols->include_headers = include_headers;
    return (put_offset(&cols->key.offsets, 0) < 0 || put_offset(&cols->value.offsets, 0) < 0 ||
            put_offset(&cols->header_offsets, 0) < 0 ||
            put_offset(&cols->header_key.offsets, 0) < 0 ||
            put_offset(&cols->header_value.offsets, 0) < 0)
               ? -1
               : 0;
}

/* A header key as UTF-8; keys that are not valid UTF-8 get U+FFFD, as in
 * decode_records. */
static int header_key_append(binary_column *col, const char *bytes, Py_ssize_t length) {
    for (Py_ssize_t i = 0; i < length; i++) {
        if ((unsigned char)bytes[i] >= 0x80) {
            PyObject *key = PyUnicode_DecodeUTF8(bytes, length, "replace");
            if (key == NULL) {
                return -1;
            }
            Py_ssize_t size;
            const char *utf8 = PyUnicode_AsUTF8AndSize(key, &size);
            int result = utf8 == NULL ? -1 : binary_append(col, utf8, size);
            Py_DECREF(key);
            return result;
        }
    }
    return binary_append(col, bytes, length);
}

/* Parses a record's headers, appending them when `keep`. */
static int headers_append(cursor *c, record_fields *r, columns *cols, int keep) {
    for (int64_t i = 0; i < r->header_count; i++) {
        Py_ssize_t key_start, value_start;
        int64_t key_length, value_length;
        if (read_field(c, &key_start, &key_length) < 0) {
            return -1;
        }
        if (key_length < 0) {
            return fail(c, "null header key");
        }
        if (read_field(c, &value_start, &value_length) < 0) {
            return -1;
        }
        if (keep && (header_key_append(&cols->header_key, (const char *)c->data + key_start,
                                       (Py_ssize_t)key_length) < 0 ||
                     binary_append(&cols->header_value, (const char *)c->data + value_start,
                                   (Py_ssize_t)value_length) < 0)) {
            return -1;
        }
    }
    if (!keep) {
        return 0;
    }
    if (put_valid(&cols->header_validity, cols->count, r->header_count > 0) < 0) {
        return -1;
    }
    cols->header_nulls += r->header_count == 0;
    return put_offset(&cols->header_offsets, cols->header_key.count);
}

static int record_append(cursor *c, record_fields *r, columns *cols, int64_t offset,
                         int64_t timestamp_us, int32_t timestamp_type) {
    const char *data = (const char *)c->data;
    if (put(&cols->offset, &offset, sizeof offset) < 0 ||
        put(&cols->timestamp, &timestamp_us, sizeof timestamp_us) < 0 ||
        put(&cols->timestamp_type, &timestamp_type, sizeof timestamp_type) < 0 ||
        binary_append(&cols->key, data + r->key_start, (Py_ssize_t)r->key_length) < 0 ||
        binary_append(&cols->value, data + r->value_start, (Py_ssize_t)r->value_length) < 0) {
        return -1;
    }
    return 0;
}

/* Where a record stands against [start, end): -1 before, 0 inside, 1 at or after end. */
typedef struct {
    int64_t start, end;
    int has_end;
} offset_bounds;

static int place(offset_bounds *bounds, int64_t offset, int overflow, int64_t delta) {
    if (overflow) { /* past the int64 range: above everything when delta > 0 */
        return delta < 0 ? -1 : (bounds->has_end ? 1 : 0);
    }
    if (offset < bounds->start) {
        return -1;
    }
    return bounds->has_end && offset >= bounds->end ? 1 : 0;
}

/* Appends the batch's records inside the bounds; 1 when a record reached the end. */
static int batch_columns(PyObject *data, PyObject *header, PyObject *source,
                         offset_bounds *bounds, columns *cols) {
    batch_fields batch;
    opened_batch b;
    if (open_batch(data, header, source, &batch, &b) < 0) {
        return -1;
    }
    if (columns_reserve(cols, (Py_ssize_t)b.count, b.c.size) < 0) {
        PyBuffer_Release(&b.view);
        return -1;
    }
    int32_t timestamp_type = batch.log_append_time ? 1 : 0;
    int reached_end = 0;
    const char *out_of_range = NULL; /* the first kept record that fits no int64 */
    for (long long i = 0; i < b.count; i++) {
        record_fields r;
        if (parse_record_fast(&b.c, &r) < 0 && parse_record(&b.c, &r) < 0) {
            goto error;
        }
        int64_t offset, timestamp = batch.max_timestamp, timestamp_us;
        int overflow = __builtin_add_overflow(batch.base_offset, r.offset_delta, &offset);
        int keep = !reached_end && place(bounds, offset, overflow, r.offset_delta) == 0;
        reached_end = reached_end || place(bounds, offset, overflow, r.offset_delta) == 1;
        keep = keep && out_of_range == NULL;
        if (keep && overflow) {
            out_of_range = "record offset leaves 64 bits";
            keep = 0;
        }
        if (keep && ((!batch.log_append_time &&
                      __builtin_add_overflow(batch.base_timestamp, r.timestamp_delta,
                                             &timestamp)) ||
                     __builtin_mul_overflow(timestamp, (int64_t)1000, &timestamp_us))) {
            out_of_range = "record timestamp leaves 64 bits in microseconds";
            keep = 0;
        }
        if (headers_append(&b.c, &r, cols, keep && cols->include_headers) < 0 ||
            check_record_end(&b.c, &r) < 0) {
            goto error;
        }
        if (keep) {
            if (record_append(&b.c, &r, cols, offset, timestamp_us, timestamp_type) < 0) {
                goto error;
            }
            cols->count++;
        }
    }
    if (check_batch_end(&b) < 0) {
        goto error;
    }
    if (out_of_range != NULL) {
        fail(&b.c, "%s", out_of_range);
        goto error;
    }
    PyBuffer_Release(&b.view);
    return reached_end;
error:
    PyBuffer_Release(&b.view);
    return -1;
}

/* (count, offset, timestamp, timestamp_type, key, value, headers or None) */
static PyObject *columns_finish(columns *cols) {
    PyObject *headers = Py_NewRef(Py_None);
    if (cols->include_headers) {
        Py_DECREF(headers);
        PyObject *items[4] = {
            optional_bytes(&cols->header_validity, cols->header_nulls > 0),
            growbuf_bytes(&cols->header_offsets),
            binary_finish(&cols->header_key),
            binary_finish(&cols->header_value),
        };
        headers = tuple_of(items, 4);
    }
    PyObject *items[7] = {
        PyLong_FromSsize_t(cols->count),
        growbuf_bytes(&cols->offset),
        growbuf_bytes(&cols->timestamp),
        growbuf_bytes(&cols->timestamp_type),
        binary_finish(&cols->key),
        binary_finish(&cols->value),
        headers,
    };
    return tuple_of(items, 7);
}

/* Room for every batch of the chunk before the first is decoded: growing a buffer
 * batch by batch copied each column several times over (realloc). Sizes are the
 * batches' stored sizes, exact when uncompressed; a compressed batch that expands
 * grows the buffers in columns_reserve. Counts are capped as open_batch caps them. */
static int columns_reserve_all(columns *cols, PyObject *headers) {
    Py_ssize_t count = 0, size = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(headers); i++) {
        PyObject *header = PyList_GET_ITEM(headers, i);
        long long records, batch_length;
        if (!PyObject_TypeCheck(header, header_type)) {
            continue; /* reported when the loop reaches it */
        }
        if (header_field(header, 1, &batch_length) < 0 || header_field(header, 12, &records) < 0) {
            return -1;
        }
        batch_length = batch_length < 0 ? 0 : batch_length;
        records = records < 0 ? 0 : records;
        count += (Py_ssize_t)(records < batch_length / 7 + 1 ? records : batch_length / 7 + 1);
        size += (Py_ssize_t)batch_length;
    }
    return columns_reserve(cols, count, size);
}

static PyObject *decode_columns(PyObject *module, PyObject *args) {
    PyObject *data, *headers, *end, *source;
    long long start;
    int include_headers;
    if (record_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_fastrecords.configure() was not called");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "OO!LOpU", &data, &PyList_Type, &headers, &start, &end,
                          &include_headers, &source)) {
        return NULL;
    }
    offset_bounds bounds = {start, 0, end != Py_None};
    if (bounds.has_end) {
        bounds.end = PyLong_AsLongLong(end);
        if (bounds.end == -1 && PyErr_Occurred()) {
            return NULL;
        }
    }
    columns cols;
    PyObject *result = NULL;
    if (columns_init(&cols, include_headers) < 0 || columns_reserve_all(&cols, headers) < 0) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(headers); i++) {
        PyObject *header = Py_NewRef(PyList_GET_ITEM(headers, i));
        int got = -1;
        if (!PyObject_TypeCheck(header, header_type)) {
            PyErr_SetString(PyExc_TypeError, "decode_columns() headers must be BatchHeaders");
        } else {
            got = batch_columns(data, header, source, &bounds, &cols);
        }
        Py_DECREF(header);
        if (got < 0) {
            goto done;
        }
        if (got == 1) {
            break;
        }
    }
    result = columns_finish(&cols);
done:
    columns_free(&cols);
    return result;
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
    {"decode_columns", decode_columns, METH_VARARGS,
     "decode_columns(data, headers, start_offset, end_offset, include_headers, source) -> "
     "tuple: the records of the batches `headers` describe in `data`, in [start_offset, "
     "end_offset), as Arrow buffers (remotelog.kafka.columns.RecordColumns)."},
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
