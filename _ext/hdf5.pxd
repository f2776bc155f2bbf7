# Hand-written declarations of the few libhdf5 types, constants and function
# signatures the kernels use.  No HDF5 header is included: h5py wheels bundle
# libhdf5 without headers, so the kernels resolve the functions at import time
# with dlsym() on the h5py extension's handle (see _hdf5api.pyx) and call them
# through the function-pointer types below.
#
# ABI assumptions (HDF5 >= 1.10, checked against the HDF5 public headers and
# h5py; re-check them when HDF5 changes its public types):
#   hid_t    int64_t                 (H5Ipublic.h, 64-bit since 1.10)
#   hsize_t  64-bit unsigned integer (H5public.h: `unsigned long long` up to
#            1.14, `uint64_t` in 2.x; the same size and representation, so it
#            is declared as uint64_t to match numpy's uint64 arrays exactly)
#   hssize_t int64_t,  herr_t / htri_t  int,  H5S_seloper_t  a C enum (int),
#   ssize_t  (H5Pget_virtual_*name return type) == Py_ssize_t on POSIX
#   the constants in the enum below (tests/test_hdf5_constants.py)
#   H5E_error2_t  {hid_t cls_id, maj_num, min_num; unsigned line;
#                  const char *func_name, *file_name, *desc}  (H5Epublic.h)
#
# The unsigned-underflow caveat: every start / count / stride the kernels take
# is an hsize_t (unsigned 64-bit).  A negative Python or numpy integer becomes
# a huge positive value once cast, which neither the kernels nor (for numpy
# sources) anything downstream would detect.  The Python wrappers therefore
# reject negative values and check every bound *before* calling a kernel; the
# kernels themselves do no bounds checking at all.

from libc.stdint cimport int64_t, uint64_t
from libc.stddef cimport size_t

ctypedef int64_t hid_t
ctypedef uint64_t hsize_t
ctypedef int64_t hssize_t
ctypedef int herr_t
ctypedef int htri_t
ctypedef int H5S_seloper_t

# Every constant the kernels use, declared here only; tests/test_hdf5_constants.py
# checks each value against h5py (or, for the few h5py does not expose, against
# libhdf5's behaviour).
cdef enum:
    H5S_SELECT_SET = 0       # H5S_seloper_t
    H5S_ALL = 0
    H5P_DEFAULT = 0
    H5E_DEFAULT = 0
    H5E_WALK_DOWNWARD = 1    # H5E_direction_t
    H5S_MAX_RANK = 32
    H5S_SCALAR = 0           # H5S_class_t
    H5S_SIMPLE = 1
    H5T_INTEGER = 0          # H5T_class_t
    H5T_STRING = 3
    H5T_COMPOUND = 6
    H5T_REFERENCE = 7
    H5T_VLEN = 9
    H5T_ARRAY = 10
    H5_INDEX_NAME = 0        # H5_index_t
    H5_ITER_INC = 0          # H5_iter_order_t

ctypedef struct H5E_error2_t:
    hid_t cls_id
    hid_t maj_num
    hid_t min_num
    unsigned line
    const char *func_name
    const char *file_name
    const char *desc

ctypedef herr_t (*H5E_walk2_t)(unsigned n, const H5E_error2_t *err_desc,
                               void *client_data) noexcept nogil

# Function-pointer types: one per libhdf5 function resolved at import.
ctypedef hid_t (*H5Dget_space_ft)(hid_t dset_id) noexcept nogil
ctypedef hid_t (*H5Dget_create_plist_ft)(hid_t dset_id) noexcept nogil
ctypedef herr_t (*H5Dread_ft)(hid_t dset_id, hid_t mem_type_id, hid_t mem_space_id,
                              hid_t file_space_id, hid_t dxpl_id,
                              void *buf) noexcept nogil
ctypedef herr_t (*H5Dwrite_ft)(hid_t dset_id, hid_t mem_type_id, hid_t mem_space_id,
                               hid_t file_space_id, hid_t dxpl_id,
                               const void *buf) noexcept nogil
ctypedef hid_t (*H5Screate_simple_ft)(int rank, const hsize_t *dims,
                                      const hsize_t *maxdims) noexcept nogil
