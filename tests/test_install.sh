#!/bin/sh
# The installed tree, as a user meets it: `make install DESTDIR=<tmp>` from this build tree, then
# a small C program and a small Fortran program built against the installed tree with pkg-config
# alone (PKG_CONFIG_LIBDIR on the installed .pc files, their prefix moved under DESTDIR with
# --define-variable) and run on 1 rank with the CPU backend: C checks two output rows of a causal forward against the
# softmax written out here and its version against the .pc's; Fortran checks a causal mask's
# density against (S+1)/(2S). Also: the programs find the installed library through the rpath
# that Libs gives (no LD_LIBRARY_PATH), the CUDA
# include path is in Cflags and the installed tutorials (which allocate device memory themselves)
# link with Cflags and Libs alone when built with CUDA, every man page of man/pages.list and every
# document of doc/ landed, and man(1) finds a page and follows a .so page, and compare.sh landed
# in share/flashmask/bench beside the Python files it runs. Without a Fortran
# build only the C half runs (said below); SKIP (77) without pkg-config.
. "$srcdir/tests/common.sh"
: "${CC:=mpicc}" "${MAKE:=make}"
command -v pkg-config > /dev/null 2>&1 || { echo "SKIP: pkg-config not found"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fm_test_install.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
root="$tmp/root"
fail=0
bad() { echo "FAIL: $*"; fail=1; }

# the parent make's job server and overrides are not for this one
( unset MAKEFLAGS MFLAGS; $MAKE -C "$top_builddir" install DESTDIR="$root" ) > "$tmp/install.log" 2>&1 ||
  { tail -n 30 "$tmp/install.log"; echo "FAIL: make install DESTDIR=$root"; exit 1; }
pcfile=$(find "$root" -name flashmask.pc | head -n 1)
[ -n "$pcfile" ] || { echo "FAIL: make install put no flashmask.pc under $root"; exit 1; }
pcdir=$(dirname "$pcfile")
# only the installed .pc files; the configured prefix moved under DESTDIR with --define-variable
# (every path of the .pc derives from ${prefix}), so that -L and the rpath name the copy
PKG_CONFIG_LIBDIR="$pcdir" PKG_CONFIG_PATH="$pcdir"; unset PKG_CONFIG_SYSROOT_DIR
export PKG_CONFIG_LIBDIR PKG_CONFIG_PATH
prefix=$(pkg-config --variable=prefix flashmask)
pc() { pkg-config --define-variable=prefix="$root$prefix" "$@"; }
libdir=$(pc --variable=libdir flashmask)
echo "installed under $root (configured prefix $prefix)"
[ -f "$libdir/libflashmask.so" ] || bad "the .pc's libdir $libdir does not hold libflashmask.so"
cflags=$(pc --cflags flashmask) libs=$(pc --libs flashmask)
echo "flashmask.pc: cflags $cflags; libs $libs"
case " $libs " in *" -Wl,-rpath,$libdir "*) ;; *) bad "flashmask.pc's Libs has no -Wl,-rpath,$libdir" ;; esac

