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
  public :: fm_initialize, fm_finalize, fm_initialized, fm_error_string, fm_push_error_handler, &
    fm_get_last_error_message, fm_get_version, fm_options_set_value, fm_options_get_int, fm_options_get_real, &
    fm_context_create, fm_context_set_backend, fm_context_set_num_threads, fm_context_set_from_options, &
    fm_context_set_up, fm_context_view, fm_context_get_backend, fm_context_get_device, fm_context_destroy, &
    fm_mask_create, fm_mask_set_sizes, fm_mask_set_type, fm_mask_get_type, fm_mask_set_causal, &
    fm_mask_set_documents, fm_mask_set_window, fm_mask_set_global_tokens, fm_mask_set_prefix_lengths, &
    fm_mask_set_seed, fm_mask_set_bounds, fm_mask_set_block_size, fm_mask_set_from_options, fm_mask_set_up, &
    fm_mask_get_sizes, fm_mask_get_density, fm_mask_is_masked, fm_mask_view, fm_mask_save, fm_mask_load, &
    fm_mask_destroy, fm_mask_set_batch, fm_mask_get_batch, fm_mask_set_sample_bounds, &
    fm_plan_create, fm_plan_set_mask, fm_plan_set_shape, fm_plan_set_scale, fm_plan_get_scale, fm_plan_set_from_options, &
    fm_plan_set_up, fm_plan_get_local_rows, fm_plan_get_local_keys, fm_plan_scatter, fm_plan_gather, &
    fm_plan_get_flops, fm_plan_forward, fm_plan_backward, fm_plan_view, fm_plan_destroy
  ! options prefixes, the plan type and the context-parallel settings
  public :: fm_context_set_options_prefix, fm_context_get_options_prefix, fm_mask_set_options_prefix, &
    fm_mask_get_options_prefix, fm_plan_set_options_prefix, fm_plan_get_options_prefix, &
    fm_plan_set_type, fm_plan_get_type, fm_plan_set_partition, fm_plan_get_partition, &
    fm_plan_set_chunk, fm_plan_get_chunk, fm_plan_set_partial_cost, fm_plan_get_partial_cost, &
    fm_plan_set_row_cost, fm_plan_get_row_cost, fm_plan_set_route, fm_plan_get_route, &
    fm_plan_set_virtual_nodes, fm_plan_set_schedule, fm_plan_get_schedule, fm_plan_set_prune, &
    fm_plan_set_overlap, fm_plan_set_transport, fm_plan_set_gpu_aware_mpi, fm_plan_set_step_chunks, &
    fm_plan_set_trace

  ! fm_context_create(comm, ctx, ierr): comm is an integer handle or a type(MPI_Comm)
  interface fm_context_create
    module procedure fm_context_create_int
#if FM_HAVE_MPI_F08
    module procedure fm_context_create_f08