ctypedef herr_t (*H5Sclose_ft)(hid_t space_id) noexcept nogil
ctypedef herr_t (*H5Sselect_hyperslab_ft)(hid_t space_id, H5S_seloper_t op,
                                          const hsize_t *start, const hsize_t *stride,
                                          const hsize_t *count,
                                          const hsize_t *block) noexcept nogil
ctypedef herr_t (*H5Sget_select_bounds_ft)(hid_t space_id, hsize_t *start,
                                           hsize_t *end) noexcept nogil
ctypedef hssize_t (*H5Sget_select_npoints_ft)(hid_t space_id) noexcept nogil
ctypedef int (*H5Sget_simple_extent_ndims_ft)(hid_t space_id) noexcept nogil
ctypedef herr_t (*H5Pclose_ft)(hid_t plist_id) noexcept nogil
ctypedef herr_t (*H5Pget_virtual_count_ft)(hid_t dcpl_id, size_t *count) noexcept nogil
ctypedef hid_t (*H5Pget_virtual_vspace_ft)(hid_t dcpl_id, size_t index) noexcept nogil
ctypedef hid_t (*H5Pget_virtual_srcspace_ft)(hid_t dcpl_id, size_t index) noexcept nogil
ctypedef Py_ssize_t (*H5Pget_virtual_dsetname_ft)(hid_t dcpl_id, size_t index, char *name,
                                                size_t size) noexcept nogil
ctypedef Py_ssize_t (*H5Pget_virtual_filename_ft)(hid_t dcpl_id, size_t index, char *name,
                                                size_t size) noexcept nogil
ctypedef herr_t (*H5Ewalk2_ft)(hid_t err_stack, int direction, H5E_walk2_t func,
                               void *client_data) noexcept nogil
ctypedef herr_t (*H5Pset_virtual_ft)(hid_t dcpl_id, hid_t vspace_id, const char *src_file_name,
                                     const char *src_dset_name, hid_t src_space_id) noexcept nogil
# Creating a virtual dataset in one call (vdstools.create_virtual_dataset).
ctypedef hid_t (*H5Pcopy_ft)(hid_t plist_id) noexcept nogil
ctypedef herr_t (*H5Sselect_all_ft)(hid_t space_id) noexcept nogil
ctypedef hid_t (*H5Dcreate2_ft)(hid_t loc_id, const char *name, hid_t type_id, hid_t space_id,
                                hid_t lcpl_id, hid_t dcpl_id, hid_t dapl_id) noexcept nogil
# Attributes (attrtools.pyx).
ctypedef htri_t (*H5Aexists_ft)(hid_t obj_id, const char *attr_name) noexcept nogil
ctypedef hid_t (*H5Aopen_ft)(hid_t obj_id, const char *attr_name, hid_t aapl_id) noexcept nogil
ctypedef hid_t (*H5Acreate2_ft)(hid_t loc_id, const char *attr_name, hid_t type_id, hid_t space_id,
                                hid_t acpl_id, hid_t aapl_id) noexcept nogil
ctypedef herr_t (*H5Adelete_ft)(hid_t loc_id, const char *attr_name) noexcept nogil
ctypedef herr_t (*H5Aclose_ft)(hid_t attr_id) noexcept nogil
ctypedef herr_t (*H5Awrite_ft)(hid_t attr_id, hid_t mem_type_id, const void *buf) noexcept nogil
ctypedef herr_t (*H5Aread_ft)(hid_t attr_id, hid_t mem_type_id, void *buf) noexcept nogil
ctypedef hid_t (*H5Aget_type_ft)(hid_t attr_id) noexcept nogil
ctypedef hid_t (*H5Aget_space_ft)(hid_t attr_id) noexcept nogil
ctypedef htri_t (*H5Tequal_ft)(hid_t type1_id, hid_t type2_id) noexcept nogil
ctypedef herr_t (*H5Tclose_ft)(hid_t type_id) noexcept nogil
ctypedef int (*H5Tget_class_ft)(hid_t type_id) noexcept nogil
ctypedef size_t (*H5Tget_size_ft)(hid_t type_id) noexcept nogil
ctypedef hid_t (*H5Tget_super_ft)(hid_t type_id) noexcept nogil
ctypedef int (*H5Tget_nmembers_ft)(hid_t type_id) noexcept nogil
ctypedef hid_t (*H5Tget_member_type_ft)(hid_t type_id, unsigned membno) noexcept nogil
ctypedef hid_t (*H5Aopen_by_idx_ft)(hid_t loc_id, const char *obj_name, int idx_type, int order,
                                    hsize_t n, hid_t aapl_id, hid_t lapl_id) noexcept nogil
