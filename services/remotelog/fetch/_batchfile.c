/*
 * read_batches: whole v2 record batches of a segment file, read straight into the
 * bytes of the message that carries them. See batch_file.py, whose Python
 * function is the reference: the same answers and the same errors.
 *
 * A bulk read through the cutter (batches.py) maps the file, walks the headers
 * in Python, and joins views of the mapping into each message: the kernel sets
 * up and tears down a page table entry per page, and Python runs per batch.
 * Here each message is one allocation and one pread: the batch boundaries are
 * found first (small batches: by reading the message's bytes and walking them
 * in place; big ones: by reading each 27-byte header), and the message's frame
 * (field tag, a fixed-width 4-byte length, the offsets after) is written
 * around the bytes where they lie.
 *
 * With `nowait` every read is preadv2(RWF_NOWAIT): bytes not all in the page
 * cache raise BlockingIOError at once, and the caller retries on a thread,
 * where the GIL is let go for each read.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>

#define LOG_OVERHEAD 12
#define HEADER_BYTES 61
#define PEEK_BYTES 27 /* through the last offset delta */
#define MAGIC_AT 16
#define LAST_OFFSET_DELTA_AT 23
/* Batches at least this big are found by reading their headers one by one (a
 * syscall per 64 KiB or more); smaller ones by reading the whole message first
 * and walking it, which reads up to one batch past its end again next time. */
#define HEADER_WALK_MIN (64 * 1024)
#define FRAME_BYTES 5        /* field tag and a 4-byte varint length */
#define MAX_DATA (1 << 28)   /* what a 4-byte varint holds */
#define TRAILER_ROOM 22      /* two int64 fields: a tag and ten bytes each */

typedef struct {
    long long base;
    long long last;
    long long size;
} Batch;

typedef struct {
    int fd;
    int nowait;
    long long limit;
    int error;          /* errno of a failed read, EAGAIN when it would wait */
    long long ended_at; /* >= 0: the file ended there, before `limit` */
    long long corrupt_at;
    char corrupt[96];
} Reader;

static int64_t be64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = v << 8 | p[i];
    return (int64_t)v;
}

static int32_t be32(const unsigned char *p) {
    return (int32_t)((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]);
}

/* Reads exactly `length` bytes at `offset` (the GIL let go); 0, or -1 with the reason set. */
static int read_exactly(Reader *r, char *into, long long length, long long offset) {
    long long got = 0;
    while (got < length) {
        ssize_t n;
        int failure = 0;
        struct iovec part = {into + got, (size_t)(length - got)};
        Py_BEGIN_ALLOW_THREADS
#ifdef RWF_NOWAIT
        n = preadv2(r->fd, &part, 1, (off_t)(offset + got), r->nowait ? RWF_NOWAIT : 0);
#else
        n = r->nowait ? (errno = EAGAIN, -1) : preadv(r->fd, &part, 1, (off_t)(offset + got));
#endif
        if (n < 0) failure = errno;
        Py_END_ALLOW_THREADS
        if (failure == EINTR) continue;
        if (n < 0) {
            /* No RWF_NOWAIT for this file: the caller's blocking retry reads it. */
            int unsupported = failure == EOPNOTSUPP || failure == ENOSYS;
            r->error = unsupported && r->nowait ? EAGAIN : failure;
            return -1;
        }
        if (n == 0) { /* say where the file ends, not where this read began */
            struct stat file;
            r->ended_at = fstat(r->fd, &file) == 0 ? (long long)file.st_size : offset + got;
            return -1;
        }
        got += n;
    }
    return 0;
}