#endif
  end interface fm_context_create

  ! ------------------------------------------------------------------ the C functions
  interface
    integer(c_int) function c_FMInitialize(argc, argv, file, help) bind(C, name="FMInitialize")
      import :: c_int, c_ptr
      type(c_ptr), value :: argc, argv, file, help
    end function
    integer(c_int) function c_FMFinalize() bind(C, name="FMFinalize")
      import :: c_int
    end function
    integer(c_int) function c_FMInitialized(flag) bind(C, name="FMInitialized")
      import :: c_int
      integer(c_int) :: flag
    end function
    type(c_ptr) function c_FMErrorString(code) bind(C, name="FMErrorString")
      import :: c_ptr, c_int
      integer(c_int), value :: code
    end function
    integer(c_int) function c_FMPushErrorHandler(h) bind(C, name="FMPushErrorHandler")
      import :: c_int
      integer(c_int), value :: h
    end function
    type(c_ptr) function c_FMGetLastErrorMessage() bind(C, name="FMGetLastErrorMessage")
      import :: c_ptr
    end function
    type(c_ptr) function c_FMGetVersion() bind(C, name="FMGetVersion")
      import :: c_ptr
    end function
    integer(c_int) function c_FMOptionsSetValue(name, value) bind(C, name="FMOptionsSetValue")
      import :: c_int, c_char, c_ptr
      character(kind=c_char), intent(in) :: name(*)
      type(c_ptr), value :: value
    end function
    integer(c_int) function c_FMOptionsGetInt(name, help, value, set) bind(C, name="FMOptionsGetInt")
      import :: c_int, c_char
      character(kind=c_char), intent(in) :: name(*), help(*)
      integer(c_int) :: value, set
    end function
    integer(c_int) function c_FMOptionsGetReal(name, help, value, set) bind(C, name="FMOptionsGetReal")
      import :: c_int, c_char, c_double
      character(kind=c_char), intent(in) :: name(*), help(*)
      real(c_double) :: value
      integer(c_int) :: set
    end function
    subroutine c_FMFortranCopyString(src, dst, len) bind(C, name="FMFortranCopyString_Private")
      import :: c_ptr, c_char, c_int
      type(c_ptr), value :: src
      character(kind=c_char) :: dst(*)
      integer(c_int), value :: len
    end subroutine
    subroutine c_FMFortranFlushStdout() bind(C, name="FMFortranFlushStdout_Private")
    end subroutine

    ! FMContext
    integer(c_int) function c_FMFortranContextCreate(fcomm, ctx) bind(C, name="FMFortranContextCreate_Private")
      import :: c_int, c_ptr
      integer(c_int), intent(in) :: fcomm   ! MPI_Fint
      type(c_ptr) :: ctx
    end function
    integer(c_int) function c_FMContextSetBackend(ctx, b) bind(C, name="FMContextSetBackend")
      import :: c_int, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: b
    end function
    integer(c_int) function c_FMContextSetNumThreads(ctx, n) bind(C, name="FMContextSetNumThreads")
      import :: c_int, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int), value :: n
    end function
    integer(c_int) function c_FMContextSetFromOptions(ctx) bind(C, name="FMContextSetFromOptions")
      import :: c_int, c_ptr
      type(c_ptr), value :: ctx
    end function
    integer(c_int) function c_FMContextSetUp(ctx) bind(C, name="FMContextSetUp")
      import :: c_int, c_ptr
      type(c_ptr), value :: ctx
    end function
    integer(c_int) function c_FMFortranContextView(ctx) bind(C, name="FMFortranContextView_Private")
      import :: c_int, c_ptr
      type(c_ptr), value :: ctx
    end function
    integer(c_int) function c_FMContextGetBackend(ctx, b) bind(C, name="FMContextGetBackend")
      import :: c_int, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int) :: b
    end function
    integer(c_int) function c_FMContextGetDevice(ctx, d) bind(C, name="FMContextGetDevice")
      import :: c_int, c_ptr
      type(c_ptr), value :: ctx
      integer(c_int) :: d
    end function
    integer(c_int) function c_FMContextDestroy(ctx) bind(C, name="FMContextDestroy")
      import :: c_int, c_ptr
      type(c_ptr) :: ctx
    end function

    ! FMMask
    integer(c_int) function c_FMMaskCreate(ctx, mask) bind(C, name="FMMaskCreate")
      import :: c_int, c_ptr
      type(c_ptr), value :: ctx
      type(c_ptr) :: mask
    end function
    integer(c_int) function c_FMMaskSetSizes(mask, sq, sk, mh) bind(C, name="FMMaskSetSizes")
      import :: c_int, c_ptr
      type(c_ptr), value :: mask
      integer(c_int), value :: sq, sk, mh
    end function
    integer(c_int) function c_FMMaskSetType(mask, t) bind(C, name="FMMaskSetType")
      import :: c_int, c_ptr, c_char
      type(c_ptr), value :: mask
      character(kind=c_char), intent(in) :: t(*)
    end function
    integer(c_int) function c_FMMaskGetType(mask, t) bind(C, name="FMMaskGetType")
      import :: c_int, c_ptr
      type(c_ptr), value :: mask
      type(c_ptr) :: t
    end function
    integer(c_int) function c_FMMaskSetCausal(mask, c) bind(C, name="FMMaskSetCausal")
      import :: c_int, c_ptr
      type(c_ptr), value :: mask
      integer(c_int), value :: c
    end function
    integer(c_int) function c_FMMaskSetDocuments(mask, n, len) bind(C, name="FMMaskSetDocuments")
      import :: c_int, c_ptr
      type(c_ptr), value :: mask
      integer(c_int), value :: n
      integer(c_int), intent(in) :: len(*)
    end function
    integer(c_int) function c_FMMaskSetWindow(mask, l, r) bind(C, name="FMMaskSetWindow")
      import :: c_int, c_ptr
      type(c_ptr), value :: mask
      integer(c_int), value :: l, r
    end function
    integer(c_int) function c_FMMaskSetGlobalTokens(mask, n) bind(C, name="FMMaskSetGlobalTokens")
      import :: c_int, c_ptr
      type(c_ptr), value :: mask
      integer(c_int), value :: n
    end function
    integer(c_int) function c_FMMaskSetPrefixLengths(mask, n, p) bind(C, name="FMMaskSetPrefixLengths")
      import :: c_int, c_ptr
      type(c_ptr), value :: mask
      integer(c_int), value :: n
      integer(c_int), intent(in) :: p(*)
    end function
    integer(c_int) function c_FMMaskSetSeed(mask, s) bind(C, name="FMMaskSetSeed")
      import :: c_int, c_ptr, c_long
      type(c_ptr), value :: mask
      integer(c_long), value :: s
    end function
    integer(c_int) function c_FMMaskSetBounds(mask, head, lts, lte, uts, ute) bind(C, name="FMMaskSetBounds")
      import :: c_int, c_ptr
      type(c_ptr), value :: mask
      integer(c_int), value :: head
      type(c_ptr), value :: lts, lte, uts, ute
    end function
    integer(c_int) function c_FMMaskSetSampleBounds(mask, s, head, lts, lte, uts, ute) bind(C, name="FMMaskSetSampleBounds")
      import :: c_int, c_ptr
      type(c_ptr), value :: mask
      integer(c_int), value :: s, head
      type(c_ptr), value :: lts, lte, uts, ute
    end function
    integer(c_int) function c_FMMaskSetBatch(mask, b) bind(C, name="FMMaskSetBatch")
      import :: c_int, c_ptr
      type(c_ptr), value :: mask
      integer(c_int), value :: b
    end function
    integer(c_int) function c_FMMaskGetBatch(mask, b) bind(C, name="FMMaskGetBatch")
      import :: c_int, c_ptr
      type(c_ptr), value :: mask
      integer(c_int) :: b
    end function
    integer(c_int) function c_FMMaskSetBlockSize(mask, b) bind(C, name="FMMaskSetBlockSize")
      import :: c_int, c_ptr
      type(c_ptr), value :: mask
      integer(c_int), value :: b
    end function
    integer(c_int) function c_FMMaskSetFromOptions(mask) bind(C, name="FMMaskSetFromOptions")
      import :: c_int, c_ptr
      type(c_ptr), value :: mask
    end function
    integer(c_int) function c_FMMaskSetUp(mask) bind(C, name="FMMaskSetUp")
      import :: c_int, c_ptr
      type(c_ptr), value :: mask
    end function
    integer(c_int) function c_FMMaskGetSizes(mask, sq, sk, mh) bind(C, name="FMMaskGetSizes")
      import :: c_int, c_ptr
      type(c_ptr), value :: mask
      integer(c_int) :: sq, sk, mh
    end function
    integer(c_int) function c_FMMaskGetDensity(mask, d, s) bind(C, name="FMMaskGetDensity")
      import :: c_int, c_ptr, c_double
      type(c_ptr), value :: mask
      real(c_double) :: d, s
    end function
    integer(c_int) function c_FMMaskIsMasked(mask, h, i, j, m) bind(C, name="FMMaskIsMasked")
      import :: c_int, c_ptr
      type(c_ptr), value :: mask
      integer(c_int), value :: h, i, j
      integer(c_int) :: m
    end function
    integer(c_int) function c_FMFortranMaskView(mask) bind(C, name="FMFortranMaskView_Private")
      import :: c_int, c_ptr
      type(c_ptr), value :: mask
    end function
    integer(c_int) function c_FMMaskSave(mask, path, name) bind(C, name="FMMaskSave")
      import :: c_int, c_ptr, c_char
      type(c_ptr), value :: mask
      character(kind=c_char), intent(in) :: path(*), name(*)
    end function
    integer(c_int) function c_FMMaskLoad(ctx, path, name, mask) bind(C, name="FMMaskLoad")
      import :: c_int, c_ptr, c_char
      type(c_ptr), value :: ctx
      character(kind=c_char), intent(in) :: path(*), name(*)
      type(c_ptr) :: mask
    end function
    integer(c_int) function c_FMMaskDestroy(mask) bind(C, name="FMMaskDestroy")
      import :: c_int, c_ptr
      type(c_ptr) :: mask
    end function

    ! FMPlan
    integer(c_int) function c_FMPlanCreate(ctx, plan) bind(C, name="FMPlanCreate")
      import :: c_int, c_ptr
      type(c_ptr), value :: ctx
      type(c_ptr) :: plan
    end function
    integer(c_int) function c_FMPlanSetMask(plan, mask) bind(C, name="FMPlanSetMask")
      import :: c_int, c_ptr
      type(c_ptr), value :: plan, mask
    end function
    integer(c_int) function c_FMPlanSetShape(plan, b, hq, hkv, d, dt) bind(C, name="FMPlanSetShape")
      import :: c_int, c_ptr
      type(c_ptr), value :: plan
      integer(c_int), value :: b, hq, hkv, d, dt
    end function
    integer(c_int) function c_FMPlanSetScale(plan, s) bind(C, name="FMPlanSetScale")
      import :: c_int, c_ptr, c_double
      type(c_ptr), value :: plan
      real(c_double), value :: s
    end function
    integer(c_int) function c_FMPlanGetScale(plan, s) bind(C, name="FMPlanGetScale")
      import :: c_int, c_ptr, c_double
      type(c_ptr), value :: plan
      real(c_double), intent(out) :: s
    end function
    integer(c_int) function c_FMPlanSetFromOptions(plan) bind(C, name="FMPlanSetFromOptions")
      import :: c_int, c_ptr
      type(c_ptr), value :: plan
    end function
    integer(c_int) function c_FMPlanSetUp(plan) bind(C, name="FMPlanSetUp")
      import :: c_int, c_ptr
      type(c_ptr), value :: plan
    end function
    integer(c_int) function c_FMPlanGetLocalRows(plan, n, rows) bind(C, name="FMPlanGetLocalRows")
      import :: c_int, c_ptr
      type(c_ptr), value :: plan
      integer(c_int) :: n
      type(c_ptr) :: rows
    end function
    integer(c_int) function c_FMPlanGetLocalKeys(plan, n, keys) bind(C, name="FMPlanGetLocalKeys")
      import :: c_int, c_ptr
      type(c_ptr), value :: plan
      integer(c_int) :: n
      type(c_ptr) :: keys
    end function
    integer(c_int) function c_FMPlanScatter(plan, kind, root, global, local) bind(C, name="FMPlanScatter")
      import :: c_int, c_ptr
      type(c_ptr), value :: plan
      integer(c_int), value :: kind, root
      type(c_ptr), value :: global, local
    end function
    integer(c_int) function c_FMPlanGather(plan, kind, root, local, global) bind(C, name="FMPlanGather")
      import :: c_int, c_ptr
      type(c_ptr), value :: plan
      integer(c_int), value :: kind, root
      type(c_ptr), value :: local, global
    end function
    integer(c_int) function c_FMPlanGetFlops(plan, f) bind(C, name="FMPlanGetFlops")
      import :: c_int, c_ptr, c_double
      type(c_ptr), value :: plan
      real(c_double) :: f
    end function
    integer(c_int) function c_FMPlanForward(plan, q, k, v, o, lse) bind(C, name="FMPlanForward")
      import :: c_int, c_ptr
      type(c_ptr), value :: plan, q, k, v, o, lse
    end function
    integer(c_int) function c_FMPlanBackward(plan, q, k, v, o, lse, dout, dq, dk, dv) bind(C, name="FMPlanBackward")
      import :: c_int, c_ptr
      type(c_ptr), value :: plan, q, k, v, o, lse, dout, dq, dk, dv
    end function
    integer(c_int) function c_FMFortranPlanView(plan) bind(C, name="FMFortranPlanView_Private")
      import :: c_int, c_ptr
      type(c_ptr), value :: plan
    end function
    integer(c_int) function c_FMPlanDestroy(plan) bind(C, name="FMPlanDestroy")
      import :: c_int, c_ptr
      type(c_ptr) :: plan
    end function
    ! options prefixes, the plan type, the context-parallel settings
    integer(c_int) function c_FMContextSetOptionsPrefix(obj, s) bind(C, name="FMContextSetOptionsPrefix")
      import :: c_int, c_ptr, c_char
      type(c_ptr), value :: obj
      character(kind=c_char), intent(in) :: s(*)
    end function
    integer(c_int) function c_FMContextGetOptionsPrefix(obj, s) bind(C, name="FMContextGetOptionsPrefix")
      import :: c_int, c_ptr
      type(c_ptr), value :: obj
      type(c_ptr) :: s
    end function
    integer(c_int) function c_FMMaskSetOptionsPrefix(obj, s) bind(C, name="FMMaskSetOptionsPrefix")
      import :: c_int, c_ptr, c_char
      type(c_ptr), value :: obj
      character(kind=c_char), intent(in) :: s(*)
    end function
    integer(c_int) function c_FMMaskGetOptionsPrefix(obj, s) bind(C, name="FMMaskGetOptionsPrefix")
      import :: c_int, c_ptr
      type(c_ptr), value :: obj
      type(c_ptr) :: s
    end function
    integer(c_int) function c_FMPlanSetOptionsPrefix(obj, s) bind(C, name="FMPlanSetOptionsPrefix")
      import :: c_int, c_ptr, c_char
      type(c_ptr), value :: obj
      character(kind=c_char), intent(in) :: s(*)
    end function
    integer(c_int) function c_FMPlanGetOptionsPrefix(obj, s) bind(C, name="FMPlanGetOptionsPrefix")
      import :: c_int, c_ptr
      type(c_ptr), value :: obj
      type(c_ptr) :: s
    end function
    integer(c_int) function c_FMPlanSetType(obj, s) bind(C, name="FMPlanSetType")
      import :: c_int, c_ptr, c_char
      type(c_ptr), value :: obj
      character(kind=c_char), intent(in) :: s(*)
    end function
    integer(c_int) function c_FMPlanGetType(obj, s) bind(C, name="FMPlanGetType")
      import :: c_int, c_ptr
      type(c_ptr), value :: obj
      type(c_ptr) :: s
    end function
    integer(c_int) function c_FMPlanSetPartition(obj, s) bind(C, name="FMPlanSetPartition")
      import :: c_int, c_ptr, c_char
      type(c_ptr), value :: obj
      character(kind=c_char), intent(in) :: s(*)
    end function
    integer(c_int) function c_FMPlanGetPartition(obj, s) bind(C, name="FMPlanGetPartition")
      import :: c_int, c_ptr
      type(c_ptr), value :: obj
      type(c_ptr) :: s
    end function
    integer(c_int) function c_FMPlanSetChunk(obj, n) bind(C, name="FMPlanSetChunk")
      import :: c_int, c_ptr
      type(c_ptr), value :: obj
      integer(c_int), value :: n
    end function
    integer(c_int) function c_FMPlanGetChunk(obj, n) bind(C, name="FMPlanGetChunk")
      import :: c_int, c_ptr
      type(c_ptr), value :: obj
      integer(c_int) :: n
    end function
    integer(c_int) function c_FMPlanSetPartialCost(obj, x) bind(C, name="FMPlanSetPartialCost")
      import :: c_int, c_ptr, c_double
      type(c_ptr), value :: obj
      real(c_double), value :: x
    end function
    integer(c_int) function c_FMPlanGetPartialCost(obj, x) bind(C, name="FMPlanGetPartialCost")
      import :: c_int, c_ptr, c_double
      type(c_ptr), value :: obj
      real(c_double) :: x
    end function
    integer(c_int) function c_FMPlanSetRowCost(obj, x) bind(C, name="FMPlanSetRowCost")
      import :: c_int, c_ptr, c_double
      type(c_ptr), value :: obj
      real(c_double), value :: x
    end function
    integer(c_int) function c_FMPlanGetRowCost(obj, x) bind(C, name="FMPlanGetRowCost")
      import :: c_int, c_ptr, c_double
      type(c_ptr), value :: obj
      real(c_double) :: x
    end function
    integer(c_int) function c_FMPlanSetRoute(obj, s) bind(C, name="FMPlanSetRoute")
      import :: c_int, c_ptr, c_char
      type(c_ptr), value :: obj
      character(kind=c_char), intent(in) :: s(*)
    end function
    integer(c_int) function c_FMPlanGetRoute(obj, s) bind(C, name="FMPlanGetRoute")
      import :: c_int, c_ptr
      type(c_ptr), value :: obj
      type(c_ptr) :: s
    end function
    integer(c_int) function c_FMPlanSetVirtualNodes(obj, n) bind(C, name="FMPlanSetVirtualNodes")
      import :: c_int, c_ptr
      type(c_ptr), value :: obj
      integer(c_int), value :: n
    end function
    integer(c_int) function c_FMPlanSetSchedule(obj, s) bind(C, name="FMPlanSetSchedule")
      import :: c_int, c_ptr, c_char
      type(c_ptr), value :: obj
      character(kind=c_char), intent(in) :: s(*)
    end function
    integer(c_int) function c_FMPlanGetSchedule(obj, s) bind(C, name="FMPlanGetSchedule")
      import :: c_int, c_ptr
      type(c_ptr), value :: obj
      type(c_ptr) :: s
    end function
    integer(c_int) function c_FMPlanSetPrune(obj, n) bind(C, name="FMPlanSetPrune")
      import :: c_int, c_ptr
      type(c_ptr), value :: obj
      integer(c_int), value :: n
    end function
    integer(c_int) function c_FMPlanSetOverlap(obj, n) bind(C, name="FMPlanSetOverlap")
      import :: c_int, c_ptr
      type(c_ptr), value :: obj
      integer(c_int), value :: n
    end function
    integer(c_int) function c_FMPlanSetTransport(obj, s) bind(C, name="FMPlanSetTransport")
      import :: c_int, c_ptr, c_char
      type(c_ptr), value :: obj
      character(kind=c_char), intent(in) :: s(*)
    end function
    integer(c_int) function c_FMPlanSetGPUAwareMPI(obj, s) bind(C, name="FMPlanSetGPUAwareMPI")
      import :: c_int, c_ptr, c_char
      type(c_ptr), value :: obj
      character(kind=c_char), intent(in) :: s(*)
    end function
    integer(c_int) function c_FMPlanSetStepChunks(obj, n) bind(C, name="FMPlanSetStepChunks")
      import :: c_int, c_ptr
      type(c_ptr), value :: obj
      integer(c_int), value :: n
    end function
    integer(c_int) function c_FMPlanSetTrace(plan, path, view) bind(C, name="FMPlanSetTrace")
      import :: c_int, c_ptr, c_char
      type(c_ptr), value :: plan
      character(kind=c_char), intent(in) :: path(*)
      integer(c_int), value :: view
    end function
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

  ! ------------------------------------------------------------------ initialization, errors, options
  ! fm_initialize(ierr): FMInitialize without argv; options come from FM_OPTIONS
  ! (e.g. FM_OPTIONS="-fm_backend cpu -fm_log_view"). Initializes MPI if needed.
  ! Collective on MPI_COMM_WORLD.
  subroutine fm_initialize(ierr)
    integer, intent(out) :: ierr
    ierr = c_FMInitialize(c_null_ptr, c_null_ptr, c_null_ptr, c_null_ptr)
  end subroutine fm_initialize

  ! fm_finalize(ierr): FMFinalize (finalizes MPI only if fm_initialize initialized it).
  subroutine fm_finalize(ierr)
    integer, intent(out) :: ierr
    ierr = c_FMFinalize()
  end subroutine fm_finalize

  ! fm_initialized(flag, ierr): whether fm_initialize has been called (and not finalized).
  subroutine fm_initialized(flag, ierr)
    logical, intent(out) :: flag
    integer, intent(out) :: ierr
    integer(c_int) :: f
    f = 0
    ierr = c_FMInitialized(f)
    flag = f /= 0
  end subroutine fm_initialized

  ! fm_error_string(code, str): name and description of an error code.
  subroutine fm_error_string(code, str)
    integer, intent(in) :: code
    character(len=*), intent(out) :: str
    call c_FMFortranCopyString(c_FMErrorString(int(code, c_int)), str, int(len(str), c_int))
  end subroutine fm_error_string

  ! fm_push_error_handler(h, ierr): FM_ERROR_HANDLER_TRACEBACK, _ABORT or _SILENT.
  subroutine fm_push_error_handler(h, ierr)
    integer, intent(in) :: h
    integer, intent(out) :: ierr
    ierr = c_FMPushErrorHandler(int(h, c_int))
  end subroutine fm_push_error_handler

  ! fm_get_last_error_message(msg): the message of the last error raised on this rank.
  subroutine fm_get_last_error_message(msg)
    character(len=*), intent(out) :: msg
    call c_FMFortranCopyString(c_FMGetLastErrorMessage(), msg, int(len(msg), c_int))
  end subroutine fm_get_last_error_message

  ! fm_get_version(str): the library version, e.g. "0.1.0".
  subroutine fm_get_version(str)
    character(len=*), intent(out) :: str
    call c_FMFortranCopyString(c_FMGetVersion(), str, int(len(str), c_int))
  end subroutine fm_get_version

  ! fm_options_set_value(name, value, ierr): insert "-name value"; value "" sets a flag.
  subroutine fm_options_set_value(name, value, ierr)
    character(len=*), intent(in) :: name, value
    integer, intent(out) :: ierr
    character(kind=c_char, len=len_trim(value) + 1), target :: cv
    cv = cstr(value)
    if (len_trim(value) == 0) then
      ierr = c_FMOptionsSetValue(cstr(name), c_null_ptr)
    else
      ierr = c_FMOptionsSetValue(cstr(name), c_loc(cv))
    end if
  end subroutine fm_options_set_value

  ! fm_options_get_int(name, value, set, ierr): value in: default, out: the option's value.
  subroutine fm_options_get_int(name, value, set, ierr)
    character(len=*), intent(in) :: name
    integer, intent(inout) :: value
    logical, intent(out) :: set
    integer, intent(out) :: ierr
    integer(c_int) :: v, s
    v = int(value, c_int)
    s = 0
    ierr = c_FMOptionsGetInt(cstr(name), cstr("(from Fortran)"), v, s)
    value = int(v)
    set = s /= 0
  end subroutine fm_options_get_int

  ! fm_options_get_real(name, value, set, ierr): as fm_options_get_int, double precision.
  subroutine fm_options_get_real(name, value, set, ierr)
    character(len=*), intent(in) :: name
    real(c_double), intent(inout) :: value
    logical, intent(out) :: set
    integer, intent(out) :: ierr
    integer(c_int) :: s
    s = 0
    ierr = c_FMOptionsGetReal(cstr(name), cstr("(from Fortran)"), value, s)
    set = s /= 0
  end subroutine fm_options_get_real

  ! ------------------------------------------------------------------ FMContext
  ! fm_context_create(comm, ctx, ierr): comm an integer handle (use mpi, mpif.h).
  ! Collective on comm; the communicator is duplicated.
  subroutine fm_context_create_int(comm, ctx, ierr)
    integer, intent(in) :: comm
    type(fm_context), intent(out) :: ctx
    integer, intent(out) :: ierr
    ierr = c_FMFortranContextCreate(int(comm, c_int), ctx%ptr)
  end subroutine fm_context_create_int

