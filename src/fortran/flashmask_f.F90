! flashmask_f.F90 - the Fortran module `flashmask` over ISO_C_BINDING.
!
! Each C handle (FMContext, FMMask, FMPlan) is a derived type holding a type(c_ptr);
! every subroutine mirrors one C function and returns the FMErrorCode in a trailing
! integer ierr (0 = FM_SUCCESS), as PETSc, HDF5 and MPI Fortran users expect.
! Strings are passed as ordinary Fortran character variables (trailing blanks ignored).
! Communicators: an integer handle (use mpi / mpif.h) or, when the compiler has mpi_f08,
! a type(MPI_Comm); both go through MPI_Comm_f2c in fmfortran.c.
! Indices (heads, rows, columns, bound values) are 0-based, exactly as in the C API.
! Tensors are passed as type(c_ptr) (c_loc of a contiguous array with the TARGET
! attribute); a C tensor [batch][n][heads][head_dim] is a Fortran array
! x(head_dim, heads, n, batch).
! See doc/fortran.md.

#ifndef FM_HAVE_MPI_F08
#define FM_HAVE_MPI_F08 1
#endif

module flashmask
  use, intrinsic :: iso_c_binding
#if FM_HAVE_MPI_F08
  use mpi_f08, only: MPI_Comm
