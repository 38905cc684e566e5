/*
 * pread_cached(fd, length, offset) -> bytes | None: the bytes if the kernel has
 * them all in its page cache, else None, without ever waiting for a disk.
 *
 * Linux's preadv2(RWF_NOWAIT) copies what is cached and refuses (EAGAIN) what
 * would block, so a Fetch of recently written or recently read segment bytes
 * can be read on the event loop instead of paying a thread-pool hop (about
 * 0.2 ms, several times the copy of a cached MiB). The bytes object is
 * allocated once and read into: one copy, as os.pread. Python's os.preadv
 * needs a writable buffer and so a second copy into bytes; pagecache.py falls
 * back to that when this module is not built.
 *
 * start_writeback(fd, offset, length): ask the kernel to start writing those
 * dirty bytes to disk now, without waiting (sync_file_range with
 * SYNC_FILE_RANGE_WRITE). An upload does this for each piece it writes, so the
 * disk works while the rest of the segment arrives and the fsync that
 * publishes the object waits for the last piece, not for the whole segment.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/uio.h>

static PyObject *pread_cached(PyObject *self, PyObject *args) {
    int fd;
    Py_ssize_t length;
    long long offset;
    if (!PyArg_ParseTuple(args, "inL:pread_cached", &fd, &length, &offset)) {
        return NULL;
    }
    if (length < 0 || offset < 0) {
        PyErr_SetString(PyExc_ValueError, "pread_cached: negative length or offset");
        return NULL;
    }
#ifdef RWF_NOWAIT
    PyObject *data = PyBytes_FromStringAndSize(NULL, length);
    if (data == NULL) {
        return NULL;
    }
    Py_ssize_t got = 0;
    while (got < length) {
        struct iovec part = {PyBytes_AS_STRING(data) + got, (size_t)(length - got)};
        ssize_t n = preadv2(fd, &part, 1, (off_t)(offset + got), RWF_NOWAIT);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            Py_DECREF(data);
            if (errno == EAGAIN || errno == EOPNOTSUPP || errno == ENOSYS) {
                Py_RETURN_NONE; /* not all cached, or no RWF_NOWAIT here: read it blocking */
            }
            return PyErr_SetFromErrno(PyExc_OSError);
        }
        if (n == 0) {
            break; /* end of file: fewer bytes, as pread gives */
        }
        got += n;
    }
    if (got < length && _PyBytes_Resize(&data, got) < 0) {
        return NULL;
    }
    return data;
#else
    (void)fd;
    Py_RETURN_NONE;
#endif
}

static PyObject *start_writeback(PyObject *self, PyObject *args) {
    int fd;
    long long offset, length;
    if (!PyArg_ParseTuple(args, "iLL:start_writeback", &fd, &offset, &length)) {
        return NULL;
    }
    if (length < 0 || offset < 0) {
        PyErr_SetString(PyExc_ValueError, "start_writeback: negative length or offset");
        return NULL;
    }
#ifdef SYNC_FILE_RANGE_WRITE
    int failed;
    Py_BEGIN_ALLOW_THREADS
    failed = sync_file_range(fd, (off_t)offset, (off_t)length, SYNC_FILE_RANGE_WRITE);
    Py_END_ALLOW_THREADS
    if (failed) {
        return PyErr_SetFromErrno(PyExc_OSError);
    }
#else
    (void)fd; /* no early writeback here: the fsync that publishes writes it all */
#endif
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"pread_cached", pread_cached, METH_VARARGS,
     "pread_cached(fd, length, offset) -> bytes | None: the bytes if all are page-cached."},
    {"start_writeback", start_writeback, METH_VARARGS,
     "start_writeback(fd, offset, length): start writing those dirty bytes to disk, no wait."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_pagecache", "Page-cache reads that never wait for a disk; writeback started early.", -1, methods,
};

PyMODINIT_FUNC PyInit__pagecache(void) { return PyModule_Create(&module_def); }
