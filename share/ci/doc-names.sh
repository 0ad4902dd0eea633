#!/bin/sh
# doc-names.sh SRCDIR TREE - every script the documents (SRCDIR's README.md, HACKING.md and
# doc/*.md) tell the reader to run, each name ending in .sh, .py or .awk, is a file of TREE:
# with a path, at that path; a bare name, anywhere in TREE. Prints each name that is not and
# exits 1 if there is one. make dist runs it on the distribution (dist-hook in Makefile.am),
# tests/test_doc_names.sh on the source tree, so that a name no tree holds (a development
# script kept outside the repository, another project's file) is caught by make check
# before it breaks make dist.
src=${1:?usage: doc-names.sh SRCDIR TREE}
tree=${2:?usage: doc-names.sh SRCDIR TREE}
fail=0
for s in $(cat "$src/README.md" "$src/HACKING.md" "$src"/doc/*.md | grep -oE '[A-Za-z0-9_./-]+\.(sh|py|awk)' | sed 's|^\./||' | sort -u); do
  case $s in
    */*) found=$(test -f "$tree/$s" && echo "$s") ;;
    *) found=$(cd "$tree" && find . -name "$s" | head -n 1) ;;
  esac
  if [ -z "$found" ]; then
    echo "doc-names: a document names $s, which is not in $tree"
    fail=1
  fi
done
exit $fail