# ---------------------------------------------------------------- C
cat > "$tmp/app.c" <<'EOF'
#include <flashmask.h>
#if FM_HAVE_CUDA
#include <cuda_runtime_api.h> /* found through pkg-config's Cflags */
#endif
#include <math.h>
#include <stdio.h>
#include <string.h>
#define CHK(x) do { FMErrorCode e_ = (x); if (e_) { fprintf(stderr, "%s: %s\n", #x, FMErrorString(e_)); return 1; } } while (0)
enum { S = 64, D = 16 };
static float q[S * D], k[S * D], v[S * D], o[S * D], lse[S];
int main(int argc, char **argv)
{
  FMContext ctx; FMMask mask; FMPlan plan;
  double err = 0, s0, s1, m, p0, p1, scale = 1 / sqrt((double)D);
  CHK(FMInitialize(&argc, &argv, NULL, NULL));
  for (int i = 0; i < S * D; i++) { q[i] = (float)sin(0.37 * i); k[i] = (float)cos(0.23 * i); v[i] = (float)(i % 7) - 3; }
  CHK(FMContextCreate(MPI_COMM_WORLD, &ctx));
  CHK(FMContextSetBackend(ctx, FM_BACKEND_CPU));
  CHK(FMContextSetUp(ctx));
  CHK(FMMaskCreate(ctx, &mask));
  CHK(FMMaskSetSizes(mask, S, S, 1));
  CHK(FMMaskSetType(mask, FMMASKCAUSAL));
  CHK(FMMaskSetUp(mask));
  CHK(FMPlanCreate(ctx, &plan));
  CHK(FMPlanSetMask(plan, mask));
  CHK(FMPlanSetShape(plan, 1, 1, 1, D, FM_DTYPE_FP32));
  CHK(FMPlanSetUp(plan));
  CHK(FMPlanForward(plan, q, k, v, o, lse));
  /* causal: row 0 sees key 0 only, row 1 keys 0 and 1 */
  s0 = s1 = 0;
  for (int d = 0; d < D; d++) { s0 += q[D + d] * k[d]; s1 += q[D + d] * k[D + d]; }
  s0 *= scale; s1 *= scale; m = s0 > s1 ? s0 : s1;
  p0 = exp(s0 - m) / (exp(s0 - m) + exp(s1 - m)); p1 = 1 - p0;
  for (int d = 0; d < D; d++) {
    err = fmax(err, fabs(o[d] - v[d]));
    err = fmax(err, fabs(o[D + d] - (p0 * v[d] + p1 * v[D + d])));
  }
  printf("version %s, max error %.3e\n", FMGetVersion(), err);
  CHK(FMPlanDestroy(&plan));
  CHK(FMMaskDestroy(&mask));
  CHK(FMContextDestroy(&ctx));
  CHK(FMFinalize());
  return err < 1e-5 ? 0 : 1;
}
EOF
if $CC $cflags -o "$tmp/app" "$tmp/app.c" $libs -lm > "$tmp/cc.log" 2>&1; then
  out=$(fm_run 1 "$tmp/app" 2>&1)
  rc=$?
  echo "C: $out"
  [ $rc = 0 ] || bad "the installed C program failed (exit $rc)"
  want=$(pc --modversion flashmask)
  echo "$out" | grep -q "^version $want," || bad "the C program reports another version than flashmask.pc's $want"
  # the library the program loads is the installed one, found through the rpath alone
  if command -v ldd > /dev/null 2>&1; then
    ldd "$tmp/app" | grep -q "libflashmask\.so.* => $libdir/" ||
      bad "the C program does not load libflashmask from $libdir: $(ldd "$tmp/app" | grep flashmask)"
  fi
else
  cat "$tmp/cc.log"; bad "$CC \$(pkg-config --cflags flashmask) app.c \$(pkg-config --libs flashmask)"
fi
if [ "${FM_HAVE_CUDA:-0}" = 1 ]; then
  # the CUDA toolkit may live anywhere (/usr/local/cuda, /usr/local, /opt/...): Cflags must carry
  # every -I that configure found cuda_runtime_api.h with
  [ -n "${FM_CUDA_CFLAGS:-}" ] || bad "built with CUDA, but configure's CUDA_CFLAGS did not reach the test"
  for f in ${FM_CUDA_CFLAGS:-}; do
    case " $cflags " in *" $f "*) ;; *) [ "$f" = -I/usr/include ] && continue  # pkg-config drops system dirs
      bad "built with CUDA, but flashmask.pc's Cflags lacks $f (configure's CUDA_CFLAGS): $cflags" ;; esac
  done
  # a program that allocates its device tensors itself (the installed tutorials do) links with
  # pkg-config's flags alone: Libs carries the CUDA runtime
  for ex in ex1 ex2; do
    src=$(find "$root" -path "*/tutorials/$ex.c" | head -n 1)
    [ -n "$src" ] || { bad "the installed tree has no tutorials/$ex.c"; continue; }
    $CC $cflags -o "$tmp/$ex" "$src" $libs -lm > "$tmp/$ex.log" 2>&1 ||
      { cat "$tmp/$ex.log"; bad "the installed $ex.c does not build with pkg-config's Cflags and Libs alone"; }
  done
fi

# ---------------------------------------------------------------- Fortran
if [ "${FM_HAVE_FORTRAN:-0}" = 1 ]; then
  cat > "$tmp/app.F90" <<'EOF'
program app
  use mpi
  use flashmask
  implicit none
  integer, parameter :: S = 96
  integer :: ierr
  type(fm_context) :: ctx
  type(fm_mask) :: mask
  double precision :: dens, spars
  call fm_initialize(ierr);                         if (ierr /= 0) error stop 'fm_initialize'
  call fm_context_create(MPI_COMM_WORLD, ctx, ierr); if (ierr /= 0) error stop 'fm_context_create'
  call fm_context_set_backend(ctx, FM_BACKEND_CPU, ierr)
  call fm_context_set_up(ctx, ierr);                if (ierr /= 0) error stop 'fm_context_set_up'
  call fm_mask_create(ctx, mask, ierr)
  call fm_mask_set_sizes(mask, S, S, 1, ierr)
  call fm_mask_set_type(mask, FMMASKCAUSAL, ierr)
  call fm_mask_set_up(mask, ierr);                  if (ierr /= 0) error stop 'fm_mask_set_up'
  call fm_mask_get_density(mask, dens, spars, ierr)
  write (*, '(a,f10.7,a,f10.7)') 'density ', dens, ' expected ', dble(S + 1) / dble(2 * S)
  if (abs(dens - dble(S + 1) / dble(2 * S)) > 1d-12) error stop 'wrong density'
  call fm_mask_destroy(mask, ierr)
  call fm_context_destroy(ctx, ierr)
  call fm_finalize(ierr)
