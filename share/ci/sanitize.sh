#!/bin/sh
# sanitize.sh - the whole `make check` again under -fsanitize=address,undefined, in a second tree.
#
# Run from anywhere inside a checkout (CI runs it after the README's `make check`). It copies the
# sources (git's tracked and untracked, not ignored, files; or, outside git, the whole tree,
# cleaned with `make distclean`) to tests/sanitize/src, so the in-source configured checkout
# never blocks it, then configures that copy without CUDA, with
#   CFLAGS/FCFLAGS = -g -O1 -fno-omit-frame-pointer -fsanitize=address,undefined
# and runs its `make -j2 check`. Any sanitizer report in our code fails the test it happens in:
# ASan stops the process, UBSan too (halt_on_error), LeakSanitizer exits 23 at the end.
# The leaks of Open MPI, hwloc, HDF5 and the OpenMP runtime (memory they keep until exit, not
# ours) are suppressed by share/ci/lsan.supp; share/ci/ubsan.supp is UBSan's list (empty: no
# report is tolerated). .ci/run counts the .trs files of both trees.
# Environment: FM_SANITIZE_DIR (default tests/sanitize), FM_SANITIZE_JOBS (2). Arguments go to
# make check (sh share/ci/sanitize.sh TESTS=tests/test_sys.sh runs one test).
# Exit: make check's status (0 when every test passed or skipped), after the one re-run below.
set -u
top=$(cd "$(dirname "$0")/../.." && pwd) || exit 1
dir=${FM_SANITIZE_DIR:-$top/tests/sanitize}
jobs=${FM_SANITIZE_JOBS:-2}
case $dir in /*) ;; *) dir=$top/$dir ;; esac
rm -rf "$dir" && mkdir -p "$dir/src" || exit 1
echo "sanitize.sh: copying the sources to $dir/src"
if git -C "$top" rev-parse --is-inside-work-tree > /dev/null 2>&1; then
  (cd "$top" && git ls-files -co --exclude-standard) | while IFS= read -r f; do
    [ -f "$top/$f" ] || continue       # tracked but deleted here
    case $f in tests/sanitize/*) continue ;; esac
    mkdir -p "$dir/src/$(dirname "$f")" && cp -p "$top/$f" "$dir/src/$f" || exit 1
  done || exit 1
else
  (cd "$top" && tar --exclude=./tests/sanitize -cf - .) | (cd "$dir/src" && tar -xf -) || exit 1
  if [ -f "$dir/src/Makefile" ]; then (cd "$dir/src" && make distclean > /dev/null) || exit 1; fi
fi
san="-fsanitize=address,undefined"
flags="-g -O1 -fno-omit-frame-pointer $san"
# what every instrumented process (run through mpiexec, which passes the environment on) reads
# (fast_unwind_on_malloc=0: Open MPI's libraries have no frame pointers, and the suppressions need
#  whole allocation stacks; verify_asan_link_order=0: test_install's programs are not instrumented)
ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=1:verify_asan_link_order=0:fast_unwind_on_malloc=0"
# (use_tls=0: LeakSanitizer's tracer, scanning the threads' thread-local storage at exit, crashed
#  with signal 11 in 5 of 9 runs of three multi-rank tests with unbound ranks, and now and then
#  with bound ones (GCC 12's libsanitizer, Open MPI 4.1); without that scan 27 runs of nine such
#  tests passed, unbound. It takes roots away, so it can add leak reports, never hide one)
LSAN_OPTIONS="suppressions=$top/share/ci/lsan.supp:print_suppressions=0:use_tls=0"
UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$top/share/ci/ubsan.supp"
# keep Open MPI's components loaded so the leak reports and suppressions can name them
OMPI_MCA_mca_base_component_disable_dlclose=1 PMIX_MCA_mca_base_component_disable_dlclose=1
export ASAN_OPTIONS LSAN_OPTIONS UBSAN_OPTIONS OMPI_MCA_mca_base_component_disable_dlclose PMIX_MCA_mca_base_component_disable_dlclose
cd "$dir/src" || exit 1
echo "sanitize.sh: configure --without-cuda CFLAGS='$flags' (log: $dir/src/config.log)"
{ ./autogen.sh && ./configure --without-cuda --without-nccl CFLAGS="$flags" FCFLAGS="$flags" LDFLAGS="$san"; } > "$dir/configure.out" 2>&1 || {
  tail -40 "$dir/configure.out"; echo "sanitize.sh: configure failed"; exit 1; }
echo "sanitize.sh: make -j$jobs check"
make -j"$jobs" check "$@"
st=$?
# LeakSanitizer stops every thread at exit to scan for leaks; should its tracer itself still crash
# ("Tracer caught signal 11 ... LeakSanitizer has encountered a fatal error") after the test
# passed (use_tls=0 above took away the cause found so far), that is no report about our code. Such tests (and only those without any
# sanitizer report in their log) run once more; a second failure counts.
if [ $st -ne 0 ]; then
  retry=
  for l in tests/*.log; do
    t=${l%.log}
    [ -f "$t.trs" ] && grep -q '^:test-result: FAIL' "$t.trs" || continue
    grep -q 'LeakSanitizer has encountered a fatal error' "$l" || continue
    grep -q -E 'ERROR: (AddressSanitizer|LeakSanitizer: detected)|runtime error:' "$l" && continue
    retry="$retry $t.sh"
  done
  if [ -n "$retry" ]; then
    echo "sanitize.sh: LeakSanitizer's tracer crashed (not a report) in:$retry; running them once more"
    make -j"$jobs" check TESTS="${retry# }"
    st=$?
  fi
fi
exit $st
