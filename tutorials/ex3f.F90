! ex3f: training steps from Fortran. Every step packs other documents into the sequence (a new
! causal document mask), re-plans, runs the forward and the backward in bf16 (or -dtype fp16,
! fp32) on the CPU backend, and checks O, LSE and dQ of sampled rows against a float64
! reference written here, from the document lengths alone.
!
!   mpiexec -n 1 ./ex3f [-seqlen 1024] [-steps 3] [-docs 4] [-heads 4] [-kv_heads 2]
!                       [-head_dim 32] [-dtype bf16] [-rows 8] [-fm_plan_view] [-fm_log_view]
!
! Options come from the environment variable FM_OPTIONS as well (fm_initialize takes no
! arguments), for example FM_OPTIONS="-fm_log_view" mpiexec -n 2 ./ex3f -steps 5.
!
! What it shows:
! - the options of the application's own (fm_options_get_int, _get_string) next to the
!   library's (fm_context_set_from_options, fm_plan_set_from_options);
! - re-planning every step: fm_mask_set_documents, fm_mask_set_up, then fm_plan_set_up again,
!   which is an update (the plan keeps what does not depend on the bounds); the local rows and
!   keys may move with it, so they are asked for again;
! - bf16 and fp16 tensors as integer(c_int16_t) arrays, filled with fm_from_float and read with
!   fm_to_float (Fortran has no 16-bit real kinds);
! - a log event of the application's own around each step (-fm_log_view shows it).
! The tensors are host arrays, so the context runs the CPU backend: the CUDA backend takes device
! memory (CUDA Fortran, or cudaMalloc bound through iso_c_binding). Exit status 0 when every
! step agrees with the reference, 1 when not (or on an error).
program ex3f
  use, intrinsic :: iso_c_binding
  use mpi
  use flashmask
  implicit none
  integer :: S = 1024, steps = 3, ndocmax = 4, HQ = 4, HKV = 2, D = 32, nrow = 8
  integer, parameter :: B = 1
  character(len=8) :: dtname = 'bf16'
  integer :: dtype, es, ierr, rank, nranks, step, ndocs, nlocal, nkeys, ev
  integer, allocatable :: docs(:), rows(:), keys(:)
  logical :: set, ok
  real(c_double) :: scale, err(3), tol(3), flops
  type(fm_context) :: ctx
  type(fm_mask) :: mask
  type(fm_plan) :: plan
  ! the tensors as the library sees them (bytes of the dtype) and as floats
  integer(c_int8_t), allocatable, target :: q(:), k(:), v(:), o(:), dout(:), dq(:), dk(:), dv(:)
  real(c_float), allocatable, target :: lse(:)
  ! the float64 reference's inputs: every key's K and V (exactly the dtype's values)
  real(c_double), allocatable :: kref(:,:,:), vref(:,:,:)

  call fm_initialize(ierr)
  if (ierr /= FM_SUCCESS) stop 1
  call fm_options_get_int('-seqlen', S, set, ierr); call chk('-seqlen')
  call fm_options_get_int('-steps', steps, set, ierr); call chk('-steps')
  call fm_options_get_int('-docs', ndocmax, set, ierr); call chk('-docs')
  call fm_options_get_int('-heads', HQ, set, ierr); call chk('-heads')
  call fm_options_get_int('-kv_heads', HKV, set, ierr); call chk('-kv_heads')
  call fm_options_get_int('-head_dim', D, set, ierr); call chk('-head_dim')
  call fm_options_get_int('-rows', nrow, set, ierr); call chk('-rows')
  call fm_options_get_string('-dtype', dtname, set, ierr); call chk('-dtype')
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)
  select case (trim(dtname))
  case ('bf16'); dtype = FM_DTYPE_BF16; es = 2; tol = [2d-2, 2d-3, 2d-2]
  case ('fp16'); dtype = FM_DTYPE_FP16; es = 2; tol = [2d-2, 2d-3, 2d-2]
  case ('fp32'); dtype = FM_DTYPE_FP32; es = 4; tol = [1d-4, 1d-4, 1d-4]
  case default
    if (rank == 0) print '(3a)', 'ex3f: -dtype is "', trim(dtname), '"; expected bf16, fp16 or fp32'
    call fm_finalize(ierr)
    stop 1
  end select
  if (S < 1 .or. steps < 1 .or. ndocmax < 1 .or. nrow < 1) then
    if (rank == 0) print '(a)', 'ex3f: -seqlen, -steps, -docs and -rows must be at least 1'
    call fm_finalize(ierr)
    stop 1
  end if

  call fm_context_create(MPI_COMM_WORLD, ctx, ierr); call chk('fm_context_create')
  call fm_context_set_backend(ctx, FM_BACKEND_CPU, ierr); call chk('fm_context_set_backend')
  call fm_context_set_up(ctx, ierr); call chk('fm_context_set_up')

  call fm_mask_create(ctx, mask, ierr); call chk('fm_mask_create')
  call fm_mask_set_sizes(mask, S, S, 1, ierr); call chk('fm_mask_set_sizes')
  call fm_mask_set_type(mask, FMMASKCAUSALDOCUMENT, ierr); call chk('fm_mask_set_type')

  call fm_plan_create(ctx, plan, ierr); call chk('fm_plan_create')
  call fm_plan_set_mask(plan, mask, ierr); call chk('fm_plan_set_mask')
  call fm_plan_set_shape(plan, B, HQ, HKV, D, dtype, ierr); call chk('fm_plan_set_shape')
  call fm_plan_set_from_options(plan, ierr); call chk('fm_plan_set_from_options')
  call fm_log_event_register('ex3f step', ev, ierr); call chk('fm_log_event_register')

  allocate (kref(D, HKV, S), vref(D, HKV, S))
  ok = .true.
  do step = 1, steps
    call fm_log_event_begin(ev, ierr); call chk('fm_log_event_begin')
    ! this step's packing (the same on every rank): ndocs documents of uneven lengths
    ndocs = 1 + mod(3 * step + 1, min(ndocmax, S))
    call pack_documents(step, ndocs, docs)
    call fm_mask_set_documents(mask, ndocs, docs, ierr); call chk('fm_mask_set_documents')
    call fm_mask_set_up(mask, ierr); call chk('fm_mask_set_up')
    call fm_plan_set_up(plan, ierr); call chk('fm_plan_set_up') ! an update after the first step
    call fm_plan_get_scale(plan, scale, ierr); call chk('fm_plan_get_scale')
    call fm_plan_get_local_rows(plan, nlocal, rows, ierr); call chk('fm_plan_get_local_rows')
    call fm_plan_get_local_keys(plan, nkeys, keys, ierr); call chk('fm_plan_get_local_keys')

    ! new data every step, a pure function of (step, tensor, global row, head, column), so that
    ! any rank can compute any row
    call alloc_bytes(q, nlocal * HQ * D); call alloc_bytes(o, nlocal * HQ * D)
    call alloc_bytes(dout, nlocal * HQ * D); call alloc_bytes(dq, nlocal * HQ * D)
    call alloc_bytes(k, nkeys * HKV * D); call alloc_bytes(v, nkeys * HKV * D)
    call alloc_bytes(dk, nkeys * HKV * D); call alloc_bytes(dv, nkeys * HKV * D)
    if (allocated(lse)) deallocate (lse)
    allocate (lse(max(nlocal * HQ, 1)))
    call fill(q, 1, rows, nlocal, HQ)
    call fill(dout, 4, rows, nlocal, HQ)
    call fill(k, 2, keys, nkeys, HKV)
    call fill(v, 3, keys, nkeys, HKV)
    call reference_kv()

    call fm_plan_forward(plan, c_loc(q), c_loc(k), c_loc(v), c_loc(o), c_loc(lse), ierr); call chk('fm_plan_forward')
    call fm_plan_backward(plan, c_loc(q), c_loc(k), c_loc(v), c_loc(o), c_loc(lse), c_loc(dout), c_loc(dq), c_loc(dk), &
                          c_loc(dv), ierr); call chk('fm_plan_backward')
    ! the event's rate in -fm_log_view (which sums the ranks): an even share of the forward's
    ! and backward's FLOPs (the backward counts 2.5 forwards)
    call fm_plan_get_flops(plan, flops, ierr); call chk('fm_plan_get_flops')
    call fm_log_event_end(ev, ierr, flops=3.5d0 * flops / nranks); call chk('fm_log_event_end')

    call check_rows(err)
    call MPI_Allreduce(MPI_IN_PLACE, err, 3, MPI_DOUBLE_PRECISION, MPI_MAX, MPI_COMM_WORLD, ierr)
    if (.not. all(err <= tol)) ok = .false. ! NaN fails too
    if (rank == 0) print '(a,i0,a,i0,a,es9.2,a,es9.2,a,es9.2,a)', 'ex3f: step ', step, ', ', ndocs, &
      ' documents: O ', err(1), ', LSE ', err(2), ', dQ ', err(3), &
      trim(merge('               ', '  <-- too large', all(err <= tol)))
  end do
  if (rank == 0) print '(a)', trim(merge('ex3f: OK    ', 'ex3f: FAILED', ok))

  call fm_plan_destroy(plan, ierr)
  call fm_mask_destroy(mask, ierr)
  call fm_context_destroy(ctx, ierr)
  call fm_finalize(ierr)
  ! the main program's allocatables are not freed at its end by themselves
  deallocate (q, k, v, o, dout, dq, dk, dv, lse, kref, vref, docs, rows, keys)
  if (.not. ok) stop 1

