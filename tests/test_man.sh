#!/bin/sh
# Manual pages: every function that include/flashmask.h declares has a section 3 page in the
# build tree (man/man3, made by doc/man/mkman.awk at build time; a ".so" page must point at a
# page that exists), its page carries a comment from the header, and that comment names each
# of the function's arguments. The functions and their arguments come from the C preprocessor's
# view of the header ($CC -E), not from the page generator. Every page must also format without
# a groff warning (when groff is installed), and no summary may leave a bracket open or be cut
# short. Fails listing what is missing.
. "$srcdir/tests/common.sh"
: "${CC:=cc}"
man3="$top_builddir/man/man3"
[ -f "$top_builddir/man/pages.list" ] || { echo "FAIL: $top_builddir/man/pages.list is missing (make builds it)"; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fm_test_man.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT

# The declarations the compiler sees in flashmask.h and its four parts (flashmask/fmsys.h,
# fmcontext.h, fmmask.h, fmplan.h; not in the other headers they include): one line
# "name arg1 arg2 ..." per function.
$CC -E -I"$srcdir/include" -I"$top_builddir/include" "$srcdir/include/flashmask.h" > "$tmp/pp.c" ||
  { echo "FAIL: $CC -E include/flashmask.h"; exit 1; }
awk '
  /^# [0-9]+ "/ { f = $3; keep = (f ~ /(^|\/)flashmask(\/fm(sys|context|mask|plan))?\.h"$/); next }
  keep { text = text " " $0 }
  END {
    n = split(text, S, ";")
    for (i = 1; i <= n; i++) {
      s = S[i]; gsub(/[ \t]+/, " ", s)
      if (s ~ /typedef/ || !match(s, /FM[A-Za-z0-9_]* ?\(/)) continue
      name = substr(s, RSTART, RLENGTH - 1); sub(/ $/, "", name)
      args = substr(s, RSTART + RLENGTH); sub(/\)[^)]*$/, "", args)
      out = name
      m = split(args, A, ",")
      for (j = 1; j <= m; j++) {
        a = A[j]; gsub(/\[[^]]*\]/, "", a); sub(/[ ]+$/, "", a)
        if (a ~ /^ *void$/ || a ~ /^ *$/) continue
        if (!match(a, /[A-Za-z_][A-Za-z0-9_]*$/)) continue
        out = out " " substr(a, RSTART, RLENGTH)
      }
      print out
    }
  }' "$tmp/pp.c" > "$tmp/decls"
nfun=$(wc -l < "$tmp/decls")
if [ "$nfun" -lt 20 ]; then echo "FAIL: found only $nfun functions in include/flashmask.h"; cat "$tmp/decls"; exit 1; fi

# description NAME: the DESCRIPTION text of NAME's page (following one .so), unescaped
description() {
  p="$man3/$1.3"
  [ -f "$p" ] || return 1
  so=$(sed -n 's/^\.so man3\///p' "$p")
  if [ -n "$so" ]; then p="$man3/$so"; [ -f "$p" ] || return 2; fi
  sed -n '/^\.SH DESCRIPTION/,/^\.SH /p' "$p" | sed '1d;$d;/^\.[a-z][a-z]*$/d;s/\\-/-/g;s/\\e/\\/g;s/\\&//g'
}

nopage="" nocomment="" noargs=""
while read -r name args; do
  description "$name" > "$tmp/desc"; rc=$?
  case $rc in
    1) nopage="$nopage $name"; continue ;;
    2) nopage="$nopage $name(.so target missing)"; continue ;;
  esac
  if [ ! -s "$tmp/desc" ] || grep -q '^This function has no comment in flashmask.h.$' "$tmp/desc"; then
    nocomment="$nocomment $name"; continue
  fi
  missing=""
  for a in $args; do
    grep -q "\(^\|[^A-Za-z0-9_]\)$a\([^A-Za-z0-9_]\|$\)" "$tmp/desc" || missing="$missing${missing:+,}$a"
  done
  [ -z "$missing" ] || noargs="$noargs $name($missing)"
done < "$tmp/decls"

