#!/bin/sh
# Options at the edges: -help lists every option FMInitialize reads once each (-fm_error_silent
# included, -fm_log_view and -options_file once), all of them under its banner; an option set but never used is warned about at FMFinalize by
# default, -options_left 0 hides it, -options_left says "There are no unused options."; and
# every test log of this make check is free of such warnings (options a test sets are used).
. "$srcdir/tests/common.sh"
fail=0
bad() { echo "FAIL: $*" >&2; fail=1; }
# test_sys expects -fm_test_env 7 from FM_OPTIONS and -fm_test_override 3 on the command line
sys() { FM_OPTIONS="-fm_test_env 7" fm_run 1 ./tests/test_sys -fm_test_override 3 "$@"; }
out=$(sys -help 2>&1) || bad "test_sys -help failed: $out"
for o in -fm_error_silent -fm_error_abort -fm_log_view -options_left -options_file; do
  n=$(echo "$out" | grep -c -- "^  $o <")
  [ "$n" = 1 ] || bad "-help lists $o $n times, expected once"
done
# every option line comes under the banner (-options_file, read first, came above it)
first=$(echo "$out" | grep -n -- "^  -" | head -1 | cut -d: -f1)
banner=$(echo "$out" | grep -n "options (current value in <>)" | head -1 | cut -d: -f1)
[ -n "$banner" ] && [ -n "$first" ] && [ "$first" -gt "$banner" ] || bad "-help lists an option (line ${first:-none}) before its banner (line ${banner:-none}): $out"
out=$(sys -fm_test_never_read 5 2>&1) || bad "test_sys -fm_test_never_read 5 failed: $out"
echo "$out" | grep -q -- "WARNING! option -fm_test_never_read 5 was set but never used" || bad "no warning about -fm_test_never_read: $out"
n=$(echo "$out" | grep -c "was set but never used")
[ "$n" = 1 ] || bad "$n unused-option warnings, expected 1 (-fm_test_never_read): $out"
out=$(sys -fm_test_never_read 5 -options_left 0 2>&1) || bad "test_sys -options_left 0 failed: $out"
echo "$out" | grep -q "never used" && bad "-options_left 0 still warns: $out"
out=$(sys -options_left 2>&1) || bad "test_sys -options_left failed: $out"
echo "$out" | grep -q "There are no unused options." || bad "-options_left does not say there are no unused options: $out"
echo "$out" | grep -q "never used" && bad "-options_left warns with every option used: $out"
# -options_file F on the command line: F's options are read (test_sys checks -fm_test_env 7 and
# -fm_test_override 3, which the command line and FM_OPTIONS still set over the file's), and a
# missing file is a named error
of=$(mktemp "${TMPDIR:-/tmp}/fm_opts.XXXXXX") || exit 99
printf -- '-fm_test_override 99\n-fm_test_from_file 5\n' > "$of"
out=$(sys -options_file "$of" -help 2>&1) || bad "test_sys -options_file failed: $out"
echo "$out" | grep -q -- "-options_file" || bad "-help does not list -options_file: $out"
out=$(sys -options_file "$of" 2>&1) || bad "test_sys -options_file (the command line over the file) failed: $out"
echo "$out" | grep -q -- "option -fm_test_from_file 5 was set but never used" || bad "-options_file's -fm_test_from_file was not read: $out"
out=$(sys -options_file "$of.missing" 2>&1) && bad "a missing -options_file was accepted: $out"
echo "$out" | grep -q "Cannot open options file" || bad "a missing -options_file gave no named error: $out"
rm -f "$of"
# an unmatched quote in FM_OPTIONS is a named error, not a silent misreading
out=$(FM_OPTIONS='-fm_test_env 7 -fm_trace "unclosed.h5' fm_run 1 ./tests/test_sys -fm_test_override 3 2>&1) && bad "an unmatched quote in FM_OPTIONS was accepted: $out"
echo "$out" | grep -q 'has no closing " quote' || bad "an unmatched quote in FM_OPTIONS gave no named error: $out"
# The other tests' logs (those already written by this make check) carry no such warning.
# FM_OPTIONS_LOG_SKIP names logs not to scan (none by default).
skip=${FM_OPTIONS_LOG_SKIP-}
for f in tests/*.log; do
  [ -f "$f" ] || continue
  case " tests/test_options.log $skip " in *" $f "*) echo "not scanned: $f"; continue ;; esac
  grep -H "was set but never used" "$f" && bad "$f: an option set but never used (see above)"
done
[ $fail = 0 ] && echo "test_options.sh: -help, unused-option warnings and the test logs: ok"
exit $fail