contains

  ! On an error: the library has printed it (on every rank that got it); end with status 1.
  subroutine chk(what)
    character(len=*), intent(in) :: what
    if (ierr == FM_SUCCESS) return
    if (rank == 0) print '(3a,i0)', 'ex3f: ', what, ' returned ', ierr
    call fm_finalize(ierr)
    stop 1
  end subroutine chk

  ! ndocs lengths that sum to S, uneven and different every step (each at least 1)
  subroutine pack_documents(step, ndocs, docs)
    integer, intent(in) :: step, ndocs
    integer, allocatable, intent(inout) :: docs(:)
    integer :: w(ndocs), j
    if (allocated(docs)) deallocate (docs)
    allocate (docs(ndocs))
    do j = 1, ndocs
      w(j) = 1 + mod(7 * j + 5 * step, 11)
    end do
    docs = max(1, (S * w) / sum(w))
    docs(ndocs) = S - sum(docs(1:ndocs - 1))
    do while (docs(ndocs) < 1) ! only for S close to ndocs
      j = maxloc(docs(1:ndocs - 1), 1)
      docs(j) = docs(j) - 1
      docs(ndocs) = docs(ndocs) + 1
    end do
  end subroutine pack_documents

  ! the input value of tensor t at (global row or key r, head h, column e), in [-1, 1]
  pure real(c_float) function val(t, r, h, e)
    integer, intent(in) :: t, r, h, e
    val = real(sin(0.7d0 * step + 1.3d0 * t + 0.0173d0 * r + 0.91d0 * h + 0.137d0 * e + 1d-5 * r * e), c_float)
  end function val

  subroutine alloc_bytes(x, n)
    integer(c_int8_t), allocatable, intent(inout) :: x(:)
    integer, intent(in) :: n
    if (allocated(x)) deallocate (x)
    allocate (x(max(n, 1) * es))
  end subroutine alloc_bytes

  ! tensor t's local rows idx(1:n) ([n][heads][D] in C's order) in the dtype
  subroutine fill(x, t, idx, n, heads)
    integer(c_int8_t), target, intent(inout) :: x(:)
    integer, intent(in) :: t, n, heads, idx(:)
    real(c_float), allocatable :: f(:)
    integer :: r, h, e
    if (n == 0) return
    allocate (f(n * heads * D))
    do r = 1, n
      do h = 1, heads
        do e = 1, D
          f(((r - 1) * heads + h - 1) * D + e) = val(t, idx(r), h, e)
        end do
      end do
    end do
    call fm_from_float(dtype, f, c_loc(x), ierr); call chk('fm_from_float')
  end subroutine fill

  ! values rounded to the dtype, as float64: what the library reads
  subroutine rounded(t, r, heads, out)
    integer, intent(in) :: t, r, heads
    real(c_double), intent(out) :: out(D, heads)
    real(c_float) :: f(D * heads), g(D * heads)
    integer(c_int8_t), target :: buf(D * heads * 4)
    integer :: h, e
    do h = 1, heads
      do e = 1, D
        f((h - 1) * D + e) = val(t, r, h, e)
      end do
    end do
    call fm_from_float(dtype, f, c_loc(buf), ierr); call chk('fm_from_float')
    call fm_to_float(dtype, c_loc(buf), g, ierr); call chk('fm_to_float')
    out = reshape(real(g, c_double), [D, heads])
  end subroutine rounded

  subroutine reference_kv()
    integer :: j
    do j = 1, S
      call rounded(2, j - 1, HKV, kref(:, :, j))
      call rounded(3, j - 1, HKV, vref(:, :, j))
    end do
  end subroutine reference_kv

  ! the document of position p (0-based)
  integer function doc_of(p)
    integer, intent(in) :: p
    integer :: c
    c = 0
    do doc_of = 1, size(docs)
      c = c + docs(doc_of)
      if (p < c) return
    end do
  end function doc_of

  ! the largest errors of O, LSE, dQ on nrow sampled local rows, every head: |x - ref| relative
  ! to max |ref| (O, dQ), absolute (LSE). The causal document mask from the lengths: row i sees
  ! key j when j <= i and both lie in one document.
  subroutine check_rows(err)
    real(c_double), intent(out) :: err(3)
    real(c_float), allocatable :: of(:), dqf(:)
    real(c_double) :: qr(D, HQ), dor(D, HQ), sc(S), p(S), ro(D), rdq(D), m, l, dl, lse_ref, ref_max(2), dmax(3)
    integer :: si, li, i, h, g, j, at, di
    logical :: sees(S)
    err = 0
    if (nlocal == 0) return
    allocate (of(nlocal * HQ * D), dqf(nlocal * HQ * D))
    call fm_to_float(dtype, c_loc(o), of, ierr); call chk('fm_to_float')
    call fm_to_float(dtype, c_loc(dq), dqf, ierr); call chk('fm_to_float')
    ref_max = 0; dmax = 0
    do si = 0, min(nrow, nlocal) - 1
      li = 1 + int((int(si, 8) * nlocal) / min(nrow, nlocal))
      i = rows(li)
      call rounded(1, i, HQ, qr)
      call rounded(4, i, HQ, dor)
      di = doc_of(i)
      do j = 1, S
        sees(j) = j - 1 <= i .and. doc_of(j - 1) == di
      end do
      do h = 1, HQ
        g = (h - 1) / (HQ / HKV) + 1
        do j = 1, S
          sc(j) = -huge(1d0)
          if (sees(j)) sc(j) = scale * dot_product(qr(:, h), kref(:, g, j))
        end do
        m = maxval(sc, mask=sees)
        where (sees)
          p = exp(sc - m)
        elsewhere
          p = 0
        end where
        l = sum(p)
        ro = matmul(vref(:, g, :), p) / l
        lse_ref = m + log(l)
        dl = dot_product(dor(:, h), ro)
        rdq = 0
        do j = 1, S
          if (sees(j)) rdq = rdq + scale * (p(j) / l) * (dot_product(dor(:, h), vref(:, g, j)) - dl) * kref(:, g, j)
        end do
        at = ((li - 1) * HQ + h - 1) * D
        dmax(1) = max(dmax(1), maxval(abs(of(at + 1:at + D) - ro)))
        dmax(3) = max(dmax(3), maxval(abs(dqf(at + 1:at + D) - rdq)))
        ref_max(1) = max(ref_max(1), maxval(abs(ro)))
        ref_max(2) = max(ref_max(2), maxval(abs(rdq)))
        ! lse is [heads][nlocal] in C's order
        dmax(2) = max(dmax(2), abs(lse((h - 1) * nlocal + li) - lse_ref))
        if (any(of(at + 1:at + D) /= of(at + 1:at + D)) .or. any(dqf(at + 1:at + D) /= dqf(at + 1:at + D)) .or. &
            lse((h - 1) * nlocal + li) /= lse((h - 1) * nlocal + li)) dmax = huge(1d0) ! NaN
      end do
    end do
    err(1) = dmax(1) / max(ref_max(1), tiny(1d0))
    err(2) = dmax(2)
    err(3) = dmax(3) / max(ref_max(2), tiny(1d0))
  end subroutine check_rows

end program ex3f

#if 0
/*TEST

  # ex3f exits 0 when O, LSE and dQ of every step agree with its float64 reference
  test:
    suffix: 1
    nsize: 1
    args: -seqlen 600 -steps 4
    output: ex3f: step 4,
    output: ex3f: OK

  # two ranks (a cp plan), fp32, the application's event in the log summary
  test:
    suffix: fp32_2
    nsize: 2
    args: -seqlen 500 -steps 2 -dtype fp32 -heads 2 -kv_heads 1 -head_dim 16 -fm_log_view
    output: ex3f: OK
    output: ex3f step

  # fp16 on three ranks, with the plan printed
  test:
    suffix: fp16_3
    nsize: 3
    args: -seqlen 450 -steps 2 -dtype fp16 -fm_plan_view
    output: FMPlan: type cp
    output: ex3f: OK

  # a bad -dtype is named, and the exit status is 1
  test:
    suffix: bad_dtype
    args: -dtype fp8
    returncode: 1
    output: -dtype is "fp8"

TEST*/
#endif
