! test_fortran - the Fortran module `flashmask`.
!
! * a causal_document mask with random document lengths: its density against the value
!   computed here from the lengths (sum L(L+1)/2 / S^2), and entries via fm_mask_is_masked;
! * a "bounds" mask given through the optional arguments of fm_mask_set_bounds (lts and
!   ute only): density against sum(lts - ute) / S^2; two heads at once by fm_mask_set_all_bounds
!   (entries by head, and a bad entry named by sample, head and column);
! * an FP32 forward and backward through a plan on fresh random inputs (poisoned outputs),
!   against a naive float64 attention written here in Fortran (O, LSE, dQ, dK, dV);
! * error returns: bad sizes, bad type name, GQA mismatch, forward before set-up;
! * contexts from an integer communicator and (with mpi_f08) from a type(MPI_Comm);
! * options from FM_OPTIONS (the .sh sets -fm_fortran_check 17 on one run) and set/get;
! * options prefixes of the three objects, the plan type and the context-parallel setters
!   and getters (a prefixed option over a setter);
! * fm_plan_scatter / fm_plan_gather against the local slices and the reference;
! * fm_mask_save / fm_mask_load round trip (skipped when the build has no HDF5).
! Usage: test_fortran [FILE.h5]. Exit 0 pass, 1 fail, 99 hard error.

#ifndef FM_HAVE_MPI_F08
#define FM_HAVE_MPI_F08 1
#endif

program test_fortran
  use, intrinsic :: iso_c_binding
  use, intrinsic :: iso_fortran_env, only: error_unit, int64
  use, intrinsic :: ieee_arithmetic, only: ieee_value, ieee_quiet_nan, ieee_is_nan
  use mpi
  use flashmask
  implicit none

  integer, parameter :: B = 2, HQ = 4, HKV = 2, D = 16
  integer :: ierr, rank, nranks, nfail, S, ndocs, i, j, h, bb, il, hk, jj, nlocal, nkeys, total, S2
  integer(int64) :: seed, state
  integer(c_int), allocatable :: docs(:)
  integer, allocatable :: docid(:), rows(:), keys(:)
  integer(c_int32_t), allocatable :: lts(:), ute(:), lts2(:,:), got(:), got2(:)
  real(c_double) :: dens, spars, expect, scale, err, nrm
  type(fm_context) :: ctx
  type(fm_mask) :: mask, mask2, mask3, loaded
  type(fm_plan) :: plan, plan2
  real(c_float), allocatable, target :: q(:,:,:,:), k(:,:,:,:), v(:,:,:,:), o(:,:,:,:), lse(:,:,:)
  real(c_float), allocatable, target :: kf(:,:,:,:), vf(:,:,:,:), qg(:,:,:,:), qs(:,:,:,:), og(:,:,:,:)
  real(c_float), allocatable, target :: dout(:,:,:,:), dq(:,:,:,:), dk(:,:,:,:), dv(:,:,:,:)
  real(c_double), allocatable :: qf(:,:,:,:), dof(:,:,:,:), oref(:,:,:,:), lref(:,:,:), dqref(:,:,:,:), dkref(:,:,:,:), &
    dvref(:,:,:,:), p(:), ds(:)
  logical :: masked, want
  character(len=512) :: msg, path
  character(len=64) :: tname

  nfail = 0
  call fm_initialize(ierr)
  if (ierr /= 0) call hard('fm_initialize', ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)

  ! fresh random inputs: a time-based seed from rank 0 (FMTEST_SEED replays one)
  call get_environment_variable('FMTEST_SEED', msg, status=ierr)
  if (ierr == 0) then
    read (msg, *) seed
  else
    call system_clock(seed)
  end if
  call MPI_Bcast(seed, 1, MPI_INTEGER8, 0, MPI_COMM_WORLD, ierr)
  if (rank == 0) write (*, '(a,i0)') 'FMTEST_SEED=', seed
  state = mod(abs(seed), 2147483646_int64) + 1

  ! ------------------------------------------------------------ context (integer handle)
  call fm_context_create(MPI_COMM_WORLD, ctx, ierr)
  if (ierr /= 0) call hard('fm_context_create', ierr)
  call fm_context_set_backend(ctx, FM_BACKEND_CPU, ierr)
  if (ierr /= 0) call hard('fm_context_set_backend', ierr)
  call fm_context_set_nccl_timeout(ctx, 4.5d0, ierr)
  if (ierr /= 0) call hard('fm_context_set_nccl_timeout', ierr)
  call fm_context_get_nccl_timeout(ctx, err, ierr)
  call check(ierr == 0 .and. err == 4.5d0, 'fm_context_get_nccl_timeout does not give back 4.5')
  call fm_context_set_up(ctx, ierr)
  if (ierr /= 0) call hard('fm_context_set_up', ierr)
  ! the context's communicator: a duplicate of the one given (congruent, not identical)
  call fm_context_get_comm(ctx, i, ierr)
  call MPI_Comm_compare(i, MPI_COMM_WORLD, j, h)
  call check(ierr == 0 .and. j == MPI_CONGRUENT, 'fm_context_get_comm is not a duplicate of MPI_COMM_WORLD')
#if FM_HAVE_MPI_F08
  call f08_context()
