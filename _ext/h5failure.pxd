# Capture of libhdf5's error stack right after a failed call, shared by the
# kernels (slicetools, rowtools, vdstools): the first failure's HDF5 function, the loop
# row it happened on, and the outermost and innermost entries of the stack
# (H5Ewalk2, H5Epublic.h), so the Python exception can say what libhdf5 said.
# Runs without the GIL; the message is made into a str afterwards.

from libc.stdio cimport snprintf

from hdf5 cimport H5E_DEFAULT, H5E_WALK_DOWNWARD, H5E_error2_t, herr_t
from xarray_vhdf5._ext._hdf5api cimport H5

cdef enum:
    MSG_LEN = 512   # captured HDF5 error messages


cdef struct Failure:
    int failed              # 0: success
    const char *func        # the HDF5 function (or kernel check) that failed
    Py_ssize_t row          # slice pair / mapping index; -1 outside a loop
    char api_msg[MSG_LEN]   # outermost entry of the HDF5 error stack
    char root_msg[MSG_LEN]  # innermost entry (the root cause)


cdef inline herr_t _walk_cb(unsigned n, const H5E_error2_t *err, void *data) noexcept nogil:
    cdef Failure *fail = <Failure *>data
    cdef const char *fn = b"?"
    cdef const char *desc = b""
    if err.func_name != NULL:
        fn = err.func_name
    if err.desc != NULL:
        desc = err.desc
    if n == 0:
        snprintf(fail.api_msg, MSG_LEN, b"%s: %s", fn, desc)
    else:
        snprintf(fail.root_msg, MSG_LEN, b"%s: %s", fn, desc)
    return 0


cdef inline void record_failure(Failure *fail, const char *func, Py_ssize_t row) noexcept nogil:
    """Record a failed HDF5 call; must run right after it (any later API call
    clears the thread's error stack). The first failure is kept."""
    if fail.failed:
        return
    fail.failed = 1
    fail.func = func
    fail.row = row
    fail.api_msg[0] = 0
    fail.root_msg[0] = 0
    H5.H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, _walk_cb, fail)


cdef inline str failure_detail(Failure *fail):
    """What libhdf5's error stack said, as text."""
    api = fail.api_msg.decode("utf-8", "replace")
    root = fail.root_msg.decode("utf-8", "replace")
    if api and root:
        return f"{api} ({root})"
    return api or root or "no HDF5 error stack available"
