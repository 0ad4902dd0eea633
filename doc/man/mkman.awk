# mkman.awk - section 3 manual pages from the comments of include/flashmask.h and its parts
# (POSIX awk).
#
#   awk -v dir=man/man3 -v version=0.1.0 -v docdir=/usr/share/doc/flashmask -v docs="a.md b.md" \
#       -f doc/man/mkman.awk include/flashmask.h include/flashmask/fmsys.h include/flashmask/fmcontext.h \
#       include/flashmask/fmmask.h include/flashmask/fmplan.h > pages.list
#
# flashmask.h comes first: its opening comment is the overview's text. A part's own opening
# comment is dropped (a blank line follows it before any declaration).
#
# The header's convention: a comment block followed, with no blank line between, by the
# declarations it documents. Every function (and function-like macro) of such a group is listed
# in the group's page, named after the group's first function; the group's other functions get
# ".so" pages pointing at it. flashmask.3 is the overview: the header's opening comment, every
# function by header section with its one-line summary, and the error codes. A function without
# a comment still gets a page that says so (tests/test_man.sh fails on it). The names of the
# written pages are printed, one a line.

function trim(s) { sub(/^[ \t]+/, "", s); sub(/[ \t]+$/, "", s); return s }

# roff text: backslashes, hyphens (so that options stay copyable), leading dots and quotes
function esc(s) {
  gsub(/\\/, "\\e", s)
  gsub(/-/, "\\-", s)
  if (s ~ /^[.']/) s = "\\&" s
  return s
}

# a comment line, with the leading " * " removed
function add_comment(s) {
  sub(/^[ \t]*\*?/, "", s)
  if (substr(s, 1, 1) == " ") s = substr(s, 2)
  sub(/[ \t]+$/, "", s)
  cbuf = (cnl++ ? cbuf "\n" : "") s
}

# a finished comment block: a section banner, the header's opening comment, or a group's text
function end_comment(   t) {
  while (cnl > 1 && cbuf ~ /\n$/) { sub(/\n$/, "", cbuf); cnl-- }
  t = trim(cbuf)
  # a banner is three one-line comments: dashes, the section's title, dashes
  if (cnl == 1 && t ~ /^-+$/) { banner = (banner == 2) ? 0 : 1; cbuf = ""; cnl = 0; return }
  if (cnl == 1 && banner == 1) { section[++nsec] = t; banner = 2; cbuf = ""; cnl = 0; return }
  banner = 0
  if (top == "") top = cbuf
  else if (pending != "" && !used) pending = pending "\n\n" cbuf
  else { pending = cbuf; used = 0; gid = 0 }
  cbuf = ""; cnl = 0
}

# a declaration that names a function: record it in the current group
function add_function(name, proto) {
  nf++
  fname[nf] = name; fproto[nf] = proto; fsec[nf] = nsec
  if (pending == "") { ng++; gtext[ng] = ""; gn[ng] = 0 }
  else if (gid == 0) { ng++; gtext[ng] = pending; gn[ng] = 0; gid = ng }
  g = (pending == "") ? ng : gid
  fgroup[nf] = g; gmem[g, ++gn[g]] = nf
  used = 1
}

function statement(s,   name) {
  gsub(/[ \t\n]+/, " ", s); s = trim(s)
  if (s ~ /^typedef/ || s !~ /\);$/) return
  if (!match(s, /FM[A-Za-z0-9_]*[ ]*\(/)) return
  name = substr(s, RSTART, RLENGTH - 1); sub(/ +$/, "", name)
  sub(/;$/, "", s)
  add_function(name, s ";")
}

# the one-line summary of a function: the text after "Name - " (or "Name / Other - ") up to the
# end of its first sentence; "" when the comment has no such heading
function summary(name, text,   n, L, i, p, rest, pre, out, j) {
  n = split(text, L, "\n")
  for (i = 1; i <= n; i++) {
    p = index(L[i], name)
    if (p == 0) continue
    pre = substr(L[i], p - 1, 1)
    if (p > 1 && pre ~ /[A-Za-z0-9_]/) continue
    rest = substr(L[i], p + length(name))
    sub(/^\([^)]*\)/, "", rest)
    if (rest !~ /^( \/ [A-Za-z0-9_]+)* - /) continue
    sub(/^( \/ [A-Za-z0-9_]+)* - /, "", rest)
    out = rest
    for (j = i + 1; j <= n && j <= i + 3 && !sentence_end(out); j++) {
      if (trim(L[j]) == "" || trim(L[j]) ~ /^FM[A-Za-z0-9_]* - /) break
      out = out " " trim(L[j])
    }
    return first_sentence(out)
  }
  return ""
}

function sentence_end(s) {
  gsub(/e\.g\.|i\.e\./, "", s)
  return s ~ /\.$/ || s ~ /\. /
}

# The summary: the first sentence; a long one without its parenthetical remarks, then cut at its
# first ": " or "; " outside brackets; never an unclosed bracket (cut before it). Intervals such
# as (0, 1e6] or [start, end) count as closed.
function first_sentence(s,   t, p) {
  t = s; gsub(/e\.g\./, "e_g_", t); gsub(/i\.e\./, "i_e_", t)
  p = index(t, ". ")
  if (p > 0) s = substr(s, 1, p - 1)
  sub(/\.$/, "", s)
  if ((p = unclosed(s)) > 0) s = substr(s, 1, p - 1)
  if (length(s) > 90) s = strip_parens(s)
  if (length(s) > 90 && (p = outer_cut(s)) > 0) s = substr(s, 1, p - 1)
  return trim(s)
}

# s without its parenthetical remarks: the groups that open with " (" and close with ")" (a call
# or a formula such as sqrt(d) or d*(1-rho) stays, and so does an interval such as (0, 1e6]),
# each with the space before it
function strip_parens(s,   out, d, i, c, p0) {
  out = ""; d = 0
  for (i = 1; i <= length(s); i++) {
    c = substr(s, i, 1)
    if (d == 0 && c == "(" && i > 1 && substr(s, i - 1, 1) == " ") { p0 = length(out); d = 1; out = out c; continue }
    out = out c
    if (d > 0 && (c == "(" || c == "[")) d++
    else if (d > 0 && (c == ")" || c == "]") && --d == 0 && c == ")") out = substr(out, 1, p0 - 1)
  }
  if (d > 0) return s
  gsub(/ +,/, ",", out); gsub(/ +;/, ";", out); gsub(/ +:/, ":", out); gsub(/  +/, " ", out); gsub(/ +$/, "", out)
  return out
}

# the position of the first ": " or "; " outside brackets after the 20th character, 0 if none
function outer_cut(s,   d, i, c, two) {
  d = 0
  for (i = 1; i < length(s); i++) {
    c = substr(s, i, 1); two = substr(s, i, 2)
    if (c == "(" || c == "[") d++
    else if ((c == ")" || c == "]") && d > 0) d--
    else if (d == 0 && i > 20 && (two == ": " || two == "; ")) return i
  }
  return 0
}

# the position of the first "(" or "[" left open at the end of s (minus the space before it), 0 if none
function unclosed(s,   d, i, c, st, top) {
  top = 0
  for (i = 1; i <= length(s); i++) {
    c = substr(s, i, 1)
    if (c == "(" || c == "[") st[++top] = i
    else if ((c == ")" || c == "]") && top > 0) top--
  }
  if (top == 0) return 0
  i = st[1]
  while (i > 1 && substr(s, i - 1, 1) == " ") i--
  return i
}

function group_summary(g,   first, s, i) {
  first = gtext[g]; sub(/\n.*/, "", first)
  if (first ~ /^FM[A-Za-z0-9_]*/) {
    for (i = 1; i <= gn[g]; i++) { s = summary(fname[gmem[g, i]], gtext[g]); if (s != "") return s }
  }
  if (gtext[g] == "") return "undocumented"
  return first_sentence(first)
}

# a prototype folded after commas at about 76 columns, continuation lines under the "("
function fold(p,   out, ind, pad, rest, c, i) {
  if (length(p) <= 76) return esc(p)
  ind = index(p, "("); pad = sprintf("%" ind "s", "")
  out = ""; rest = p
  while (length(rest) > 76) {
    c = 0
    for (i = 76; i > ind; i--) if (substr(rest, i, 2) == ", ") { c = i; break }
    if (c == 0) break
    out = out esc(substr(rest, 1, c)) "\n"
    rest = pad substr(rest, c + 2)
  }
  return out esc(rest)
}

function see_also(list,   n, L, i, out) {
  n = split(list, L, " "); out = ""
  for (i = 1; i <= n; i++) out = out ".BR " L[i] " (3)" (i < n ? "," : "") "\n"
  return out
}

function page(g,   f, file, i, names, text, n, L, rv, seen) {
  f = gmem[g, 1]; file = dir "/" fname[f] ".3"
  names = ""
  for (i = 1; i <= gn[g]; i++) names = names (i > 1 ? ", " : "") fname[gmem[g, i]]
  printf(".TH %s 3 \"\" \"flashmask %s\" \"flashmask Library Functions\"\n", fname[f], version) > file
  printf(".SH NAME\n%s \\- %s\n", names, esc(group_summary(g))) > file
  printf(".SH SYNOPSIS\n.nf\n.B #include <flashmask.h>\n.PP\n") > file
  rv = 0
  for (i = 1; i <= gn[g]; i++) {
    printf("%s\n", fold(fproto[gmem[g, i]])) > file
    if (fproto[gmem[g, i]] ~ /^FMErrorCode /) rv = 1
  }
  printf(".fi\n.SH DESCRIPTION\n") > file
  if (gtext[g] == "") printf("This function has no comment in flashmask.h.\n") > file
  else {
    printf(".nf\n") > file
    n = split(gtext[g], L, "\n")
    for (i = 1; i <= n; i++) printf("%s\n", esc(L[i])) > file
    printf(".fi\n") > file
  }
  if (rv) printf(".SH RETURN VALUE\nFM_SUCCESS (0), or an FMErrorCode that\n.BR FMErrorString (3)\nnames; the message is in\n.BR FMGetLastErrorMessage (3).\n") > file
  printf(".SH SEE ALSO\n.BR flashmask (3)\n") > file
  close(file)
  print fname[f] ".3"
  for (i = 2; i <= gn[g]; i++) {
    file = dir "/" fname[gmem[g, i]] ".3"
    printf(".so man3/%s.3\n", fname[f]) > file
    close(file)
    print fname[gmem[g, i]] ".3"
  }
}

function overview(   file, s, i, n, L, d, g, sm) {
  file = dir "/flashmask.3"
  printf(".TH flashmask 3 \"\" \"flashmask %s\" \"flashmask Library Functions\"\n", version) > file
  printf(".SH NAME\nflashmask \\- masked attention and mask\\-aware context parallelism over MPI (overview)\n") > file
  printf(".SH SYNOPSIS\n.nf\n.B #include <flashmask.h>\n.PP\n") > file
  printf("mpicc $(pkg\\-config \\-\\-cflags flashmask) app.c $(pkg\\-config \\-\\-libs flashmask)\n") > file
  printf("mpifort $(pkg\\-config \\-\\-cflags flashmask\\-fortran) app.F90 $(pkg\\-config \\-\\-libs flashmask\\-fortran)\n.fi\n") > file
  printf(".SH DESCRIPTION\n.nf\n") > file
  n = split(top, L, "\n")
  for (i = 2; i <= n; i++) if (!(i == 2 && trim(L[i]) == "")) printf("%s\n", esc(L[i])) > file
  printf(".fi\n.PP\nEvery function has its own page, listed below by the sections of flashmask.h.\n") > file
  for (s = 1; s <= nsec; s++) {
    d = 0
    for (i = 1; i <= nf; i++) {
      if (fsec[i] != s) continue
      if (!d++) printf(".SS %s\n", esc(section[s])) > file
      g = fgroup[i]; sm = summary(fname[i], gtext[g]); if (sm == "") sm = group_summary(g)
      printf(".TP\n.BR %s (3)\n%s\n", fname[i], esc(sm)) > file
    }
  }
  if (nerr) {
    printf(".SH ERRORS\nEvery function returns an FMErrorCode:\n") > file
    for (i = 1; i <= nerr; i++) printf(".TP\n.B %s\n(%s) %s\n", ecode[i], evalue[i], esc(edesc[i])) > file
  }
  printf(".SH FILES\n.TP\n.I %s\n", esc(docdir)) > file
  n = split(docs, L, " ")
  printf("the guides:") > file
  for (i = 1; i <= n; i++) printf(" %s%s", esc(L[i]), i < n ? "," : ".") > file
  printf("\n.PP\nThe programs fmtrace and fmplan\\-sim print their options with \\-help, as does any program\n") > file
  printf("that calls FMInitialize.\n") > file
  close(file)
  print "flashmask.3"
}

BEGIN { top = ""; pending = ""; used = 0; gid = 0; ng = 0; nf = 0; nsec = 0; nerr = 0
        inc = 0; skipc = 0; macro = 0; stmt = ""; depth = 0; cbuf = ""; cnl = 0; banner = 0 }

inc {
  if (index($0, "*/")) { s = $0; sub(/\*\/.*/, "", s); if (!skipc) { add_comment(s); end_comment() }; inc = 0; skipc = 0 }
  else if (!skipc) add_comment($0)
  next
}
macro { if ($0 !~ /\\$/) macro = 0; next }
stmt == "" && /^[ \t]*\/\*/ {
  s = $0; sub(/^[ \t]*\/\*/, "", s)
  if (index(s, "*/")) { sub(/\*\/.*/, "", s); add_comment(s); end_comment() }
  else { inc = 1; if (trim(s) != "") add_comment(s) }
  next
}
/^[ \t]*$/ { if (stmt == "") { pending = ""; used = 0; gid = 0 }; next }
/^[ \t]*#/ {
  if ($0 ~ /^[ \t]*#[ \t]*define[ \t]+FM[A-Za-z0-9_]*\(/ && pending != "") {
    s = $0; sub(/^[ \t]*#[ \t]*define[ \t]+/, "", s); sub(/\).*/, ")", s)
    name = s; sub(/\(.*/, "", name)
    add_function(name, "#define " s)
  }
  if ($0 ~ /\\$/) macro = 1
  next
}
/^extern "C"/ || /^}[ \t]*$/ { next }
{
  s = $0
  if (match(s, /^[ \t]*FM_(SUCCESS|ERR_[A-Z0-9_]+)[ \t]*=[ \t]*[0-9]+/)) {
    e = substr(s, RSTART, RLENGTH); gsub(/[ \t]/, "", e)
    nerr++; ecode[nerr] = e; sub(/=.*/, "", ecode[nerr]); evalue[nerr] = e; sub(/.*=/, "", evalue[nerr])
    d = s; if (sub(/.*\/\*[ \t]*/, "", d)) { sub(/[ \t]*\*\/.*/, "", d); edesc[nerr] = d } else edesc[nerr] = ""
  }
  gsub(/\/\*([^*]|\*+[^*\/])*\*+\//, "", s)
  if (index(s, "/*")) { sub(/\/\*.*/, "", s); inc = 1; skipc = 1 }
  t = s; depth += gsub(/\{/, "{", t) - gsub(/\}/, "}", t)
  stmt = stmt " " s
  if (depth == 0 && index(s, ";")) { statement(stmt); stmt = "" }
}

END {
  for (g = 1; g <= ng; g++) page(g)
  overview()
}