end program app
EOF
  : "${FC:=mpifort}"
  fcflags=$(pc --cflags flashmask-fortran) flibs=$(pc --libs flashmask-fortran)
  echo "flashmask-fortran.pc: cflags $fcflags; libs $flibs"
  [ "$(pc --variable=fflags flashmask-fortran)" = "$(echo $fcflags)" ] || bad "flashmask-fortran.pc: fflags and Cflags differ"
  # the module comes from the installed tree only (the compile runs in $tmp, away from the build's .mod)
  if (cd "$tmp" && $FC $fcflags -o app_f app.F90 $flibs) > "$tmp/fc.log" 2>&1; then
    # the program finds libflashmask_fortran through its rpath; that library's own runpath names
    # the configured libdir (where a real install puts libflashmask), which a DESTDIR copy is not
    out=$(LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" fm_run 1 "$tmp/app_f" 2>&1)
    rc=$?
    echo "Fortran: $out"
    [ $rc = 0 ] || bad "the installed Fortran program failed (exit $rc)"
  else
    cat "$tmp/fc.log"; bad "$FC \$(pkg-config --cflags flashmask-fortran) app.F90 \$(pkg-config --libs flashmask-fortran)"
  fi
else
  echo "note: built without Fortran: only the C half ran (no flashmask-fortran.pc to test)"
fi

# ---------------------------------------------------------------- man pages and documents
man3=$(dirname "$(find "$root" -name flashmask.3 | head -n 1)")
n=0
while read -r p; do
  [ -f "$man3/$p" ] || bad "man page $p was not installed"; n=$((n + 1))
done < "$top_builddir/man/pages.list"
[ "$n" -gt 20 ] || bad "only $n man pages listed"
# a section 1 page for every program installed
for b in "$root"/bin/fm*; do
  [ -f "$b" ] || continue
  find "$root" -path "*/man1/$(basename "$b").1" | grep -q . || bad "no man1 page installed for $(basename "$b")"
done
# man itself must work here: a page of our own with a known word is the probe (minimized images
# ship a man that only says so, and some lack groff); where it does not, only the files are checked
probe=$tmp/probe/man3
mkdir -p "$probe"
printf '.TH FMPROBE 3\n.SH NAME\nfmprobe \\- xyzzyprobe\n' > "$probe/fmprobe.3"
if command -v man > /dev/null 2>&1 && MANPAGER=cat man -M "$tmp/probe" 3 fmprobe 2> /dev/null | grep -q xyzzyprobe; then
  mroot=$(dirname "$man3")
  MANPAGER=cat man -M "$mroot" 3 FMOptionsGetReal 2> /dev/null | grep -q FMOptionsGetInt ||
    bad "man -M $mroot FMOptionsGetReal does not show the FMOptionsGet* page"
  MANPAGER=cat man -M "$mroot" 3 flashmask 2> /dev/null | grep -q FMPlanForward || bad "man flashmask does not list FMPlanForward"
  MANPAGER=cat man -M "$mroot" 1 fmplan-sim 2> /dev/null | grep -q -- '-gpus_per_node' || bad "man fmplan-sim does not show its options"
else
  echo "note: man does not render pages on this machine (no man, or a minimized one): only the page files were checked"
fi
# the documents keep the source tree's layout under share/doc/flashmask, so that the paths they
# give each other (README.md's doc/format.md, tutorials/ex1.c, HACKING.md) hold there too
docdir=$(dirname "$(find "$root" -path '*/doc/flashmask/README.md' | head -n 1)")
for f in doc/*.md doc/*.svg README.md HACKING.md tutorials/ex1.c tutorials/ex2.c; do
  for g in "$srcdir"/$f; do
    r=${g#"$srcdir"/}
    [ -f "$docdir/$r" ] || bad "$r was not installed in share/doc/flashmask"
  done
done
# the peers' comparison: compare.sh (executable) with the Python files it runs from its own directory
cmp=$(find "$root" -path '*/flashmask/bench/compare.sh' | head -n 1)
if [ -z "$cmp" ]; then bad "compare.sh was not installed in share/flashmask/bench"
else
  [ -x "$cmp" ] || bad "$cmp is not executable"
  for p in $(sed -n 's/.*"\$here\/\([a-z_]*\.py\)".*/\1/p' "$cmp"); do
    [ -f "$(dirname "$cmp")/$p" ] || bad "compare.sh runs $p, which was not installed beside it"
  done
  sh -n "$cmp" || bad "$cmp does not parse"
fi
echo "$n man pages in $man3, $(find "$docdir" -type f | wc -l) documents in $docdir"
exit $fail