#endif

  ! ------------------------------------------------------------ causal_document mask
  S = 96 + int(mod(next(), 64_int64))
  ndocs = 3 + int(mod(next(), 3_int64))
  allocate (docs(ndocs), docid(0:S - 1))
  total = 0
  do i = 1, ndocs - 1
    docs(i) = 5 + int(mod(next(), int(S / ndocs, int64)))
    total = total + docs(i)
  end do
  docs(ndocs) = S - total
  total = 0
  do i = 1, ndocs
    docid(total:total + docs(i) - 1) = i
    total = total + docs(i)
  end do
  call fm_mask_create(ctx, mask, ierr)
  if (ierr /= 0) call hard('fm_mask_create', ierr)
  call fm_mask_set_sizes(mask, S, S, 1, ierr)
  if (ierr /= 0) call hard('fm_mask_set_sizes', ierr)
  call fm_mask_set_type(mask, FMMASKCAUSALDOCUMENT, ierr)
  if (ierr /= 0) call hard('fm_mask_set_type', ierr)
  call fm_mask_set_documents(mask, ndocs, docs, ierr)
  if (ierr /= 0) call hard('fm_mask_set_documents', ierr)
  call fm_mask_set_block_size(mask, 32, ierr)
  if (ierr /= 0) call hard('fm_mask_set_block_size', ierr)
  call fm_mask_set_up(mask, ierr)
  if (ierr /= 0) call hard('fm_mask_set_up', ierr)
  call fm_mask_get_type(mask, tname, ierr)
  call check(ierr == 0 .and. tname == 'causal_document', 'fm_mask_get_type gave "'//trim(tname)//'"')
  call fm_mask_get_density(mask, dens, spars, ierr)
  if (ierr /= 0) call hard('fm_mask_get_density', ierr)
  expect = 0
  do i = 1, ndocs
    expect = expect + real(docs(i), c_double) * (docs(i) + 1) / 2
  end do
  expect = expect / (real(S, c_double) * S)
  call check(abs(dens - expect) < 1d-12, 'causal_document density differs from sum L(L+1)/2 / S^2')
  if (abs(dens - expect) >= 1d-12) write (error_unit, *) '  density', dens, 'expected', expect
  call check(spars > 0 .and. spars < 1, 'causal_document block sparsity not in (0, 1)')
  do i = 0, S - 1, 7
    do j = 0, S - 1, 5
      call fm_mask_is_masked(mask, 0, i, j, masked, ierr)
      want = .not. (j <= i .and. docid(i) == docid(j))
      call check(ierr == 0 .and. (masked .eqv. want), 'fm_mask_is_masked disagrees with the document definition')
    end do
  end do
  call fm_mask_view(mask, ierr)
  call check(ierr == 0, 'fm_mask_view failed')

  ! ------------------------------------------------------------ bounds through optional arguments
  S2 = 40 + int(mod(next(), 30_int64))
  allocate (lts(S2), ute(S2))
  do j = 1, S2
    lts(j) = int(mod(next(), int(S2 + 1, int64)), c_int32_t)
    ute(j) = int(mod(next(), int(lts(j) + 1, int64)), c_int32_t)
  end do
  call fm_mask_create(ctx, mask2, ierr)
  if (ierr /= 0) call hard('fm_mask_create', ierr)
  call fm_mask_set_sizes(mask2, S2, S2, 1, ierr)
  call fm_mask_set_type(mask2, FMMASKBOUNDS, ierr)
  call fm_mask_set_bounds(mask2, 0, lts=lts, ute=ute, ierr=ierr)
  if (ierr /= 0) call hard('fm_mask_set_bounds', ierr)
  call fm_mask_set_up(mask2, ierr)
  if (ierr /= 0) call hard('fm_mask_set_up (bounds)', ierr)
  call fm_mask_get_density(mask2, dens, spars, ierr)
  expect = real(sum(int(lts) - int(ute)), c_double) / (real(S2, c_double) * S2)
  call check(ierr == 0 .and. abs(dens - expect) < 1d-12, 'bounds density differs from sum(lts - ute) / S^2')
  do j = 1, S2, 3
    do i = 0, S2 - 1, 2
      call fm_mask_is_masked(mask2, 0, i, j - 1, masked, ierr)
      want = i >= lts(j) .or. i < ute(j)
      call check(ierr == 0 .and. (masked .eqv. want), 'fm_mask_is_masked disagrees with lts/ute given from Fortran')
    end do
  end do
  ! every head in one call: lts of shape (seqlen_k, mask_heads), head 2 the reverse of head 1
  allocate (lts2(S2, 2))
  lts2(:, 1) = lts
  lts2(:, 2) = lts(S2:1:-1)
  call fm_mask_create(ctx, mask3, ierr)
  if (ierr /= 0) call hard('fm_mask_create', ierr)
  call fm_mask_set_sizes(mask3, S2, S2, 2, ierr)
  call fm_mask_set_type(mask3, FMMASKBOUNDS, ierr)
  call fm_mask_set_all_bounds(mask3, lts=lts2, ierr=ierr)
  if (ierr /= 0) call hard('fm_mask_set_all_bounds', ierr)
  call fm_mask_set_up(mask3, ierr)
  if (ierr /= 0) call hard('fm_mask_set_up (all bounds)', ierr)
  do j = 1, S2, 3
    do i = 0, S2 - 1, 2
      call fm_mask_is_masked(mask3, 1, i, j - 1, masked, ierr)
      want = i >= lts2(j, 2)
      call check(ierr == 0 .and. (masked .eqv. want), 'fm_mask_set_all_bounds: head 1 disagrees with lts2(:, 2)')
    end do
  end do
  ! the set-up vectors read back: head 1's lts as given, lte in its default form (seqlen_q)
  allocate (got(S2), got2(S2))
  got = -7; got2 = -7
  call fm_mask_get_sample_bounds(mask3, 0, 1, lts=got, lte=got2, vectors=i, causal=want, ierr=ierr)
  call check(ierr == 0 .and. all(got == lts2(:, 2)) .and. all(got2 == S2) .and. i == FM_BOUND_LTS .and. .not. want, &
             'fm_mask_get_sample_bounds does not give back head 1 as set')
  deallocate (got, got2)
  lts2(3, 2) = -1
  call fm_push_error_handler(FM_ERROR_HANDLER_SILENT, ierr)
  call fm_mask_set_all_bounds(mask3, lts=lts2, ierr=ierr)
  call fm_get_last_error_message(msg)
  call fm_pop_error_handler(j)
  call check(ierr /= 0 .and. index(msg, 'sample 0, head 1: lts[2] = -1') > 0, &
             'fm_mask_set_all_bounds: a bad entry is not named by sample, head and column')
  call fm_mask_destroy(mask3, ierr)
  deallocate (lts2)
  ! qk_sparse with one given span [4, 9) of 16: a key inside is hidden from the queries inside
  ! the span at or after it, visible from the span's end on; a key outside is not hidden
  call fm_mask_create(ctx, mask3, ierr)
  call fm_mask_set_sizes(mask3, 16, 16, 1, ierr)
  call fm_mask_set_type(mask3, FMMASKQKSPARSE, ierr)
  call fm_mask_set_qk_sparse_spans(mask3, 1, [4_c_int], [5_c_int], ierr)
  if (ierr /= 0) call hard('fm_mask_set_qk_sparse_spans', ierr)
  call fm_mask_set_up(mask3, ierr)
  if (ierr /= 0) call hard('fm_mask_set_up (qk_sparse)', ierr)
  call fm_mask_is_masked(mask3, 0, 6, 5, masked, ierr)
  call check(ierr == 0 .and. masked, 'qk_sparse span [4, 9): key 5 is not hidden from row 6')
  call fm_mask_is_masked(mask3, 0, 9, 5, masked, ierr)
  call check(ierr == 0 .and. .not. masked, 'qk_sparse span [4, 9): key 5 is hidden from row 9')
  call fm_mask_is_masked(mask3, 0, 6, 2, masked, ierr)
  call check(ierr == 0 .and. .not. masked, 'qk_sparse span [4, 9): key 2 is hidden from row 6')
  call fm_mask_destroy(mask3, ierr)
  ! fm_mask_set_sample_documents: a document mask of 16 keys and 2 samples, sample 0 with the
  ! mask's documents (8, 8), sample 1 with its own (4, 12): lts(j+1) is the end of key j's document
  call fm_mask_create(ctx, mask3, ierr)
  call fm_mask_set_sizes(mask3, 16, 16, 1, ierr)
  call fm_mask_set_batch(mask3, 2, ierr)
  call fm_mask_set_type(mask3, FMMASKDOCUMENT, ierr)
  call fm_mask_set_documents(mask3, 2, [8_c_int, 8_c_int], ierr)
  call fm_mask_set_sample_documents(mask3, 1, 2, [4_c_int, 12_c_int], ierr)
  if (ierr /= 0) call hard('fm_mask_set_sample_documents', ierr)
  call fm_mask_set_up(mask3, ierr)
  if (ierr /= 0) call hard('fm_mask_set_up (sample documents)', ierr)
  allocate (got(16), got2(16))
  call fm_mask_get_sample_bounds(mask3, 0, 0, lts=got, ierr=ierr)
  call fm_mask_get_sample_bounds(mask3, 1, 0, lts=got2, ierr=j)
  call check(ierr == 0 .and. j == 0 .and. all(got(1:8) == 8) .and. all(got(9:16) == 16) .and. all(got2(1:4) == 4) .and. &
             all(got2(5:16) == 16), 'fm_mask_set_sample_documents: the samples do not hold documents (8, 8) and (4, 12)')
  deallocate (got, got2)
  call fm_push_error_handler(FM_ERROR_HANDLER_SILENT, ierr)
  call fm_mask_set_sample_documents(mask3, 2, 2, [4_c_int, 12_c_int], i)
  call fm_get_last_error_message(msg)
  call fm_pop_error_handler(j)
  call check(i == FM_ERR_ARG_OUTOFRANGE .and. index(msg, '(sample) is 2') > 0, &
             'fm_mask_set_sample_documents: sample 2 of 2 not refused by name: '//trim(msg))
  call fm_mask_destroy(mask3, ierr)

  ! share_question: one document of 16, a question of 4 and answers of 5 and 7: the question's
  ! keys are seen by the whole document, the first answer's not by the second answer
  call fm_mask_create(ctx, mask3, ierr)
  call fm_mask_set_sizes(mask3, 16, 16, 1, ierr)
  call fm_mask_set_type(mask3, FMMASKSHAREQUESTION, ierr)
  call fm_mask_set_documents(mask3, 1, [16_c_int], ierr)
  call fm_mask_set_share_question(mask3, 1, [3_c_int], [4_c_int, 5_c_int, 7_c_int], ierr)
  if (ierr /= 0) call hard('fm_mask_set_share_question', ierr)
  call fm_mask_set_up(mask3, ierr)
  if (ierr /= 0) call hard('fm_mask_set_up (share_question)', ierr)
  call fm_mask_is_masked(mask3, 0, 12, 2, masked, ierr)
  call check(ierr == 0 .and. .not. masked, 'share_question: the question key 2 is hidden from row 12')
  call fm_mask_is_masked(mask3, 0, 12, 6, masked, ierr)
  call check(ierr == 0 .and. masked, 'share_question: the first answer''s key 6 is seen by row 12 of the second')
  call fm_mask_is_masked(mask3, 0, 8, 6, masked, ierr)
  call check(ierr == 0 .and. .not. masked, 'share_question: key 6 is hidden from row 8 of its own answer')
  call fm_mask_destroy(mask3, ierr)

  ! ------------------------------------------------------------ forward and backward, FP32
  call fm_plan_create(ctx, plan, ierr)
  if (ierr /= 0) call hard('fm_plan_create', ierr)
  call fm_plan_set_mask(plan, mask, ierr)
  if (ierr /= 0) call hard('fm_plan_set_mask', ierr)
  call fm_plan_set_shape(plan, B, HQ, HKV, D, FM_DTYPE_FP32, ierr)
  if (ierr /= 0) call hard('fm_plan_set_shape', ierr)
  call fm_plan_get_shape(plan, i, j, h, bb, il, ierr)
  call check(ierr == 0 .and. i == B .and. j == HQ .and. h == HKV .and. bb == D .and. il == FM_DTYPE_FP32, &
             'fm_plan_get_shape does not give back the shape set')
  scale = 0.3d0
  call fm_plan_set_scale(plan, scale, ierr)
  if (ierr /= 0) call hard('fm_plan_set_scale', ierr)
  call fm_plan_set_check_finite(plan, .true., ierr)
  if (ierr /= 0) call hard('fm_plan_set_check_finite', ierr)
  call fm_plan_get_check_finite(plan, want, ierr)
  call check(ierr == 0 .and. want, 'fm_plan_get_check_finite does not give back .true.')
  call fm_plan_set_deterministic(plan, .true., ierr)
  if (ierr /= 0) call hard('fm_plan_set_deterministic', ierr)
  call fm_plan_get_deterministic(plan, want, ierr)
  call check(ierr == 0 .and. want, 'fm_plan_get_deterministic does not give back .true.')
  call fm_plan_set_up(plan, ierr)
  if (ierr /= 0) call hard('fm_plan_set_up', ierr)
  call fm_plan_get_local_rows(plan, nlocal, rows, ierr)
  if (ierr /= 0) call hard('fm_plan_get_local_rows', ierr)
  call check(size(rows) == nlocal, 'fm_plan_get_local_rows: rows has the wrong size')
  call MPI_Allreduce(nlocal, total, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  call check(total == S, 'local rows of all ranks do not add up to seqlen_q')
  call fm_plan_get_local_keys(plan, nkeys, keys, ierr)
  if (ierr /= 0) call hard('fm_plan_get_local_keys', ierr)
  call MPI_Allreduce(nkeys, total, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  call check(total == S .and. size(keys) == nkeys, 'local keys of all ranks do not add up to seqlen_k')
  if (nranks == 1) call check(nkeys == S .and. nlocal == S, 'one rank should hold every row and key')

  ! full Q and dO on every rank (same seed), local slices passed to the library
  allocate (qf(D, HQ, 0:S - 1, B), dof(D, HQ, 0:S - 1, B), kf(D, HKV, S, B), vf(D, HKV, S, B))
  call fill(qf)
  call fill(dof)
  call fillf(kf)
  call fillf(vf)
  qf = real(real(qf, c_float), c_double)   ! the reference sees exactly the fp32 inputs
  dof = real(real(dof, c_float), c_double)
  allocate (q(D, HQ, max(nlocal, 1), B), dout(D, HQ, max(nlocal, 1), B), o(D, HQ, max(nlocal, 1), B), &
            lse(max(nlocal, 1), HQ, B), dq(D, HQ, max(nlocal, 1), B), k(D, HKV, max(nkeys, 1), B), &
            v(D, HKV, max(nkeys, 1), B), dk(D, HKV, max(nkeys, 1), B), dv(D, HKV, max(nkeys, 1), B))
  do il = 1, nlocal
    q(:, :, il, :) = real(qf(:, :, rows(il), :), c_float)
    dout(:, :, il, :) = real(dof(:, :, rows(il), :), c_float)
  end do
  do il = 1, nkeys
    k(:, :, il, :) = kf(:, :, keys(il) + 1, :)
    v(:, :, il, :) = vf(:, :, keys(il) + 1, :)
  end do
  ! fm_plan_scatter from rank 0 gives the same local Q
  allocate (qg(D, HQ, S, B), qs(D, HQ, max(nlocal, 1), B))
  qg = real(qf, c_float)
  qs = -7
  if (rank == 0) then
    call fm_plan_scatter(plan, FM_PLAN_TENSOR_Q, 0, c_loc(qg), c_loc(qs), ierr)
  else
    call fm_plan_scatter(plan, FM_PLAN_TENSOR_Q, 0, c_null_ptr, c_loc(qs), ierr)
  end if
  call check(ierr == 0, 'fm_plan_scatter failed')
  call check(all(qs(:, :, 1:nlocal, :) == q(:, :, 1:nlocal, :)), 'fm_plan_scatter(Q) differs from the local rows')
  o = ieee_value(0.0_c_float, ieee_quiet_nan)
  lse = ieee_value(0.0_c_float, ieee_quiet_nan)
  dq = ieee_value(0.0_c_float, ieee_quiet_nan)
  dk = ieee_value(0.0_c_float, ieee_quiet_nan)
  dv = ieee_value(0.0_c_float, ieee_quiet_nan)
  call fm_plan_forward(plan, c_loc(q), c_loc(k), c_loc(v), c_loc(o), c_loc(lse), ierr)
  if (ierr /= 0) call hard('fm_plan_forward', ierr)
  call fm_plan_backward(plan, c_loc(q), c_loc(k), c_loc(v), c_loc(o), c_loc(lse), c_loc(dout), c_loc(dq), c_loc(dk), &
                        c_loc(dv), ierr)
  if (ierr /= 0) call hard('fm_plan_backward', ierr)

  ! naive float64 reference over all rows (dK, dV need every row)
  allocate (oref(D, HQ, 0:S - 1, B), lref(0:S - 1, HQ, B), dqref(D, HQ, 0:S - 1, B), dkref(D, HKV, S, B), &
            dvref(D, HKV, S, B), p(S), ds(S))
  dkref = 0
  dvref = 0
  do bb = 1, B
    do h = 1, HQ
      hk = (h - 1) / (HQ / HKV) + 1
      do i = 0, S - 1
        do jj = 1, S
          j = jj - 1
          if (j <= i .and. docid(j) == docid(i)) then
            p(jj) = scale * dot_product(qf(:, h, i, bb), real(kf(:, hk, jj, bb), c_double))
          else
            p(jj) = -huge(1d0)
          end if
        end do
        nrm = maxval(p)                      ! row i always sees key i: never fully masked
        p = merge(exp(p - nrm), 0d0, p > -huge(1d0))
        lref(i, h, bb) = nrm + log(sum(p))
        p = p / sum(p)
        do il = 1, D
          oref(il, h, i, bb) = sum(p * real(vf(il, hk, :, bb), c_double))
        end do
        ! backward: dS = P (dO.v - dO.O)
        err = dot_product(dof(:, h, i, bb), oref(:, h, i, bb))
        do jj = 1, S
          ds(jj) = p(jj) * (dot_product(dof(:, h, i, bb), real(vf(:, hk, jj, bb), c_double)) - err)
          dvref(:, hk, jj, bb) = dvref(:, hk, jj, bb) + p(jj) * dof(:, h, i, bb)
          dkref(:, hk, jj, bb) = dkref(:, hk, jj, bb) + scale * ds(jj) * qf(:, h, i, bb)
        end do
        do il = 1, D
          dqref(il, h, i, bb) = scale * sum(ds * real(kf(il, hk, :, bb), c_double))
        end do
      end do
    end do
  end do
  call compare_local('O', o, oref, 2d-5)
  call compare_local('dQ', dq, dqref, 1d-4)
  err = 0
  nrm = 0
  do bb = 1, B
    do h = 1, HQ
      do il = 1, nlocal
        if (ieee_is_nan(lse(il, h, bb))) err = huge(1d0)
        err = max(err, abs(lse(il, h, bb) - lref(rows(il), h, bb)))
      end do
    end do
  end do
  call check(err < 1d-4, 'LSE differs from the float64 reference')
  if (err >= 1d-4) write (error_unit, *) '  max |lse - ref| =', err
  call compare_keys('dK', dk, dkref, 1d-4)
  call compare_keys('dV', dv, dvref, 1d-4)
  ! fm_plan_gather assembles O on rank 0
  allocate (og(D, HQ, S, B))
  og = -7
  if (rank == 0) then
    call fm_plan_gather(plan, FM_PLAN_TENSOR_Q, 0, c_loc(o), c_loc(og), ierr)
  else
    call fm_plan_gather(plan, FM_PLAN_TENSOR_Q, 0, c_loc(o), c_null_ptr, ierr)
  end if
  call check(ierr == 0, 'fm_plan_gather failed')
  if (rank == 0) call check(maxval(abs(og - oref)) < 1d-4, 'fm_plan_gather(O) on rank 0 differs from the reference')

  ! ------------------------------------------------------------ error returns
  call fm_push_error_handler(FM_ERROR_HANDLER_SILENT, ierr)
  call fm_mask_set_sizes(mask2, -5, 10, 1, ierr)
  call check(ierr == FM_ERR_ARG_SIZ, 'fm_mask_set_sizes(-5, ...) did not return FM_ERR_ARG_SIZ')
  call fm_get_last_error_message(msg)
  call check(index(msg, 'seqlen_q') > 0, 'the bad-size message does not name seqlen_q: '//trim(msg))
  call fm_mask_set_type(mask2, 'no_such_mask', ierr)
  call check(ierr == FM_ERR_ARG_WRONG, 'fm_mask_set_type("no_such_mask") did not return FM_ERR_ARG_WRONG')
  call fm_get_last_error_message(msg)
  call check(index(msg, 'no_such_mask') > 0, 'the bad-type message does not name the type: '//trim(msg))
  call fm_plan_create(ctx, plan2, ierr)
  call fm_plan_set_shape(plan2, 1, 3, 2, 16, FM_DTYPE_FP32, ierr)
  call check(ierr == FM_ERR_ARG_INCOMP, 'heads_q = 3, heads_kv = 2 did not return FM_ERR_ARG_INCOMP')
  call fm_plan_forward(plan2, c_loc(q), c_loc(k), c_loc(v), c_loc(o), c_null_ptr, ierr)
  call check(ierr == FM_ERR_ORDER, 'fm_plan_forward before fm_plan_set_up did not return FM_ERR_ORDER')
  call fm_error_string(FM_ERR_ORDER, msg)
  call check(index(msg, 'FM_ERR_ORDER') > 0, 'fm_error_string(FM_ERR_ORDER) is "'//trim(msg)//'"')
  call fm_pop_error_handler(ierr)
  call fm_plan_destroy(plan2, ierr)
  call check(ierr == 0 .and. .not. c_associated(plan2%ptr), 'fm_plan_destroy did not null the handle')

  ! ------------------------------------------------------------ options (FM_OPTIONS and fm_options_set_value)
  call get_environment_variable('FM_OPTIONS', msg)
  i = 5
  call fm_options_get_int('-fm_fortran_check', i, masked, ierr)
  if (command_argument_count() >= 3) call get_command_argument(2, tname)
  if (command_argument_count() >= 3 .and. tname == '-fm_fortran_check') then
    ! the command line (through fm_initialize's get_command_argument) wins over FM_OPTIONS
    call get_command_argument(3, tname)
    read (tname, *) j
    call check(ierr == 0 .and. masked .and. i == j, 'the command line''s -fm_fortran_check did not reach fm_options_get_int')
  else if (index(msg, '-fm_fortran_check 17') > 0) then
    call check(ierr == 0 .and. masked .and. i == 17, 'FM_OPTIONS="-fm_fortran_check 17" did not reach fm_options_get_int')
  else
    call check(ierr == 0 .and. .not. masked .and. i == 5, 'fm_options_get_int changed an unset option')
  end if
  call fm_options_set_value('-fm_fortran_real', '2.5', ierr)
  expect = 1
  call fm_options_get_real('-fm_fortran_real', expect, masked, ierr)
  call check(ierr == 0 .and. masked .and. expect == 2.5d0, 'fm_options_set_value / fm_options_get_real round trip failed')

  call options_logging_conversions()

  ! ------------------------------------------------------------ options prefixes, the plan type, cp settings
  call fm_context_set_options_prefix(ctx, 'fctx_', ierr)
  call fm_context_get_options_prefix(ctx, tname, ierr)
  call check(ierr == 0 .and. tname == 'fctx_', 'fm_context_get_options_prefix gave "'//trim(tname)//'", expected fctx_')
  call fm_context_set_options_prefix(ctx, '', ierr)
  call fm_context_get_options_prefix(ctx, tname, ierr)
  call check(ierr == 0 .and. len_trim(tname) == 0, 'a blank prefix did not clear the context prefix: "'//trim(tname)//'"')
  call fm_mask_set_options_prefix(mask2, 'fmask_', ierr)
  call fm_mask_get_options_prefix(mask2, tname, ierr)
  call check(ierr == 0 .and. tname == 'fmask_', 'fm_mask_get_options_prefix gave "'//trim(tname)//'", expected fmask_')
  call fm_plan_create(ctx, plan2, ierr)
  call fm_plan_set_mask(plan2, mask, ierr)
  call fm_plan_set_shape(plan2, B, HQ, HKV, D, FM_DTYPE_FP32, ierr)
  call fm_plan_set_options_prefix(plan2, 'fplan_', ierr)
  call fm_plan_get_options_prefix(plan2, tname, ierr)
  call check(ierr == 0 .and. tname == 'fplan_', 'fm_plan_get_options_prefix gave "'//trim(tname)//'", expected fplan_')
  call fm_options_set_value('-fplan_fm_plan_chunk', '32', ierr)
  call fm_options_set_value('-fplan_fm_plan_route', 'flat', ierr)
  call fm_plan_set_type(plan2, FMPLANCP, ierr)
  call check(ierr == 0, 'fm_plan_set_type(FMPLANCP) failed')
  call fm_plan_set_partition(plan2, 'contiguous', ierr)
  call fm_plan_set_schedule(plan2, 'ring', ierr)
  call fm_plan_set_prune(plan2, .false., ierr)
  call fm_plan_set_overlap(plan2, .true., ierr)
  call fm_plan_set_transport(plan2, 'mpi', ierr)
  call fm_plan_set_gpu_aware_mpi(plan2, '0', ierr)
  call fm_plan_set_step_chunks(plan2, 2, ierr)
  call fm_plan_set_virtual_nodes(plan2, nranks, ierr)
  call fm_plan_set_partial_cost(plan2, 1.5d0, ierr)
  call fm_plan_set_row_cost(plan2, 0.25d0, ierr)
  call fm_plan_set_balance_comm(plan2, .true., ierr)
  call fm_plan_set_cost_model(plan2, 400.0d0, 300.0d0, 40.0d0, ierr)
  call fm_plan_set_trace(plan2, '', .false., ierr)
  call fm_plan_set_chunk(plan2, 64, ierr) ! -fplan_fm_plan_chunk 32 overrides it
  call check(ierr == 0, 'a context-parallel setter failed')
  call fm_plan_set_from_options(plan2, ierr)
  call check(ierr == 0, 'fm_plan_set_from_options with prefix fplan_ failed')
  call fm_plan_get_type(plan2, tname, ierr)
  call check(tname == FMPLANCP, 'fm_plan_get_type gave "'//trim(tname)//'", expected cp')
  call fm_plan_get_partition(plan2, tname, ierr)
  call check(tname == 'contiguous', 'fm_plan_get_partition gave "'//trim(tname)//'", expected contiguous')
  call fm_plan_get_route(plan2, tname, ierr)
  call check(tname == 'flat', 'fm_plan_get_route gave "'//trim(tname)//'", expected flat (-fplan_fm_plan_route)')
  call fm_plan_get_schedule(plan2, tname, ierr)
  call check(tname == 'ring', 'fm_plan_get_schedule gave "'//trim(tname)//'", expected ring')
  call fm_plan_get_chunk(plan2, i, ierr)
  call check(i == 32, 'fm_plan_get_chunk is not 32 (-fplan_fm_plan_chunk over fm_plan_set_chunk 64)')
  call fm_plan_get_partial_cost(plan2, expect, ierr)
  call check(expect == 1.5d0, 'fm_plan_get_partial_cost is not 1.5')
  call fm_plan_get_row_cost(plan2, expect, ierr)
  call check(expect == 0.25d0, 'fm_plan_get_row_cost is not 0.25')
  call fm_plan_get_balance_comm(plan2, want, ierr)
  call check(ierr == 0 .and. want, 'fm_plan_get_balance_comm does not give back .true.')
  call fm_plan_get_cost_model(plan2, expect, err, nrm, ierr)
  call check(ierr == 0 .and. expect == 400.0d0 .and. err == 300.0d0 .and. nrm == 40.0d0, &
    'fm_plan_get_cost_model does not give back 400, 300, 40')
  call fm_plan_set_up(plan2, ierr)
  call check(ierr == 0, 'fm_plan_set_up of the cp plan with its settings failed')
  call fm_plan_get_local_rows(plan2, nlocal, rows, ierr)
  call check(ierr == 0 .and. nlocal > 0, 'the cp plan owns no rows')
  call fm_push_error_handler(FM_ERROR_HANDLER_SILENT, ierr)
  call fm_plan_set_partition(plan2, 'zigzag', ierr)
  call check(ierr == FM_ERR_ARG_OUTOFRANGE, 'fm_plan_set_partition("zigzag") did not return FM_ERR_ARG_OUTOFRANGE')
  call fm_plan_set_type(plan2, FMPLANLOCAL, ierr)
  if (nranks > 1) then
    call check(ierr == FM_ERR_ARG_INCOMP, 'fm_plan_set_type(FMPLANLOCAL) on several ranks did not return FM_ERR_ARG_INCOMP')
  else
    call check(ierr == 0, 'fm_plan_set_type(FMPLANLOCAL) on one rank failed')
  end if
  call fm_pop_error_handler(ierr)
  call fm_plan_destroy(plan2, ierr)
  call fm_mask_set_options_prefix(mask2, '', ierr)

  ! ------------------------------------------------------------ HDF5 round trip
  if (command_argument_count() >= 1) then
    call get_command_argument(1, path)
    call fm_push_error_handler(FM_ERROR_HANDLER_SILENT, ierr)
    call fm_mask_save(mask, path, 'fortran_cdoc', ierr)
    call fm_pop_error_handler(ierr)
    if (ierr == FM_ERR_SUP) then
      if (rank == 0) write (*, '(a)') 'HDF5 round trip skipped: built without HDF5'
    else
      call check(ierr == 0, 'fm_mask_save failed')
      call fm_mask_load(ctx, path, 'fortran_cdoc', loaded, ierr)
      call check(ierr == 0, 'fm_mask_load failed')
      if (ierr == 0) then
        call fm_mask_get_density(loaded, expect, spars, ierr)
        call fm_mask_get_density(mask, dens, spars, ierr)
        call check(expect == dens, 'the loaded mask has a different density')
        call fm_mask_get_type(loaded, tname, ierr)
        call check(tname == 'bounds', 'the loaded mask has type "'//trim(tname)//'", expected "bounds"')
        call fm_mask_destroy(loaded, ierr)
      end if
    end if
  end if

  call fm_plan_destroy(plan, ierr)
  call fm_mask_destroy(mask, ierr)
  call fm_mask_destroy(mask2, ierr)
  call check(.not. c_associated(mask%ptr), 'fm_mask_destroy did not null the handle')
  call fm_context_destroy(ctx, ierr)
  call check(ierr == 0, 'fm_context_destroy failed')

  ! free every array (LeakSanitizer reports them otherwise; share/ci/sanitize.sh)
  if (allocated(docs)) deallocate (docs)
  if (allocated(docid)) deallocate (docid)
  if (allocated(rows)) deallocate (rows)
  if (allocated(keys)) deallocate (keys)
  if (allocated(lts)) deallocate (lts)
  if (allocated(ute)) deallocate (ute)
  if (allocated(q)) deallocate (q)
  if (allocated(k)) deallocate (k)
  if (allocated(v)) deallocate (v)
  if (allocated(o)) deallocate (o)
  if (allocated(lse)) deallocate (lse)
  if (allocated(kf)) deallocate (kf)
  if (allocated(vf)) deallocate (vf)
  if (allocated(qg)) deallocate (qg)
  if (allocated(qs)) deallocate (qs)
  if (allocated(og)) deallocate (og)
  if (allocated(dout)) deallocate (dout)
  if (allocated(dq)) deallocate (dq)
  if (allocated(dk)) deallocate (dk)
  if (allocated(dv)) deallocate (dv)
  if (allocated(qf)) deallocate (qf)
  if (allocated(dof)) deallocate (dof)
  if (allocated(oref)) deallocate (oref)
  if (allocated(lref)) deallocate (lref)
  if (allocated(dqref)) deallocate (dqref)
  if (allocated(dkref)) deallocate (dkref)
  if (allocated(dvref)) deallocate (dvref)
  if (allocated(p)) deallocate (p)
  if (allocated(ds)) deallocate (ds)
  call MPI_Allreduce(nfail, total, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (nfail > 0) then
    write (error_unit, '(a,i0,a,i0)') 'test_fortran: rank ', rank, ': check(s) FAILED: ', nfail
  else if (rank == 0 .and. total == 0) then
    write (*, '(a)') 'test_fortran: all checks passed'
  end if
  call fm_finalize(ierr)
  if (total > 0) stop 1

contains

  ! Park-Miller minimal standard generator (exact in 64-bit integers)
  integer(int64) function next()
    state = mod(48271_int64 * state, 2147483647_int64)
    next = state
  end function next

  ! uniform in [-1, 1), never 0
  real(c_double) function uniform()
    uniform = 2d0 * real(next(), c_double) / 2147483647d0 - 1d0
    if (uniform == 0) uniform = 0.5d0
  end function uniform

  subroutine fill(x)
    real(c_double), intent(out) :: x(:,:,:,:)
    integer :: a1, a2, a3, a4
    do a4 = 1, size(x, 4)
      do a3 = 1, size(x, 3)
        do a2 = 1, size(x, 2)
          do a1 = 1, size(x, 1)
            x(a1, a2, a3, a4) = uniform()
          end do
        end do
      end do
    end do
  end subroutine fill

  subroutine fillf(x)
    real(c_float), intent(out) :: x(:,:,:,:)
    integer :: a1, a2, a3, a4
    do a4 = 1, size(x, 4)
      do a3 = 1, size(x, 3)
        do a2 = 1, size(x, 2)
          do a1 = 1, size(x, 1)
            x(a1, a2, a3, a4) = real(uniform(), c_float)
          end do
        end do
      end do
    end do
  end subroutine fillf

  ! relative 2-norm error of the local rows of x against ref (rows indexed 0..S-1)
  subroutine compare_local(what, x, ref, tol)
    character(len=*), intent(in) :: what
    real(c_double), intent(in) :: tol
    real(c_float), intent(in) :: x(:,:,:,:)
    real(c_double), intent(in) :: ref(:,:,0:,:)
    real(c_double) :: num, den
    integer :: r
    num = 0
    den = 0
    do r = 1, nlocal
      if (any(ieee_is_nan(x(:, :, r, :)))) num = huge(1d0)
      if (num < huge(1d0)) num = num + sum((x(:, :, r, :) - ref(:, :, rows(r), :))**2)
      den = den + sum(ref(:, :, rows(r), :)**2)
    end do
    call MPI_Allreduce(MPI_IN_PLACE, num, 1, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
    call MPI_Allreduce(MPI_IN_PLACE, den, 1, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
    call check(den > 0 .and. sqrt(num / den) < tol, what//' differs from the float64 reference')
    if (rank == 0) write (*, '(a,a,es10.3)') what, ': relative error ', sqrt(num / max(den, tiny(1d0)))
  end subroutine compare_local

  ! same over the local keys of x against ref (keys indexed 1..S)
  subroutine compare_keys(what, x, ref, tol)
    character(len=*), intent(in) :: what
    real(c_double), intent(in) :: tol
    real(c_float), intent(in) :: x(:,:,:,:)
    real(c_double), intent(in) :: ref(:,:,:,:)
    real(c_double) :: num, den
    integer :: c
    num = 0
    den = 0
    do c = 1, nkeys
      if (any(ieee_is_nan(x(:, :, c, :)))) num = huge(1d0)
      if (num < huge(1d0)) num = num + sum((x(:, :, c, :) - ref(:, :, keys(c) + 1, :))**2)
      den = den + sum(ref(:, :, keys(c) + 1, :)**2)
    end do
    call MPI_Allreduce(MPI_IN_PLACE, num, 1, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
    call MPI_Allreduce(MPI_IN_PLACE, den, 1, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
    call check(den > 0 .and. sqrt(num / den) < tol, what//' differs from the float64 reference')
    if (rank == 0) write (*, '(a,a,es10.3)') what, ': relative error ', sqrt(num / max(den, tiny(1d0)))
  end subroutine compare_keys

  ! the other option getters, the application's log events, the element conversions
  subroutine options_logging_conversions()
    logical :: flag, set
    character(len=16) :: str
    character(len=3) :: short
    character(len=512) :: m
    integer :: vals(4), n, ev, e
    type(fm_plan) :: p2
    real(c_float) :: x(6), y(6)
    integer(c_int16_t), target :: h(6)
    real(c_float), target :: f(6)
    real(c_float), parameter :: fp16_ties(5) = [1.0 + 2.0**(-11), 0.0, 1.0 + 3 * 2.0**(-11), 0.0, 65520.0]
    call fm_options_set_value('-fm_fortran_flag', '', e)
    flag = .false.
    call fm_options_get_bool('-fm_fortran_flag', flag, set, e)
    call check(e == 0 .and. set .and. flag, 'fm_options_get_bool: a bare flag did not read as true')
    call fm_options_set_value('-fm_fortran_off', 'no', e)
    flag = .true.
    call fm_options_get_bool('-fm_fortran_off', flag, set, e)
    call check(e == 0 .and. set .and. .not. flag, 'fm_options_get_bool: "no" did not read as false')
    flag = .true.
    call fm_options_get_bool('-fm_fortran_unset', flag, set, e)
    call check(e == 0 .and. .not. set .and. flag, 'fm_options_get_bool changed an unset option')
    call fm_options_set_value('-fm_fortran_name', 'causal', e)
    str = 'default'
    call fm_options_get_string('-fm_fortran_name', str, set, e)
    call check(e == 0 .and. set .and. str == 'causal', 'fm_options_get_string gave "'//trim(str)//'", expected causal')
    str = 'default'
    call fm_options_get_string('-fm_fortran_unset', str, set, e)
    call check(e == 0 .and. .not. set .and. str == 'default', 'fm_options_get_string changed an unset option')
    call fm_options_set_value('-fm_fortran_list', '3,-4,5', e)
    vals = 9
    call fm_options_get_int_array('-fm_fortran_list', vals, n, set, e)
    call check(e == 0 .and. set .and. n == 3 .and. all(vals == [3, -4, 5, 9]), 'fm_options_get_int_array of "3,-4,5"')
    call fm_options_has_name('-fm_fortran_list', set, e)
    call check(e == 0 .and. set, 'fm_options_has_name missed -fm_fortran_list')
    call fm_options_has_name('-fm_fortran_unset', set, e)
    call check(e == 0 .and. .not. set, 'fm_options_has_name found an option never given')
    call fm_push_error_handler(FM_ERROR_HANDLER_SILENT, e)
    short = 'abc'
    call fm_options_get_string('-fm_fortran_name', short, set, e)
    call check(e == FM_ERR_OPT .and. short == 'abc', 'a value longer than the string did not give FM_ERR_OPT')
    x = 0
    call fm_from_float(7, x, c_loc(h), e)
    call fm_get_last_error_message(m)
    call check(e == FM_ERR_ARG_OUTOFRANGE .and. index(m, 'dtype') > 0, &
               'fm_from_float with dtype 7: '//trim(m))
    call fm_pop_error_handler(e)

    ! bf16 (7 fraction bits) rounds to nearest even: 1 + 2^-8 and 1 + 3 * 2^-8 are ties, to 1 and
    ! to 1 + 2^-6; 65504 rounds up to 65536. fp16 (10 bits) holds the first five exactly, 3e38 is +Inf.
    x = [1.0, -2.5, 1.0 + 2.0**(-8), 1.0 + 3 * 2.0**(-8), 65504.0, 3.0e38]
    call fm_from_float(FM_DTYPE_BF16, x, c_loc(h), e)
    y = -1
    call fm_to_float(FM_DTYPE_BF16, c_loc(h), y, e)
    call check(e == 0 .and. all(y(1:5) == [1.0, -2.5, 1.0, 1.0 + 2.0**(-6), 65536.0]), &
               'bf16 round trip (round to nearest even)')
    call check(h(1) == int(z'3F80', c_int16_t), 'bf16 1.0 is not 0x3F80')
    call fm_from_float(FM_DTYPE_FP16, x, c_loc(h), e)
    y = -1
    call fm_to_float(FM_DTYPE_FP16, c_loc(h), y, e)
    call check(e == 0 .and. all(y(1:5) == x(1:5)) .and. y(6) > huge(y(6)), &
               'fp16 round trip (exact where representable, +Inf beyond 65504)')
    ! fp16 rounding: 1 + 2^-11 and 1 + 3 * 2^-11 are ties (to 1 and to 1 + 2^-9), 65520 overflows;
    ! a strided section of a constant (the compiler's temporary is never written back)
    call fm_from_float(FM_DTYPE_FP16, fp16_ties(1:5:2), c_loc(h), e)
    y = -1
    call fm_to_float(FM_DTYPE_FP16, c_loc(h), y(1:3), e)
    call check(e == 0 .and. y(1) == 1.0 .and. y(2) == 1.0 + 2.0**(-9) .and. y(3) > huge(y(3)), &
               'fp16 round to nearest even on ties and overflow at 65520 (strided constant input)')
    call fm_from_float(FM_DTYPE_FP32, x, c_loc(f), e)
    call check(e == 0 .and. all(f == x), 'fp32 copy through fm_from_float')

    call fm_log_event_register('FortranEvent', ev, e)
    call check(e == 0 .and. ev >= 0, 'fm_log_event_register')
    call fm_log_event_begin(ev, e)
    call fm_log_event_end(ev, e, flops=1d6)
    call check(e == 0, 'fm_log_event_begin / fm_log_event_end')
    call fm_push_error_handler(FM_ERROR_HANDLER_SILENT, e)
    call fm_log_event_end(ev, e)
    call check(e == FM_ERR_ORDER, 'fm_log_event_end without a begin did not give FM_ERR_ORDER')
    call fm_pop_error_handler(e)
    call fm_log_view(e)
    call check(e == 0, 'fm_log_view')
    call fm_plan_create(ctx, p2, e)
    call fm_plan_set_stream(p2, c_null_ptr, e)
    call check(e == 0, 'fm_plan_set_stream(plan, c_null_ptr) (the default stream)')
    call fm_plan_destroy(p2, e)
  end subroutine options_logging_conversions

  subroutine check(cond, what)
    logical, intent(in) :: cond
    character(len=*), intent(in) :: what
    if (.not. cond) then
      nfail = nfail + 1
      write (error_unit, '(a,i0,a,a)') 'FAIL [rank ', rank, '] ', what
    end if
  end subroutine check

  subroutine hard(what, code)
    character(len=*), intent(in) :: what
    integer, intent(in) :: code
    character(len=512) :: m
    call fm_get_last_error_message(m)
    write (error_unit, '(a,a,a,i0,a,a)') 'HARD ERROR: ', what, ' returned ', code, ': ', trim(m)
    stop 99
  end subroutine hard

#if FM_HAVE_MPI_F08
  ! a context from a type(MPI_Comm) handle (the mpi_f08 specific of fm_context_create)
  subroutine f08_context()
    use mpi_f08, only: f08_world => MPI_COMM_WORLD
    type(fm_context) :: c2
    integer :: e, be
    call fm_context_create(f08_world, c2, e)
    call check(e == 0 .and. c_associated(c2%ptr), 'fm_context_create(type(MPI_Comm)) failed')
    call fm_context_set_backend(c2, FM_BACKEND_CPU, e)
    call fm_context_set_up(c2, e)
    call check(e == 0, 'fm_context_set_up on the mpi_f08 context failed')
    call fm_context_get_backend(c2, be, e)
    call check(e == 0 .and. be == FM_BACKEND_CPU, 'the mpi_f08 context did not resolve to the CPU backend')
    call fm_context_destroy(c2, e)
    call check(e == 0 .and. .not. c_associated(c2%ptr), 'fm_context_destroy did not null the handle')
  end subroutine f08_context
#endif

end program test_fortran