/* The batch whose header starts at `p` (file position `at`); -1 if corrupt. */
static int parse(Reader *r, const unsigned char *p, long long at, Batch *batch) {
    int32_t length = be32(p + 8);
    if (length < HEADER_BYTES - LOG_OVERHEAD) {
        r->corrupt_at = at;
        snprintf(r->corrupt, sizeof r->corrupt, "batch length %d is below the minimum", length);
        return -1;
    }
    if (p[MAGIC_AT] != 2) {
        r->corrupt_at = at;
        snprintf(r->corrupt, sizeof r->corrupt, "unsupported magic %d", p[MAGIC_AT]);
        return -1;
    }
    batch->base = be64(p);
    batch->last = batch->base + be32(p + LAST_OFFSET_DELTA_AT);
    batch->size = LOG_OVERHEAD + (long long)length;
    return 0;
}

/* The header at `at`: 1 read, 0 no whole batch there (end of the bytes), -1 failed. */
static int peek(Reader *r, long long at, Batch *batch) {
    unsigned char header[PEEK_BYTES];
    if (r->limit - at < HEADER_BYTES) return 0;
    if (read_exactly(r, (char *)header, PEEK_BYTES, at) < 0) return -1;
    if (parse(r, header, at, batch) < 0) return -1;
    return at + batch->size <= r->limit;
}

static int write_varint(unsigned char *out, uint64_t value) {
    int n = 0;
    while (value > 0x7F) {
        out[n++] = (unsigned char)(value | 0x80);
        value >>= 7;
    }
    out[n++] = (unsigned char)value;
    return n;
}

static PyObject *raise_for(Reader *r) {
    if (r->corrupt_at >= 0) {
        return PyErr_Format(PyExc_ValueError, "position %lld: %s", r->corrupt_at, r->corrupt);
    }
    if (r->ended_at >= 0) {
        return PyErr_Format(PyExc_EOFError, "the stored log ended at byte %lld, before %lld",
                            r->ended_at, r->limit);
    }
    errno = r->error;
    return PyErr_SetFromErrno(PyExc_OSError); /* EAGAIN: BlockingIOError */
}

/* What the message holds so far: batches [start, end) of the file. */
typedef struct {
    long long start;
    long long end;
    long long first;
    long long last;
    int count;
    int reached_end;
} Taken;

/* Whether `batch` (at taken->end) joins the message; sets reached_end where the range stops. */
static int accepts(Taken *taken, const Batch *batch, long long max_bytes, long long until) {
    if (until >= 0 && batch->base >= until) {
        taken->reached_end = 1;
        return 0;
    }
    return taken->count == 0 || taken->end + batch->size - taken->start <= max_bytes;
}

static void take(Taken *taken, const Batch *batch, long long until) {
    if (taken->count++ == 0) taken->first = batch->base;
    taken->last = batch->last;
    taken->end += batch->size;
    if (until >= 0 && batch->last >= until - 1) taken->reached_end = 1;
}