#if FM_HAVE_MPI_F08
  ! fm_context_create(comm, ctx, ierr): comm a type(MPI_Comm) (use mpi_f08).
  subroutine fm_context_create_f08(comm, ctx, ierr)
    type(MPI_Comm), intent(in) :: comm
    type(fm_context), intent(out) :: ctx
    integer, intent(out) :: ierr
    ierr = c_FMFortranContextCreate(int(comm%MPI_VAL, c_int), ctx%ptr)
  end subroutine fm_context_create_f08
#endif

  ! fm_context_set_backend(ctx, backend, ierr): FM_BACKEND_AUTO, _CPU or _CUDA.
  subroutine fm_context_set_backend(ctx, backend, ierr)
    type(fm_context), intent(in) :: ctx
    integer, intent(in) :: backend
    integer, intent(out) :: ierr
    ierr = c_FMContextSetBackend(ctx%ptr, int(backend, c_int))
  end subroutine fm_context_set_backend

  ! fm_context_set_num_threads(ctx, nthreads, ierr): CPU backend threads per rank.
  subroutine fm_context_set_num_threads(ctx, nthreads, ierr)
    type(fm_context), intent(in) :: ctx
    integer, intent(in) :: nthreads
    integer, intent(out) :: ierr
    ierr = c_FMContextSetNumThreads(ctx%ptr, int(nthreads, c_int))
  end subroutine fm_context_set_num_threads

  ! fm_context_set_from_options(ctx, ierr): -fm_backend, -fm_num_threads, ... Collective.
  subroutine fm_context_set_from_options(ctx, ierr)
    type(fm_context), intent(in) :: ctx
    integer, intent(out) :: ierr
    ierr = c_FMContextSetFromOptions(ctx%ptr)
  end subroutine fm_context_set_from_options

  ! fm_context_set_up(ctx, ierr): topology, device choice, backend. Collective.
  subroutine fm_context_set_up(ctx, ierr)
    type(fm_context), intent(in) :: ctx
    integer, intent(out) :: ierr
    ierr = c_FMContextSetUp(ctx%ptr)
  end subroutine fm_context_set_up

  ! fm_context_view(ctx, ierr): print the context on standard output. Collective.
  subroutine fm_context_view(ctx, ierr)
    type(fm_context), intent(in) :: ctx
    integer, intent(out) :: ierr
    call flush_both()
    ierr = c_FMFortranContextView(ctx%ptr)
  end subroutine fm_context_view

  ! fm_context_get_backend(ctx, backend, ierr): the resolved backend (after set-up).
  subroutine fm_context_get_backend(ctx, backend, ierr)
    type(fm_context), intent(in) :: ctx
    integer, intent(out) :: backend
    integer, intent(out) :: ierr
    integer(c_int) :: b
    b = 0
    ierr = c_FMContextGetBackend(ctx%ptr, b)
    backend = int(b)
  end subroutine fm_context_get_backend

  ! fm_context_get_device(ctx, device, ierr): the CUDA device of this rank, -1 if none.
  subroutine fm_context_get_device(ctx, device, ierr)
    type(fm_context), intent(in) :: ctx
    integer, intent(out) :: device
    integer, intent(out) :: ierr
    integer(c_int) :: d
    d = -1
    ierr = c_FMContextGetDevice(ctx%ptr, d)
    device = int(d)
  end subroutine fm_context_get_device

  ! fm_context_destroy(ctx, ierr): drop the reference; ctx%ptr becomes null. Collective.
  subroutine fm_context_destroy(ctx, ierr)
    type(fm_context), intent(inout) :: ctx
    integer, intent(out) :: ierr
    ierr = c_FMContextDestroy(ctx%ptr)
  end subroutine fm_context_destroy

  ! ------------------------------------------------------------------ FMMask
  ! fm_mask_create(ctx, mask, ierr). Collective.
  subroutine fm_mask_create(ctx, mask, ierr)
    type(fm_context), intent(in) :: ctx
    type(fm_mask), intent(out) :: mask
    integer, intent(out) :: ierr
    ierr = c_FMMaskCreate(ctx%ptr, mask%ptr)
  end subroutine fm_mask_create

  ! fm_mask_set_sizes(mask, seqlen_q, seqlen_k, mask_heads, ierr).
  subroutine fm_mask_set_sizes(mask, seqlen_q, seqlen_k, mask_heads, ierr)
    type(fm_mask), intent(in) :: mask
    integer, intent(in) :: seqlen_q, seqlen_k, mask_heads
    integer, intent(out) :: ierr
    ierr = c_FMMaskSetSizes(mask%ptr, int(seqlen_q, c_int), int(seqlen_k, c_int), int(mask_heads, c_int))
  end subroutine fm_mask_set_sizes

  ! fm_mask_set_type(mask, type, ierr): a builder name, e.g. FMMASKCAUSALDOCUMENT.
  subroutine fm_mask_set_type(mask, type, ierr)
    type(fm_mask), intent(in) :: mask
    character(len=*), intent(in) :: type
    integer, intent(out) :: ierr
    ierr = c_FMMaskSetType(mask%ptr, cstr(type))
  end subroutine fm_mask_set_type

  ! fm_mask_get_type(mask, type, ierr): the type name (blank padded).
  subroutine fm_mask_get_type(mask, type, ierr)
    type(fm_mask), intent(in) :: mask
    character(len=*), intent(out) :: type
    integer, intent(out) :: ierr
    type(c_ptr) :: p
    p = c_null_ptr
    ierr = c_FMMaskGetType(mask%ptr, p)
    call c_FMFortranCopyString(p, type, int(len(type), c_int))
  end subroutine fm_mask_get_type

  ! fm_mask_set_causal(mask, causal, ierr): for type "bounds", add the causal triangle.
  subroutine fm_mask_set_causal(mask, causal, ierr)
    type(fm_mask), intent(in) :: mask
    logical, intent(in) :: causal
    integer, intent(out) :: ierr
    ierr = c_FMMaskSetCausal(mask%ptr, int(fbool(causal), c_int))
  end subroutine fm_mask_set_causal

  ! fm_mask_set_documents(mask, ndocs, lengths, ierr): lengths(1:ndocs) sum to seqlen_k.
  subroutine fm_mask_set_documents(mask, ndocs, lengths, ierr)
    type(fm_mask), intent(in) :: mask
    integer, intent(in) :: ndocs
    integer(c_int), intent(in) :: lengths(*)
    integer, intent(out) :: ierr
    ierr = c_FMMaskSetDocuments(mask%ptr, int(ndocs, c_int), lengths)
  end subroutine fm_mask_set_documents

  ! fm_mask_set_window(mask, left, right, ierr): sliding-window sizes in tokens.
  subroutine fm_mask_set_window(mask, left, right, ierr)
    type(fm_mask), intent(in) :: mask
    integer, intent(in) :: left, right
    integer, intent(out) :: ierr
    ierr = c_FMMaskSetWindow(mask%ptr, int(left, c_int), int(right, c_int))
  end subroutine fm_mask_set_window

  ! fm_mask_set_global_tokens(mask, nglobal, ierr).
  subroutine fm_mask_set_global_tokens(mask, nglobal, ierr)
    type(fm_mask), intent(in) :: mask
    integer, intent(in) :: nglobal
    integer, intent(out) :: ierr
    ierr = c_FMMaskSetGlobalTokens(mask%ptr, int(nglobal, c_int))
  end subroutine fm_mask_set_global_tokens

  ! fm_mask_set_prefix_lengths(mask, n, prefix, ierr): per-document prefixes (or n = 1).
  subroutine fm_mask_set_prefix_lengths(mask, n, prefix, ierr)
    type(fm_mask), intent(in) :: mask
    integer, intent(in) :: n
    integer(c_int), intent(in) :: prefix(*)
    integer, intent(out) :: ierr
    ierr = c_FMMaskSetPrefixLengths(mask%ptr, int(n, c_int), prefix)
  end subroutine fm_mask_set_prefix_lengths

  ! fm_mask_set_seed(mask, seed, ierr): seed of the random defaults (>= 0).
  subroutine fm_mask_set_seed(mask, seed, ierr)
    type(fm_mask), intent(in) :: mask
    integer, intent(in) :: seed
    integer, intent(out) :: ierr
    ierr = c_FMMaskSetSeed(mask%ptr, int(seed, c_long))
  end subroutine fm_mask_set_seed

  ! fm_mask_set_bounds(mask, head, lts, lte, uts, ute, ierr): user bounds of one head
  ! (0-based) for type "bounds". Each vector is an int32 array of seqlen_k row indices
  ! (0..seqlen_q) or absent; with absent vectors pass ierr by keyword, e.g.
  !   call fm_mask_set_bounds(mask, 0, lts=a, ute=b, ierr=ierr)
  subroutine fm_mask_set_bounds(mask, head, lts, lte, uts, ute, ierr)
    type(fm_mask), intent(in) :: mask
    integer, intent(in) :: head
    integer(c_int32_t), intent(in), target, optional :: lts(*), lte(*), uts(*), ute(*)
    integer, intent(out) :: ierr
    type(c_ptr) :: p(4)
    p = c_null_ptr
    if (present(lts)) p(1) = c_loc(lts(1))
    if (present(lte)) p(2) = c_loc(lte(1))
    if (present(uts)) p(3) = c_loc(uts(1))
    if (present(ute)) p(4) = c_loc(ute(1))
    ierr = c_FMMaskSetBounds(mask%ptr, int(head, c_int), p(1), p(2), p(3), p(4))
  end subroutine fm_mask_set_bounds

  ! fm_mask_set_sample_bounds(mask, sample, head, lts, lte, uts, ute, ierr): as
  ! fm_mask_set_bounds for one sample (0-based, below mask_batch) of a mask with a batch.
  subroutine fm_mask_set_sample_bounds(mask, sample, head, lts, lte, uts, ute, ierr)
    type(fm_mask), intent(in) :: mask
    integer, intent(in) :: sample, head
    integer(c_int32_t), intent(in), target, optional :: lts(*), lte(*), uts(*), ute(*)
    integer, intent(out) :: ierr
    type(c_ptr) :: p(4)
    p = c_null_ptr
    if (present(lts)) p(1) = c_loc(lts(1))
    if (present(lte)) p(2) = c_loc(lte(1))
    if (present(uts)) p(3) = c_loc(uts(1))
    if (present(ute)) p(4) = c_loc(ute(1))
    ierr = c_FMMaskSetSampleBounds(mask%ptr, int(sample, c_int), int(head, c_int), p(1), p(2), p(3), p(4))
  end subroutine fm_mask_set_sample_bounds

  ! fm_mask_set_batch(mask, mask_batch, ierr): 1 (shared by every sample) or the plans' batch.
  subroutine fm_mask_set_batch(mask, mask_batch, ierr)
    type(fm_mask), intent(in) :: mask
    integer, intent(in) :: mask_batch
    integer, intent(out) :: ierr
    ierr = c_FMMaskSetBatch(mask%ptr, int(mask_batch, c_int))
  end subroutine fm_mask_set_batch

  ! fm_mask_get_batch(mask, mask_batch, ierr).
  subroutine fm_mask_get_batch(mask, mask_batch, ierr)
    type(fm_mask), intent(in) :: mask
    integer, intent(out) :: mask_batch
    integer, intent(out) :: ierr
    integer(c_int) :: b
    b = 1
    ierr = c_FMMaskGetBatch(mask%ptr, b)
    mask_batch = int(b)
  end subroutine fm_mask_get_batch

  ! fm_mask_set_block_size(mask, block, ierr): block size of the summaries.
  subroutine fm_mask_set_block_size(mask, block, ierr)
    type(fm_mask), intent(in) :: mask
    integer, intent(in) :: block
    integer, intent(out) :: ierr
    ierr = c_FMMaskSetBlockSize(mask%ptr, int(block, c_int))
  end subroutine fm_mask_set_block_size

  ! fm_mask_set_from_options(mask, ierr): -fm_mask_* options. Collective.
  subroutine fm_mask_set_from_options(mask, ierr)
    type(fm_mask), intent(in) :: mask
    integer, intent(out) :: ierr
    ierr = c_FMMaskSetFromOptions(mask%ptr)
  end subroutine fm_mask_set_from_options

  ! fm_mask_set_up(mask, ierr): build, validate, summarize. Collective.
  subroutine fm_mask_set_up(mask, ierr)
    type(fm_mask), intent(in) :: mask
    integer, intent(out) :: ierr
    ierr = c_FMMaskSetUp(mask%ptr)
  end subroutine fm_mask_set_up

  ! fm_mask_get_sizes(mask, seqlen_q, seqlen_k, mask_heads, ierr).
  subroutine fm_mask_get_sizes(mask, seqlen_q, seqlen_k, mask_heads, ierr)
    type(fm_mask), intent(in) :: mask
    integer, intent(out) :: seqlen_q, seqlen_k, mask_heads
    integer, intent(out) :: ierr
    integer(c_int) :: a, b, c
    a = 0; b = 0; c = 0
    ierr = c_FMMaskGetSizes(mask%ptr, a, b, c)
    seqlen_q = int(a); seqlen_k = int(b); mask_heads = int(c)
  end subroutine fm_mask_get_sizes

  ! fm_mask_get_density(mask, density, sparsity, ierr): element density (fraction not
  ! masked) and block sparsity (fraction of fully masked tiles), after set-up.
  subroutine fm_mask_get_density(mask, density, sparsity, ierr)
    type(fm_mask), intent(in) :: mask
    real(c_double), intent(out) :: density, sparsity
    integer, intent(out) :: ierr
    ierr = c_FMMaskGetDensity(mask%ptr, density, sparsity)
  end subroutine fm_mask_get_density

  ! fm_mask_is_masked(mask, head, i, j, masked, ierr): whether row i may not see key j
  ! (all indices 0-based).
  subroutine fm_mask_is_masked(mask, head, i, j, masked, ierr)
    type(fm_mask), intent(in) :: mask
    integer, intent(in) :: head, i, j
    logical, intent(out) :: masked
    integer, intent(out) :: ierr
    integer(c_int) :: m
    m = 0
    ierr = c_FMMaskIsMasked(mask%ptr, int(head, c_int), int(i, c_int), int(j, c_int), m)
    masked = m /= 0
  end subroutine fm_mask_is_masked

  ! fm_mask_view(mask, ierr): print the mask on standard output. Collective.
  subroutine fm_mask_view(mask, ierr)
    type(fm_mask), intent(in) :: mask
    integer, intent(out) :: ierr
    call flush_both()
    ierr = c_FMFortranMaskView(mask%ptr)
  end subroutine fm_mask_view

  ! fm_mask_save(mask, path, name, ierr): write /masks/<name> of an HDF5 file. Collective.
  subroutine fm_mask_save(mask, path, name, ierr)
    type(fm_mask), intent(in) :: mask
    character(len=*), intent(in) :: path, name
    integer, intent(out) :: ierr
    ierr = c_FMMaskSave(mask%ptr, cstr(path), cstr(name))
  end subroutine fm_mask_save

  ! fm_mask_load(ctx, path, name, mask, ierr): read /masks/<name> into a new, set-up mask
  ! of type "bounds". Collective.
  subroutine fm_mask_load(ctx, path, name, mask, ierr)
    type(fm_context), intent(in) :: ctx
    character(len=*), intent(in) :: path, name
    type(fm_mask), intent(out) :: mask
    integer, intent(out) :: ierr
    ierr = c_FMMaskLoad(ctx%ptr, cstr(path), cstr(name), mask%ptr)
  end subroutine fm_mask_load

  ! fm_mask_destroy(mask, ierr): drop the reference; mask%ptr becomes null. Collective.
  subroutine fm_mask_destroy(mask, ierr)
    type(fm_mask), intent(inout) :: mask
    integer, intent(out) :: ierr
    ierr = c_FMMaskDestroy(mask%ptr)
  end subroutine fm_mask_destroy

  ! ------------------------------------------------------------------ FMPlan
  ! fm_plan_create(ctx, plan, ierr). Collective.
  subroutine fm_plan_create(ctx, plan, ierr)
    type(fm_context), intent(in) :: ctx
    type(fm_plan), intent(out) :: plan
    integer, intent(out) :: ierr
    ierr = c_FMPlanCreate(ctx%ptr, plan%ptr)
  end subroutine fm_plan_create

  ! fm_plan_set_mask(plan, mask, ierr): the plan takes a reference on the mask.
  subroutine fm_plan_set_mask(plan, mask, ierr)
    type(fm_plan), intent(in) :: plan
    type(fm_mask), intent(in) :: mask
    integer, intent(out) :: ierr
    ierr = c_FMPlanSetMask(plan%ptr, mask%ptr)
  end subroutine fm_plan_set_mask

  ! fm_plan_set_shape(plan, batch, heads_q, heads_kv, head_dim, dtype, ierr):
  ! dtype FM_DTYPE_BF16, FM_DTYPE_FP16 or FM_DTYPE_FP32.
  subroutine fm_plan_set_shape(plan, batch, heads_q, heads_kv, head_dim, dtype, ierr)
    type(fm_plan), intent(in) :: plan
    integer, intent(in) :: batch, heads_q, heads_kv, head_dim, dtype
    integer, intent(out) :: ierr
    ierr = c_FMPlanSetShape(plan%ptr, int(batch, c_int), int(heads_q, c_int), int(heads_kv, c_int), &
                            int(head_dim, c_int), int(dtype, c_int))
  end subroutine fm_plan_set_shape

  ! fm_plan_set_scale(plan, scale, ierr): softmax scale (default 1/sqrt(head_dim)).
  subroutine fm_plan_set_scale(plan, scale, ierr)
    type(fm_plan), intent(in) :: plan
    real(c_double), intent(in) :: scale
    integer, intent(out) :: ierr
    ierr = c_FMPlanSetScale(plan%ptr, scale)
  end subroutine fm_plan_set_scale

  ! fm_plan_get_scale(plan, scale, ierr): the scale as set, else 1/sqrt(head_dim).
  subroutine fm_plan_get_scale(plan, scale, ierr)
    type(fm_plan), intent(in) :: plan
    real(c_double), intent(out) :: scale
    integer, intent(out) :: ierr
    ierr = c_FMPlanGetScale(plan%ptr, scale)
  end subroutine fm_plan_get_scale

  ! fm_plan_set_from_options(plan, ierr): -fm_plan_* options. Collective.
  subroutine fm_plan_set_from_options(plan, ierr)
    type(fm_plan), intent(in) :: plan
    integer, intent(out) :: ierr
    ierr = c_FMPlanSetFromOptions(plan%ptr)
  end subroutine fm_plan_set_from_options

  ! fm_plan_set_up(plan, ierr). Collective.
  subroutine fm_plan_set_up(plan, ierr)
    type(fm_plan), intent(in) :: plan
    integer, intent(out) :: ierr
    ierr = c_FMPlanSetUp(plan%ptr)
  end subroutine fm_plan_set_up

  ! fm_copy_indices(n, p, out): copy a borrowed C int array of n entries into out (reallocated).
  subroutine fm_copy_indices(n, p, out)
    integer(c_int), intent(in) :: n
    type(c_ptr), intent(in) :: p
    integer, allocatable, intent(inout) :: out(:)
    integer(c_int), pointer :: r(:)
    if (allocated(out)) deallocate(out)
    allocate(out(n))
    if (n > 0) then
      call c_f_pointer(p, r, [n])
      out(1:n) = int(r(1:n))
    end if
  end subroutine fm_copy_indices

  ! fm_plan_get_local_rows(plan, nlocal, rows, ierr): the number of query rows this rank
  ! owns and their 0-based global indices, in the order the local tensors hold them
  ! (rows is allocated here with size nlocal).
  subroutine fm_plan_get_local_rows(plan, nlocal, rows, ierr)
    type(fm_plan), intent(in) :: plan
    integer, intent(out) :: nlocal
    integer, allocatable, intent(inout) :: rows(:)
    integer, intent(out) :: ierr
    integer(c_int) :: n
    type(c_ptr) :: p
    n = 0
    p = c_null_ptr
    ierr = c_FMPlanGetLocalRows(plan%ptr, n, p)
    nlocal = int(n)
    if (ierr /= 0) return
    call fm_copy_indices(n, p, rows)
  end subroutine fm_plan_get_local_rows

  ! fm_plan_get_local_keys(plan, nkeys, keys, ierr): the key positions whose K and V this
  ! rank holds (all seqlen_k on one rank) and their 0-based global indices, in the order
  ! the local k, v, dk, dv hold them (keys is allocated here with size nkeys).
  subroutine fm_plan_get_local_keys(plan, nkeys, keys, ierr)
    type(fm_plan), intent(in) :: plan
    integer, intent(out) :: nkeys
    integer, allocatable, intent(inout) :: keys(:)
    integer, intent(out) :: ierr
    integer(c_int) :: n
    type(c_ptr) :: p
    n = 0
    p = c_null_ptr
    ierr = c_FMPlanGetLocalKeys(plan%ptr, n, p)
    nkeys = int(n)
    if (ierr /= 0) return
    call fm_copy_indices(n, p, keys)
  end subroutine fm_plan_get_local_keys

  ! fm_plan_scatter(plan, kind, root, global, local, ierr): distribute a tensor held whole
  ! on rank root (global: c_loc of it there, c_null_ptr elsewhere) into this rank's local
  ! layout. kind FM_PLAN_TENSOR_Q (q, o, dout, dq), _KV (k, v, dk, dv) or _LSE. Collective.
  subroutine fm_plan_scatter(plan, kind, root, global, local, ierr)
    type(fm_plan), intent(in) :: plan
    integer, intent(in) :: kind, root
    type(c_ptr), intent(in) :: global, local
    integer, intent(out) :: ierr
    ierr = c_FMPlanScatter(plan%ptr, int(kind, c_int), int(root, c_int), global, local)
  end subroutine fm_plan_scatter

  ! fm_plan_gather(plan, kind, root, local, global, ierr): the inverse of fm_plan_scatter;
  ! the global tensor is assembled on root. Collective.
  subroutine fm_plan_gather(plan, kind, root, local, global, ierr)
    type(fm_plan), intent(in) :: plan
    integer, intent(in) :: kind, root
    type(c_ptr), intent(in) :: local, global
    integer, intent(out) :: ierr
    ierr = c_FMPlanGather(plan%ptr, int(kind, c_int), int(root, c_int), local, global)
  end subroutine fm_plan_gather

  ! fm_plan_get_flops(plan, flops, ierr): forward FLOPs, FlashMask convention.
  subroutine fm_plan_get_flops(plan, flops, ierr)
    type(fm_plan), intent(in) :: plan
    real(c_double), intent(out) :: flops
    integer, intent(out) :: ierr
    ierr = c_FMPlanGetFlops(plan%ptr, flops)
  end subroutine fm_plan_get_flops

  ! fm_plan_forward(plan, q, k, v, o, lse, ierr): O and LSE. Arguments are c_loc() of
  ! contiguous arrays of the plan's dtype (real(c_float) for FP32, integer(c_int16_t)
  ! holding the bit patterns for BF16/FP16):
  !   q, o  (head_dim, heads_q, nlocal, batch)    rows from fm_plan_get_local_rows
  !   k, v  (head_dim, heads_kv, nkeys, batch)    keys from fm_plan_get_local_keys
  !                                               (nkeys = seqlen_k on one rank)
  !   lse   real(c_float) (nlocal, heads_q, batch), or c_null_ptr
  ! Device pointers on the CUDA backend. Collective.
  subroutine fm_plan_forward(plan, q, k, v, o, lse, ierr)
    type(fm_plan), intent(in) :: plan
    type(c_ptr), intent(in) :: q, k, v, o, lse
    integer, intent(out) :: ierr
    ierr = c_FMPlanForward(plan%ptr, q, k, v, o, lse)
  end subroutine fm_plan_forward

  ! fm_plan_backward(plan, q, k, v, o, lse, dout, dq, dk, dv, ierr): gradients; dout, dq
  ! shaped as q, dk, dv as the local k. Collective.
  subroutine fm_plan_backward(plan, q, k, v, o, lse, dout, dq, dk, dv, ierr)
    type(fm_plan), intent(in) :: plan
    type(c_ptr), intent(in) :: q, k, v, o, lse, dout, dq, dk, dv
    integer, intent(out) :: ierr
    ierr = c_FMPlanBackward(plan%ptr, q, k, v, o, lse, dout, dq, dk, dv)
  end subroutine fm_plan_backward

  ! fm_plan_view(plan, ierr): print the plan on standard output. Collective.
  subroutine fm_plan_view(plan, ierr)
    type(fm_plan), intent(in) :: plan
    integer, intent(out) :: ierr
    call flush_both()
    ierr = c_FMFortranPlanView(plan%ptr)
  end subroutine fm_plan_view

  ! fm_plan_destroy(plan, ierr): drop the reference; plan%ptr becomes null. Collective.
  subroutine fm_plan_destroy(plan, ierr)
    type(fm_plan), intent(inout) :: plan
    integer, intent(out) :: ierr
    ierr = c_FMPlanDestroy(plan%ptr)
  end subroutine fm_plan_destroy

  ! ------------------------------------------------------------------ options prefixes, plan type, cp settings
  ! fm_context_set_options_prefix(context, prefix, ierr): the prefix FMContextSetFromOptions puts after the dash of each option (blank: none).
  subroutine fm_context_set_options_prefix(context, prefix, ierr)
    type(fm_context), intent(in) :: context
    character(len=*), intent(in) :: prefix
    integer, intent(out) :: ierr
    ierr = c_FMContextSetOptionsPrefix(context%ptr, cstr(prefix))
  end subroutine fm_context_set_options_prefix

  ! fm_context_get_options_prefix(context, prefix, ierr): the prefix (blank when none).
  subroutine fm_context_get_options_prefix(context, prefix, ierr)
    type(fm_context), intent(in) :: context
    character(len=*), intent(out) :: prefix
    integer, intent(out) :: ierr
    type(c_ptr) :: p
    p = c_null_ptr
    ierr = c_FMContextGetOptionsPrefix(context%ptr, p)
    call c_FMFortranCopyString(p, prefix, int(len(prefix), c_int))
  end subroutine fm_context_get_options_prefix

  ! fm_mask_set_options_prefix(mask, prefix, ierr): the prefix FMMaskSetFromOptions puts after the dash of each option (blank: none).
  subroutine fm_mask_set_options_prefix(mask, prefix, ierr)
    type(fm_mask), intent(in) :: mask
    character(len=*), intent(in) :: prefix
    integer, intent(out) :: ierr
    ierr = c_FMMaskSetOptionsPrefix(mask%ptr, cstr(prefix))
  end subroutine fm_mask_set_options_prefix

  ! fm_mask_get_options_prefix(mask, prefix, ierr): the prefix (blank when none).
  subroutine fm_mask_get_options_prefix(mask, prefix, ierr)
    type(fm_mask), intent(in) :: mask
    character(len=*), intent(out) :: prefix
    integer, intent(out) :: ierr
    type(c_ptr) :: p
    p = c_null_ptr
    ierr = c_FMMaskGetOptionsPrefix(mask%ptr, p)
    call c_FMFortranCopyString(p, prefix, int(len(prefix), c_int))
  end subroutine fm_mask_get_options_prefix

  ! fm_plan_set_options_prefix(plan, prefix, ierr): the prefix FMPlanSetFromOptions puts after the dash of each option (blank: none).
  subroutine fm_plan_set_options_prefix(plan, prefix, ierr)
    type(fm_plan), intent(in) :: plan
    character(len=*), intent(in) :: prefix
    integer, intent(out) :: ierr
    ierr = c_FMPlanSetOptionsPrefix(plan%ptr, cstr(prefix))
  end subroutine fm_plan_set_options_prefix

  ! fm_plan_get_options_prefix(plan, prefix, ierr): the prefix (blank when none).
  subroutine fm_plan_get_options_prefix(plan, prefix, ierr)
    type(fm_plan), intent(in) :: plan
    character(len=*), intent(out) :: prefix
    integer, intent(out) :: ierr
    type(c_ptr) :: p
    p = c_null_ptr
    ierr = c_FMPlanGetOptionsPrefix(plan%ptr, p)
    call c_FMFortranCopyString(p, prefix, int(len(prefix), c_int))
  end subroutine fm_plan_get_options_prefix

  ! fm_plan_set_type(plan, type, ierr): FMPLANLOCAL or FMPLANCP (option -fm_plan_type).
  subroutine fm_plan_set_type(plan, type, ierr)
    type(fm_plan), intent(in) :: plan
    character(len=*), intent(in) :: type
    integer, intent(out) :: ierr
    ierr = c_FMPlanSetType(plan%ptr, cstr(type))
  end subroutine fm_plan_set_type

  ! fm_plan_get_type(plan, type, ierr): the type (blank before one is set or defaulted).
  subroutine fm_plan_get_type(plan, type, ierr)
    type(fm_plan), intent(in) :: plan
    character(len=*), intent(out) :: type
    integer, intent(out) :: ierr
    type(c_ptr) :: p
    p = c_null_ptr
    ierr = c_FMPlanGetType(plan%ptr, p)
    call c_FMFortranCopyString(p, type, int(len(type), c_int))
  end subroutine fm_plan_get_type

  ! fm_plan_set_partition(plan, partition, ierr): "contiguous", "dual_chunk" or "balanced" (-fm_plan_partition).
  subroutine fm_plan_set_partition(plan, partition, ierr)
    type(fm_plan), intent(in) :: plan
    character(len=*), intent(in) :: partition
    integer, intent(out) :: ierr
    ierr = c_FMPlanSetPartition(plan%ptr, cstr(partition))
  end subroutine fm_plan_set_partition

  ! fm_plan_get_partition(plan, partition, ierr): the partition.
  subroutine fm_plan_get_partition(plan, partition, ierr)
    type(fm_plan), intent(in) :: plan
    character(len=*), intent(out) :: partition
    integer, intent(out) :: ierr
    type(c_ptr) :: p
    p = c_null_ptr
    ierr = c_FMPlanGetPartition(plan%ptr, p)
    call c_FMFortranCopyString(p, partition, int(len(partition), c_int))
  end subroutine fm_plan_get_partition

  ! fm_plan_set_chunk(plan, rows, ierr): query rows per chunk, 0 = default (-fm_plan_chunk).
  subroutine fm_plan_set_chunk(plan, rows, ierr)
    type(fm_plan), intent(in) :: plan
    integer, intent(in) :: rows
    integer, intent(out) :: ierr
    ierr = c_FMPlanSetChunk(plan%ptr, int(rows, c_int))
  end subroutine fm_plan_set_chunk

  ! fm_plan_get_chunk(plan, rows, ierr): the chunk setting.
  subroutine fm_plan_get_chunk(plan, rows, ierr)
    type(fm_plan), intent(in) :: plan
    integer, intent(out) :: rows
    integer, intent(out) :: ierr
    integer(c_int) :: n
    n = 0
    ierr = c_FMPlanGetChunk(plan%ptr, n)
    rows = int(n)
  end subroutine fm_plan_get_chunk

  ! fm_plan_set_partial_cost(plan, cost, ierr): balancer cost of a partial tile (-fm_plan_partial_cost).
  subroutine fm_plan_set_partial_cost(plan, cost, ierr)
    type(fm_plan), intent(in) :: plan
    real(c_double), intent(in) :: cost
    integer, intent(out) :: ierr
    ierr = c_FMPlanSetPartialCost(plan%ptr, cost)
  end subroutine fm_plan_set_partial_cost

  ! fm_plan_get_partial_cost(plan, cost, ierr): the partial-tile cost.
  subroutine fm_plan_get_partial_cost(plan, cost, ierr)
    type(fm_plan), intent(in) :: plan
    real(c_double), intent(out) :: cost
    integer, intent(out) :: ierr
    ierr = c_FMPlanGetPartialCost(plan%ptr, cost)
  end subroutine fm_plan_get_partial_cost

  ! fm_plan_set_row_cost(plan, cost, ierr): balancer fixed cost of a query tile (-fm_plan_row_cost).
  subroutine fm_plan_set_row_cost(plan, cost, ierr)
    type(fm_plan), intent(in) :: plan
    real(c_double), intent(in) :: cost
    integer, intent(out) :: ierr
    ierr = c_FMPlanSetRowCost(plan%ptr, cost)
  end subroutine fm_plan_set_row_cost

  ! fm_plan_get_row_cost(plan, cost, ierr): the query-tile cost.
  subroutine fm_plan_get_row_cost(plan, cost, ierr)
    type(fm_plan), intent(in) :: plan
    real(c_double), intent(out) :: cost
    integer, intent(out) :: ierr
    ierr = c_FMPlanGetRowCost(plan%ptr, cost)
  end subroutine fm_plan_get_row_cost

  ! fm_plan_set_route(plan, route, ierr): "flat" or "hierarchical" (-fm_plan_route).
  subroutine fm_plan_set_route(plan, route, ierr)
    type(fm_plan), intent(in) :: plan
    character(len=*), intent(in) :: route
    integer, intent(out) :: ierr
    ierr = c_FMPlanSetRoute(plan%ptr, cstr(route))
  end subroutine fm_plan_set_route

  ! fm_plan_get_route(plan, route, ierr): the route.
  subroutine fm_plan_get_route(plan, route, ierr)
    type(fm_plan), intent(in) :: plan
    character(len=*), intent(out) :: route
    integer, intent(out) :: ierr
    type(c_ptr) :: p
    p = c_null_ptr
    ierr = c_FMPlanGetRoute(plan%ptr, p)
    call c_FMFortranCopyString(p, route, int(len(route), c_int))
  end subroutine fm_plan_get_route

  ! fm_plan_set_virtual_nodes(plan, nodes, ierr): virtual nodes, 0 = real topology (-fm_plan_nodes).
  subroutine fm_plan_set_virtual_nodes(plan, nodes, ierr)
    type(fm_plan), intent(in) :: plan
    integer, intent(in) :: nodes
    integer, intent(out) :: ierr
    ierr = c_FMPlanSetVirtualNodes(plan%ptr, int(nodes, c_int))
  end subroutine fm_plan_set_virtual_nodes

  ! fm_plan_set_schedule(plan, schedule, ierr): "gather" or "ring" (-fm_plan_schedule).
  subroutine fm_plan_set_schedule(plan, schedule, ierr)
    type(fm_plan), intent(in) :: plan
    character(len=*), intent(in) :: schedule
    integer, intent(out) :: ierr
    ierr = c_FMPlanSetSchedule(plan%ptr, cstr(schedule))
  end subroutine fm_plan_set_schedule

  ! fm_plan_get_schedule(plan, schedule, ierr): the schedule.
  subroutine fm_plan_get_schedule(plan, schedule, ierr)
    type(fm_plan), intent(in) :: plan
    character(len=*), intent(out) :: schedule
    integer, intent(out) :: ierr
    type(c_ptr) :: p
    p = c_null_ptr
    ierr = c_FMPlanGetSchedule(plan%ptr, p)
    call c_FMFortranCopyString(p, schedule, int(len(schedule), c_int))
  end subroutine fm_plan_get_schedule

  ! fm_plan_set_prune(plan, prune, ierr): never move K/V no local query sees (-fm_plan_prune).
  subroutine fm_plan_set_prune(plan, prune, ierr)
    type(fm_plan), intent(in) :: plan
    logical, intent(in) :: prune
    integer, intent(out) :: ierr
    ierr = c_FMPlanSetPrune(plan%ptr, int(fbool(prune), c_int))
  end subroutine fm_plan_set_prune

  ! fm_plan_set_overlap(plan, overlap, ierr): compute while K/V moves (-fm_plan_overlap).
  subroutine fm_plan_set_overlap(plan, overlap, ierr)
    type(fm_plan), intent(in) :: plan
    logical, intent(in) :: overlap
    integer, intent(out) :: ierr
    ierr = c_FMPlanSetOverlap(plan%ptr, int(fbool(overlap), c_int))
  end subroutine fm_plan_set_overlap

  ! fm_plan_set_transport(plan, transport, ierr): "auto", "nccl" or "mpi" (-fm_plan_transport).
  subroutine fm_plan_set_transport(plan, transport, ierr)
    type(fm_plan), intent(in) :: plan
    character(len=*), intent(in) :: transport
    integer, intent(out) :: ierr
    ierr = c_FMPlanSetTransport(plan%ptr, cstr(transport))
  end subroutine fm_plan_set_transport

  ! fm_plan_set_gpu_aware_mpi(plan, aware, ierr): "auto", "0" or "1" (-fm_gpu_aware_mpi).
  subroutine fm_plan_set_gpu_aware_mpi(plan, aware, ierr)
    type(fm_plan), intent(in) :: plan
    character(len=*), intent(in) :: aware
    integer, intent(out) :: ierr
    ierr = c_FMPlanSetGPUAwareMPI(plan%ptr, cstr(aware))
  end subroutine fm_plan_set_gpu_aware_mpi

  ! fm_plan_set_step_chunks(plan, chunks, ierr): K/V chunks per peer and GPU exchange step, 0 = all (-fm_plan_step_chunks).
  subroutine fm_plan_set_step_chunks(plan, chunks, ierr)
    type(fm_plan), intent(in) :: plan
    integer, intent(in) :: chunks
    integer, intent(out) :: ierr
    ierr = c_FMPlanSetStepChunks(plan%ptr, int(chunks, c_int))
  end subroutine fm_plan_set_step_chunks

  ! fm_plan_set_trace(plan, path, view, ierr): trace every forward/backward into the HDF5 file
  ! path (blank: no trace); view prints the summary (-fm_trace, -fm_trace_view).
  subroutine fm_plan_set_trace(plan, path, view, ierr)
    type(fm_plan), intent(in) :: plan
    character(len=*), intent(in) :: path
    logical, intent(in) :: view
    integer, intent(out) :: ierr
    ierr = c_FMPlanSetTrace(plan%ptr, cstr(path), int(fbool(view), c_int))
  end subroutine fm_plan_set_trace

end module flashmask
