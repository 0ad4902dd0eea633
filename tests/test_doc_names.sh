#!/bin/sh
# test_doc_names - every script README.md, HACKING.md and doc/*.md name is in the source tree
# (share/ci/doc-names.sh; make dist runs the same check on the distribution and fails on a
# missing name, so this catches it in make check first).
sh "$srcdir/share/ci/doc-names.sh" "$srcdir" "$srcdir" || { echo "FAIL: a document names a script the source tree does not hold"; exit 1; }
echo "PASS: every script the documents name is in the source tree"