static PyObject *read_batches(PyObject *self, PyObject *args) {
    Reader r = {.ended_at = -1, .corrupt_at = -1};
    long long position, max_bytes, from_offset, until;
    int data_field, first_field, last_field;
    if (!PyArg_ParseTuple(args, "iLLLLLiiip:read_batches", &r.fd, &position, &r.limit,
                          &max_bytes, &from_offset, &until, &data_field, &first_field,
                          &last_field, &r.nowait)) {
        return NULL;
    }
    if (position < 0 || max_bytes < 1 || data_field < 1 || data_field > 15 || first_field < 1 ||
        first_field > 15 || last_field < 1 || last_field > 15) {
        PyErr_SetString(PyExc_ValueError,
                        "read_batches: negative position, max_bytes below 1, or a field "
                        "number outside 1..15");
        return NULL;
    }
    Batch batch;
    int found;
    /* Batches that end before from_offset: the index points at or before the wanted one. */
    while ((found = peek(&r, position, &batch)) == 1 && batch.last < from_offset) {
        position += batch.size;
    }
    if (found < 0) return raise_for(&r);
    Taken taken = {.start = position, .end = position};
    /* Big batches: header by header, nothing read twice. */
    while (found == 1 && batch.size >= HEADER_WALK_MIN && !taken.reached_end) {
        if (!accepts(&taken, &batch, max_bytes, until)) break;
        take(&taken, &batch, until);
        if (taken.reached_end) break;
        found = peek(&r, taken.end, &batch);
        if (found < 0) return raise_for(&r);
    }
    int walk_in_place = found == 1 && batch.size < HEADER_WALK_MIN && !taken.reached_end &&
                        accepts(&taken, &batch, max_bytes, until);
    long long room = taken.end - taken.start;
    if (walk_in_place) {
        /* Small batches: read the message's worth (at least this batch) and walk it. */
        room = max_bytes;
        if (room < taken.end + batch.size - taken.start) room = taken.end + batch.size - taken.start;
        if (room > r.limit - taken.start) room = r.limit - taken.start;
    }
    if (taken.count == 0 && !walk_in_place) {
        return Py_BuildValue("(OLLLLO)", Py_None, 0LL, position, 0LL, 0LL,
                             taken.reached_end ? Py_True : Py_False);
    }
    if (room >= MAX_DATA) {
        return PyErr_Format(PyExc_ValueError,
                            "read_batches: %lld bytes of batches exceed what a message frames",
                            room);
    }
    PyObject *message = PyBytes_FromStringAndSize(NULL, FRAME_BYTES + room + TRAILER_ROOM);
    if (message == NULL) return NULL;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(message);
    unsigned char *data = out + FRAME_BYTES;
    if (read_exactly(&r, (char *)data, room, taken.start) < 0) {
        Py_DECREF(message);
        return raise_for(&r);
    }
    if (walk_in_place) {
        long long at = taken.end - taken.start;
        while (room - at >= HEADER_BYTES) {
            if (parse(&r, data + at, taken.start + at, &batch) < 0) {
                Py_DECREF(message);
                return raise_for(&r);
            }
            if (at + batch.size > room || !accepts(&taken, &batch, max_bytes, until)) break;
            take(&taken, &batch, until);
            at += batch.size;
            if (taken.reached_end) break;
        }
    }
    long long size = taken.end - taken.start;
    if (taken.count == 0) { /* not reached: the first batch was checked to fit */
        Py_DECREF(message);
        return Py_BuildValue("(OLLLLO)", Py_None, 0LL, position, 0LL, 0LL,
                             taken.reached_end ? Py_True : Py_False);
    }
    out[0] = (unsigned char)(data_field << 3 | 2);
    for (int i = 0; i < 4; i++) { /* fixed width, padded with continuation bits */
        out[1 + i] = (unsigned char)((size >> (7 * i)) & 0x7F) | (i < 3 ? 0x80 : 0);
    }
    unsigned char *tail = data + size;
    int trailer = 0;
    if (taken.first) {
        tail[trailer++] = (unsigned char)(first_field << 3);
        trailer += write_varint(tail + trailer, (uint64_t)taken.first);
    }
    if (taken.last) {
        tail[trailer++] = (unsigned char)(last_field << 3);
        trailer += write_varint(tail + trailer, (uint64_t)taken.last);
    }
    if (_PyBytes_Resize(&message, FRAME_BYTES + size + trailer) < 0) return NULL;
    return Py_BuildValue("(NLLLLO)", message, size, taken.end, taken.first, taken.last,
                         taken.reached_end ? Py_True : Py_False);
}

static PyMethodDef methods[] = {
    {"read_batches", read_batches, METH_VARARGS,
     "read_batches(fd, position, limit, max_bytes, from_offset, until_offset, data_field, "
     "first_field, last_field, nowait) -> (message | None, batch bytes, next_position, "
     "first_offset, last_offset, reached_end)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_batchfile", "Whole record batches read into their message.", -1,
    methods,
};

PyMODINIT_FUNC PyInit__batchfile(void) { return PyModule_Create(&module_def); }