ctypedef Py_ssize_t (*H5Aget_name_ft)(hid_t attr_id, size_t buf_size, char *buf) noexcept nogil
ctypedef htri_t (*H5Tis_variable_str_ft)(hid_t type_id) noexcept nogil
ctypedef int (*H5Tget_cset_ft)(hid_t type_id) noexcept nogil
ctypedef htri_t (*H5Aexists_by_name_ft)(hid_t loc_id, const char *obj_name, const char *attr_name,
                                        hid_t lapl_id) noexcept nogil
ctypedef hid_t (*H5Aopen_by_name_ft)(hid_t loc_id, const char *obj_name, const char *attr_name,
                                     hid_t aapl_id, hid_t lapl_id) noexcept nogil
ctypedef hid_t (*H5Screate_ft)(int type) noexcept nogil
ctypedef int (*H5Sget_simple_extent_dims_ft)(hid_t space_id, hsize_t *dims,
                                             hsize_t *maxdims) noexcept nogil
ctypedef int (*H5Sget_simple_extent_type_ft)(hid_t space_id) noexcept nogil
ctypedef herr_t (*H5free_memory_ft)(void *mem) noexcept nogil

# The resolved entry points: the one instance, ``H5``, is filled once at import
# by _hdf5api.pyx and cimported by every kernel from
# ``xarray_vhdf5/_ext/_hdf5api.pxd``.
ctypedef struct HDF5API:
    H5Dget_space_ft H5Dget_space
    H5Dget_create_plist_ft H5Dget_create_plist
    H5Dread_ft H5Dread
    H5Dwrite_ft H5Dwrite
    H5Screate_simple_ft H5Screate_simple
    H5Sclose_ft H5Sclose
    H5Sselect_hyperslab_ft H5Sselect_hyperslab
    H5Sget_select_bounds_ft H5Sget_select_bounds
    H5Sget_select_npoints_ft H5Sget_select_npoints
    H5Sget_simple_extent_ndims_ft H5Sget_simple_extent_ndims
    H5Pclose_ft H5Pclose
    H5Pget_virtual_count_ft H5Pget_virtual_count
    H5Pget_virtual_vspace_ft H5Pget_virtual_vspace
    H5Pget_virtual_srcspace_ft H5Pget_virtual_srcspace
    H5Pget_virtual_dsetname_ft H5Pget_virtual_dsetname
    H5Pget_virtual_filename_ft H5Pget_virtual_filename
    H5Ewalk2_ft H5Ewalk2
    H5Pset_virtual_ft H5Pset_virtual
    H5Aexists_ft H5Aexists
    H5Aopen_ft H5Aopen
    H5Acreate2_ft H5Acreate2
    H5Adelete_ft H5Adelete
    H5Aclose_ft H5Aclose
    H5Awrite_ft H5Awrite
    H5Aread_ft H5Aread
    H5Aget_type_ft H5Aget_type
    H5Aget_space_ft H5Aget_space
    H5Tequal_ft H5Tequal
    H5Tclose_ft H5Tclose
    H5Tget_class_ft H5Tget_class
    H5Tis_variable_str_ft H5Tis_variable_str
    H5Screate_ft H5Screate
    H5Sget_simple_extent_dims_ft H5Sget_simple_extent_dims
    H5Sget_simple_extent_type_ft H5Sget_simple_extent_type
    H5free_memory_ft H5free_memory
    H5Pcopy_ft H5Pcopy
    H5Sselect_all_ft H5Sselect_all
    H5Dcreate2_ft H5Dcreate2
    H5Tget_size_ft H5Tget_size
    H5Tget_super_ft H5Tget_super
    H5Tget_nmembers_ft H5Tget_nmembers
    H5Tget_member_type_ft H5Tget_member_type
    H5Aopen_by_idx_ft H5Aopen_by_idx
    H5Aget_name_ft H5Aget_name
    H5Tget_cset_ft H5Tget_cset
    H5Aexists_by_name_ft H5Aexists_by_name
    H5Aopen_by_name_ft H5Aopen_by_name