#endif
  implicit none
  private

  ! ------------------------------------------------------------------ handles
  type, public :: fm_context
    type(c_ptr) :: ptr = c_null_ptr
  end type fm_context
  type, public :: fm_mask
    type(c_ptr) :: ptr = c_null_ptr
  end type fm_mask
  type, public :: fm_plan
    type(c_ptr) :: ptr = c_null_ptr
  end type fm_plan

  ! ------------------------------------------------------------------ constants
  integer, parameter, public :: FM_SUCCESS = 0, FM_ERR_MEM = 55, FM_ERR_SUP = 56, FM_ERR_ORDER = 58, &
    FM_ERR_LIB = 60, FM_ERR_ARG_NULL = 62, FM_ERR_ARG_WRONG = 63, FM_ERR_ARG_OUTOFRANGE = 64, &
    FM_ERR_ARG_SIZ = 65, FM_ERR_ARG_INCOMP = 66, FM_ERR_FILE = 67, FM_ERR_MPI = 70, FM_ERR_CUDA = 71, &
    FM_ERR_NCCL = 72, FM_ERR_HDF5 = 73, FM_ERR_HWLOC = 74, FM_ERR_OPT = 75, FM_ERR_COLLECTIVE = 76, &
    FM_ERR_MISMATCH = 77
  integer, parameter, public :: FM_ERROR_HANDLER_TRACEBACK = 0, FM_ERROR_HANDLER_ABORT = 1, &
    FM_ERROR_HANDLER_SILENT = 2
  integer, parameter, public :: FM_BACKEND_AUTO = 0, FM_BACKEND_CPU = 1, FM_BACKEND_CUDA = 2
  integer, parameter, public :: FM_DTYPE_BF16 = 0, FM_DTYPE_FP16 = 1, FM_DTYPE_FP32 = 2
  integer, parameter, public :: FM_BOUND_LTS = 1, FM_BOUND_LTE = 2, FM_BOUND_UTS = 4, FM_BOUND_UTE = 8
  integer, parameter, public :: FM_PLAN_TENSOR_Q = 0, FM_PLAN_TENSOR_KV = 1, FM_PLAN_TENSOR_LSE = 2
  character(len=*), parameter, public :: FMMASKFULL = "full", FMMASKCAUSAL = "causal", &
    FMMASKSLIDINGWINDOW = "sliding_window", FMMASKCAUSALDOCUMENT = "causal_document", &
    FMMASKDOCUMENT = "document", FMMASKSHAREQUESTION = "share_question", &
    FMMASKGLOBALSLIDINGWINDOW = "global_sliding_window", FMMASKCAUSALBLOCKWISE = "causal_blockwise", &
    FMMASKPREFIXLMDOCUMENT = "prefix_lm_document", FMMASKPREFIXLMCAUSAL = "prefix_lm_causal", &
    FMMASKQKSPARSE = "qk_sparse", FMMASKRANDOMEVICTION = "random_eviction", FMMASKBOUNDS = "bounds"
  character(len=*), parameter, public :: FMPLANLOCAL = "local", FMPLANCP = "cp"

  ! ------------------------------------------------------------------ public procedures
  public :: fm_initialize, fm_finalize, fm_initialized, fm_error_string, fm_push_error_handler, fm_pop_error_handler, &
    fm_get_last_error_message, fm_get_version, fm_options_set_value, fm_options_get_int, fm_options_get_real, &
    fm_context_create, fm_context_set_backend, fm_context_set_num_threads, fm_context_set_from_options, &
    fm_context_set_nccl_timeout, fm_context_get_nccl_timeout, &
    fm_context_set_up, fm_context_view, fm_context_get_backend, fm_context_get_device, fm_context_destroy, &
    fm_mask_create, fm_mask_set_sizes, fm_mask_set_type, fm_mask_get_type, fm_mask_set_causal, &
    fm_mask_set_documents, fm_mask_set_sample_documents, fm_mask_set_window, fm_mask_set_global_tokens, &
    fm_mask_set_prefix_lengths, &
    fm_mask_set_seed, fm_mask_set_bounds, fm_mask_set_block_size, fm_mask_set_from_options, fm_mask_set_up, &
    fm_mask_get_sizes, fm_mask_get_density, fm_mask_is_masked, fm_mask_view, fm_mask_save, fm_mask_load, &
    fm_mask_destroy, fm_mask_set_batch, fm_mask_get_batch, fm_mask_set_sample_bounds, fm_mask_set_all_bounds, &
    fm_mask_set_share_question, fm_mask_set_qk_sparse_spans, fm_mask_get_sample_bounds, fm_plan_get_shape, &
    fm_context_get_comm, &
    fm_plan_create, fm_plan_set_mask, fm_plan_set_shape, fm_plan_set_scale, fm_plan_get_scale, &
    fm_plan_set_check_finite, fm_plan_get_check_finite, fm_plan_set_deterministic, fm_plan_get_deterministic, &
    fm_plan_set_from_options, &
    fm_plan_set_up, fm_plan_get_local_rows, fm_plan_get_local_keys, fm_plan_scatter, fm_plan_gather, &
    fm_plan_get_flops, fm_plan_forward, fm_plan_backward, fm_plan_view, fm_plan_destroy
  ! options prefixes, the plan type and the context-parallel settings
  public :: fm_context_set_options_prefix, fm_context_get_options_prefix, fm_mask_set_options_prefix, &
    fm_mask_get_options_prefix, fm_plan_set_options_prefix, fm_plan_get_options_prefix, &
    fm_plan_set_type, fm_plan_get_type, fm_plan_set_partition, fm_plan_get_partition, &
    fm_plan_set_chunk, fm_plan_get_chunk, fm_plan_set_partial_cost, fm_plan_get_partial_cost, &
    fm_plan_set_row_cost, fm_plan_get_row_cost, fm_plan_set_route, fm_plan_get_route, &
    fm_plan_set_balance_comm, fm_plan_get_balance_comm, fm_plan_set_cost_model, fm_plan_get_cost_model, &
    fm_plan_set_virtual_nodes, fm_plan_set_schedule, fm_plan_get_schedule, fm_plan_set_prune, &
    fm_plan_set_overlap, fm_plan_set_transport, fm_plan_set_gpu_aware_mpi, fm_plan_set_step_chunks, &
    fm_plan_set_trace
  ! options of the application's own, logging, element conversions, the CUDA stream
  public :: fm_options_get_bool, fm_options_get_string, fm_options_get_int_array, fm_options_has_name, &
    fm_log_event_register, fm_log_event_begin, fm_log_event_end, fm_log_view, fm_from_float, fm_to_float, &
    fm_plan_set_stream

  ! fm_context_create(comm, ctx, ierr): comm is an integer handle or a type(MPI_Comm)
  interface fm_context_create
    module procedure fm_context_create_int
#if FM_HAVE_MPI_F08
    module procedure fm_context_create_f08
#endif
  end interface fm_context_create

  ! ------------------------------------------------------------------ the C functions
  ! (split over the files below so that no source file is long; they are part of this module)
  interface
#include "fm_c_sys.inc"
  end interface
  interface
#include "fm_c_plan.inc"
  end interface

contains

  ! ------------------------------------------------------------------ helpers
  ! A Fortran string (trailing blanks dropped) as a NUL-terminated C string.
  pure function cstr(s) result(c)
    character(len=*), intent(in) :: s
    character(kind=c_char, len=len_trim(s) + 1) :: c
    c = trim(s) // c_null_char
  end function cstr

  integer function fbool(flag)
    logical, intent(in) :: flag
    fbool = merge(1, 0, flag)
  end function fbool

  ! Flush Fortran's unit 6 and C's stdout before a C viewer prints.
  subroutine flush_both()
    use, intrinsic :: iso_fortran_env, only: output_unit
    flush (output_unit)
    call c_FMFortranFlushStdout()
  end subroutine flush_both

#include "fm_f_sys.inc"
#include "fm_f_mask.inc"
#include "fm_f_plan.inc"
#include "fm_f_plancp.inc"

end module flashmask
