# mkman1.awk - a section 1 manual page from a program's opening comment (POSIX awk).
#
#   awk -v version=0.1.0 -v docdir=/usr/share/doc/flashmask -f doc/man/mkman1.awk src/bin/fmbench.c > fmbench.1
#
# The program's source starts with its documentation: a comment whose first line is
# "name - what it does", then the usage and the options. That comment is the one place where
# they are written; this script only formats it: the first line gives the NAME section, the rest
# the DESCRIPTION, kept line for line (no filling, so that option lists and examples stay as
# written). Paths of the project's documents (doc/..., tutorials/..., README.md) are given
# under docdir, where `make install` puts them. Exits 1 when the file has no such comment.

function esc(s) {
  gsub(/\\/, "\\e", s)
  gsub(/-/, "\\-", s)
  if (s ~ /^[.']/) s = "\\&" s
  return s
}

# the project's document paths under docdir (a path at the start of a word)
function docs(s,   out, pre) {
  out = ""
  while (match(s, /(^|[ (`"])(doc\/[A-Za-z0-9_.\/-]+|tutorials\/[A-Za-z0-9_.-]+|README\.md|HACKING\.md)/)) {
    pre = substr(s, RSTART, RLENGTH)
    if (pre ~ /^[ (`"]/) { out = out substr(s, 1, RSTART) ; pre = substr(pre, 2) }
    else out = out substr(s, 1, RSTART - 1)
    out = out docdir "/" pre
    s = substr(s, RSTART + RLENGTH)
  }
  return out s
}

NR == 1 {
  if ($0 !~ /^\/\*/) { print "mkman1.awk: " FILENAME " does not start with a comment" > "/dev/stderr"; bad = 1; exit 1 }
  incomment = 1
  next
}
incomment {
  line = $0
  last = line ~ /\*\//
  sub(/[ \t]*\*\/.*$/, "", line)
  sub(/^[ \t]*\*/, "", line)
  if (substr(line, 1, 1) == " ") line = substr(line, 2)
  sub(/[ \t]+$/, "", line)
  if (!name) {
    if (line == "") { if (last) exit; next }
    if (!match(line, / - /)) { print "mkman1.awk: " FILENAME ": the first line is not \"name - summary\"" > "/dev/stderr"; bad = 1; exit 1 }
    name = substr(line, 1, RSTART - 1)
    summary = substr(line, RSTART + 3)
  } else {
    body[nb++] = line
  }
  if (last) exit
}
END {
  if (bad) exit 1
  if (!name) { print "mkman1.awk: " FILENAME ": no opening comment" > "/dev/stderr"; exit 1 }
  # the summary may go on over the next lines, up to the first blank one
  skip = 0
  while (nb > 0 && skip < nb && body[skip] != "") summary = summary " " body[skip++]
  # NAME takes the first sentence; the paragraph's rest opens the description
  rest = ""
  if (match(summary, /\. /)) { rest = substr(summary, RSTART + 2); summary = substr(summary, 1, RSTART) }
  while (skip < nb && body[skip] == "") skip++
  while (nb > skip && body[nb - 1] == "") nb--
  up = toupper(name)
  printf ".TH %s 1 \"\" \"flashmask %s\" \"flashmask\"\n", up, version
  print ".SH NAME"
  print esc(name) " \\- " esc(docs(summary))
  print ".SH DESCRIPTION"
  if (rest != "") { print esc(docs(rest)); print ".PP" }
  print ".nf"
  for (i = skip; i < nb; i++) print (body[i] == "" ? "" : esc(docs(body[i])))
  print ".fi"
  print ".SH SEE ALSO"
  print ".BR flashmask (3),"
  print "and the documents in"
  print esc(docdir) "."
}