fail=0
[ -z "$nopage" ] || { echo "FAIL: functions of flashmask.h without a man page:$nopage"; fail=1; }
[ -z "$nocomment" ] || { echo "FAIL: functions of flashmask.h without a comment:$nocomment"; fail=1; }
[ -z "$noargs" ] || { echo "FAIL: comments in flashmask.h that do not name these arguments:$noargs"; fail=1; }
[ -f "$man3/flashmask.3" ] || { echo "FAIL: no flashmask(3) overview page"; fail=1; }
# every page the generator listed is there, and the overview links every function
while read -r p; do [ -f "$man3/$p" ] || { echo "FAIL: man/pages.list names $p, which is missing"; fail=1; }; done < "$top_builddir/man/pages.list"
while read -r name args; do
  grep -q "^\.BR $name (3)\$" "$man3/flashmask.3" 2>/dev/null || { echo "FAIL: flashmask(3) does not list $name"; fail=1; }
done < "$tmp/decls"
# Every summary (a page's NAME line, flashmask(3)'s line under each function) closes what it
# opens: "(" and "[" against ")" and "]" (an interval such as (0, 1] counts as closed); and none
# is cut short: none ends on a word such as "out" or "of", or holds " ;".
for p in "$man3"/*.3; do
  grep -q '^\.so ' "$p" && continue
  { sed -n '/^\.SH NAME/{n;p;}' "$p"; [ "$(basename "$p")" = flashmask.3 ] && sed -n '/^\.BR FM.* (3)$/{n;p;}' "$p"; } |
    awk -v page="$(basename "$p")" '{ d = 0; for (i = 1; i <= length($0); i++) { c = substr($0, i, 1)
      if (c == "(" || c == "[") d++; else if ((c == ")" || c == "]") && d > 0) d-- }
      if (d > 0) { print "FAIL: " page ": a summary leaves a bracket open: " $0; bad = 1 }
      s = $0; sub(/^FM[A-Za-z0-9_, ]* \\- /, "", s)
      if (s ~ / (out|in|of|the|a|and|or)$/ || s ~ / ;/) { print "FAIL: " page ": a summary cut short: " $0; bad = 1 } }
      END { exit bad }' || fail=1
done
if command -v groff > /dev/null 2>&1; then
  for p in "$man3"/*.3; do
    grep -q '^\.so ' "$p" && continue
    groff -man -ww -z "$p" > "$tmp/groff" 2>&1
    [ -s "$tmp/groff" ] && { echo "FAIL: groff warns on $p:"; cat "$tmp/groff"; fail=1; }
  done
else
  echo "note: groff not found, the pages' markup was not checked"
fi
# Section 1: every program built has its page (doc/man/mkman1.awk from the program's opening
# comment), named as the program, with a one-sentence NAME line, each option the program's
# usage line gives, and no groff warning.
n1=0
for b in fmplan-sim fmtrace fmbench; do
  [ -x "$top_builddir/$b" ] || continue
  p="$top_builddir/man/man1/$b.1"
  [ -f "$p" ] || { echo "FAIL: no man1 page for $b ($p)"; fail=1; continue; }
  n1=$((n1 + 1))
  name=$(sed -n '/^\.SH NAME/{n;p;}' "$p" | sed 's/\\-/-/g')
  case $name in "$b - "*.) ;; *) echo "FAIL: $b.1: the NAME line is not \"$b - a sentence.\": $name"; fail=1 ;; esac
  # the options of the comment's usage lines (the lines that start with the program's name)
  for o in $(sed -n '/^ \* *\(mpiexec.*\)\?'"$b"' /,/^ \*$/p' "$srcdir/src/bin/$b.c" | grep -o -- ' \[\?-[a-z_]*' | tr -d ' [' | sort -u); do
    grep -q -- "\\$o\([^a-z_]\|\$\)" "$p" || { echo "FAIL: $b.1 does not give option $o"; fail=1; }
  done
  if command -v groff > /dev/null 2>&1; then
    groff -man -ww -z "$p" > "$tmp/groff" 2>&1
    [ -s "$tmp/groff" ] && { echo "FAIL: groff warns on $p:"; cat "$tmp/groff"; fail=1; }
  fi
done
[ "$n1" -gt 0 ] || { echo "FAIL: no program's man1 page was checked (fmplan-sim is always built)"; fail=1; }
echo "$nfun functions in include/flashmask.h, $(wc -l < "$top_builddir/man/pages.list") pages; $n1 programs with a section 1 page"
exit $fail
