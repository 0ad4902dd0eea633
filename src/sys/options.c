/*
 * options.c - the options database: "-name value" pairs read from an options file,
 * the FM_OPTIONS environment variable and the command line (later sources override
 * earlier ones). Every lookup is listed by -help (on rank 0 of MPI_COMM_WORLD).
 */
#include <flashmask/private/fmimpl.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

typedef struct {
  char *name;   /* with the leading '-' */
  char *value;  /* NULL for a flag */
  int used;
} FMOption;

static FMOption *fm_opts;
static int fm_nopts, fm_capopts;
static char **fm_helped; /* names already printed by -help */
static int fm_nhelped, fm_caphelped;
static int fm_help = -1;

static int is_name(const char *s)
{
  /* "-x..." where x is not a digit or '.', so that negative numbers are values */
  return s && s[0] == '-' && s[1] && !isdigit((unsigned char)s[1]) && s[1] != '.';
}

static FMOption *find(const char *name)
{
  for (int i = fm_nopts - 1; i >= 0; i--)
    if (!strcmp(fm_opts[i].name, name)) return &fm_opts[i];
  return NULL;
}

FMErrorCode FMOptionsSetValue(const char *name, const char *value)
{
  FMOption *o;
  FMValidPointer(name, 1);
  FMCheck(is_name(name), MPI_COMM_SELF, FM_ERR_ARG_WRONG, "Argument 1 (name) is \"%s\"; an option name must start with '-' and a letter", name);
  o = find(name);
  if (!o) {
    if (fm_nopts == fm_capopts) {
      int cap = fm_capopts ? 2 * fm_capopts : 32;
      FMOption *n = (FMOption *)realloc(fm_opts, (size_t)cap * sizeof(*n));
      FMCheck(n, MPI_COMM_SELF, FM_ERR_MEM, "Out of memory growing the options database");
      fm_opts = n; fm_capopts = cap;
    }
    o = &fm_opts[fm_nopts];
    memset(o, 0, sizeof(*o));
    FMCall(FMStrdup(name, &o->name));
    fm_nopts++; /* only once the entry is complete */
  }
  free(o->value);
  o->value = NULL;
  if (value) FMCall(FMStrdup(value, &o->value));
  if (!strcmp(name, "-help")) fm_help = 1;
  return FM_SUCCESS;
}

/* Insert whitespace-separated tokens "-a 1 -b -c x". */
static FMErrorCode insert_tokens(int n, char **tok)
{
  for (int i = 0; i < n; i++) {
    if (!is_name(tok[i])) continue; /* stray value: ignored, as MPI launchers add their own */
    if (i + 1 < n && !is_name(tok[i + 1])) {
      FMCall(FMOptionsSetValue(tok[i], tok[i + 1]));
      i++;
    } else FMCall(FMOptionsSetValue(tok[i], NULL));
  }
  return FM_SUCCESS;
}

static int blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

/*
 * Insert the options of a string: tokens separated by whitespace. A token that starts with a
 * single or double quote runs to the matching quote, blanks and '#' included, and loses the two
 * quotes (-fm_trace "run 1.h5", -fm_mask_docs '100,200'); a quote inside a token is an ordinary
 * character (/data/it's). '#' at the start of a token ends the string; in a line of an options
 * file (file_line) any '#' outside quotes does (-x 5#note is -x 5). An unmatched opening quote is
 * FM_ERR_OPT.
 */
static FMErrorCode insert_string(const char *s, int file_line)
{
  char *buf, *w, **tok = NULL;
  const char *r;
  int n = 0, cap = 0, end = 0;
  FMErrorCode ierr;
  if (!s) return FM_SUCCESS;
  FMCall(FMStrdup(s, &buf));
  w = buf;
  r = s;
  while (!end) {
    while (blank(*r)) r++;
    if (!*r || *r == '#') break;
    if (n == cap) {
      char **nt;
      cap = cap ? 2 * cap : 16;
      nt = (char **)realloc(tok, (size_t)cap * sizeof(*nt));
      if (!nt) { free(tok); free(buf); FMRaise(MPI_COMM_SELF, FM_ERR_MEM, "Out of memory parsing options"); }
      tok = nt;
    }
    tok[n++] = w;
    if (*r == '\'' || *r == '"') {
      const char q = *r, *start = r++;
      while (*r && *r != q) *w++ = *r++;
      if (!*r) {
        int len = 0;
        while (start[len] && start[len] != '\n' && start[len] != '\r') len++;
        free(tok);
        free(buf);
        FMRaise(MPI_COMM_SELF, FM_ERR_OPT, "Options: the value %.*s has no closing %c quote", len, start, q);
      }
      r++; /* the closing quote */
    }
    for (; *r && !blank(*r); r++) {
      if (file_line && *r == '#') { /* a comment to the end of the line */
        end = 1;
        break;
      }
      *w++ = *r;
    }
    *w++ = 0;
  }
  ierr = insert_tokens(n, tok);
  free(tok);
  free(buf);
  FMCall(ierr);
  return FM_SUCCESS;
}

/* Whether byte c may appear in an options file: printable, whitespace, or UTF-8 (>= 0x80). */
static int text_byte(unsigned char c) { return c >= 0x20 ? c != 0x7f : (c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'); }

/*
 * An options file: lines of any length, '#' starts a comment to the end of the line. What is
 * not a text file (a directory, a device, a file holding NUL or other control bytes) is
 * refused with FM_ERR_FILE naming the path, before any of its options is inserted.
 */
static FMErrorCode insert_file(const char *file)
{
  FILE *fp;
  struct stat st;
  char *line = NULL;
  size_t cap = 0, lineno = 0;
  ssize_t len;
  long off = 0;
  FMErrorCode ierr = FM_SUCCESS;
  FMCheck(stat(file, &st) == 0, MPI_COMM_SELF, FM_ERR_FILE, "Cannot open options file \"%s\": %s", file, strerror(errno));
  FMCheck(S_ISREG(st.st_mode) || S_ISFIFO(st.st_mode), MPI_COMM_SELF, FM_ERR_FILE,
          "Options file \"%s\" is %s; expected a text file of options", file, S_ISDIR(st.st_mode) ? "a directory" : "not a regular file");
  fp = fopen(file, "r");
  FMCheck(fp, MPI_COMM_SELF, FM_ERR_FILE, "Cannot open options file \"%s\": %s", file, strerror(errno));
  /* First pass: a text file? (a FIFO cannot be read twice: it is checked line by line below) */
  while (S_ISREG(st.st_mode) && (len = getline(&line, &cap, fp)) >= 0) {
    lineno++;
    for (ssize_t k = 0; k < len; k++)
      FMCheckGoto(text_byte((unsigned char)line[k]), MPI_COMM_SELF, FM_ERR_FILE,
                  "Options file \"%s\" is not a text file (byte 0x%02x at offset %ld, line %zu); expected a text file of options", file,
                  (unsigned char)line[k], off + (long)k, lineno);
    off += (long)len;
  }
  FMCheckGoto(!ferror(fp), MPI_COMM_SELF, FM_ERR_FILE, "Cannot read options file \"%s\": %s", file, strerror(errno));
  if (S_ISREG(st.st_mode)) rewind(fp);
  lineno = 0;
  while ((len = getline(&line, &cap, fp)) >= 0) {
    lineno++;
    for (ssize_t k = 0; k < len; k++)
      FMCheckGoto(text_byte((unsigned char)line[k]), MPI_COMM_SELF, FM_ERR_FILE,
                  "Options file \"%s\" is not a text file (byte 0x%02x on line %zu); expected a text file of options", file,
                  (unsigned char)line[k], lineno);
    FMCallGoto(insert_string(line, 1));
  }
  FMCheckGoto(!ferror(fp), MPI_COMM_SELF, FM_ERR_FILE, "Cannot read options file \"%s\": %s", file, strerror(errno));
cleanup:
  free(line);
  fclose(fp);
  return ierr;
}

FMErrorCode FMOptionsInitialize_Private(int argc, char **argv, const char *file)
{
  char extra[PATH_MAX];
  FMBool set = FM_FALSE;
  if (file) FMCall(insert_file(file));
  FMCall(insert_string(getenv("FM_OPTIONS"), 0));
  if (argc > 1 && argv) FMCall(insert_tokens(argc - 1, argv + 1));
  if (fm_help < 0) fm_help = find("-help") != NULL;
  /* -options_file F (command line or FM_OPTIONS): F's options, under those of the command line.
     Read quietly here: FMInitialize lists it under its banner (FM_OPTIONS_FILE_HELP) */
  extra[0] = 0;
  {
    const int h = fm_help;
    FMErrorCode e;
    fm_help = 0;
    e = FMOptionsGetString("-options_file", FM_OPTIONS_FILE_HELP, extra, sizeof(extra), &set);
    fm_help = h;
    FMCall(e);
  }
  if (set && extra[0]) {
    FMCall(insert_file(extra));
    FMCall(insert_string(getenv("FM_OPTIONS"), 0));
    if (argc > 1 && argv) FMCall(insert_tokens(argc - 1, argv + 1));
  }
  return FM_SUCCESS;
}

/*
 * Options set but never read, listed on world rank 0 at FMFinalize: by default those of the
 * library's namespace (a name holding "fm_": -fm_mask_type, -a_fm_mask_type), since a program
 * may parse its own arguments; with -options_left (true) every one, and a line saying so when
 * there are none; with -options_left 0 (false) none.
 */
static void report_unused(void)
{
  FMOption *left = find("-options_left");
  int rank = 0, init = 0, fin = 0, verbose = 0, nunused = 0;
  if (left) {
    const char *v = left->value;
    left->used = 1;
    if (v && (!strcasecmp(v, "0") || !strcasecmp(v, "false") || !strcasecmp(v, "no") || !strcasecmp(v, "off"))) return;
    verbose = 1;
  }
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (init && !fin) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) return;
  for (int i = 0; i < fm_nopts; i++)
    if (!fm_opts[i].used && (verbose || strstr(fm_opts[i].name, "fm_"))) {
      printf("WARNING! option %s%s%s was set but never used (-options_left 0 hides this)\n", fm_opts[i].name, fm_opts[i].value ? " " : "",
             fm_opts[i].value ? fm_opts[i].value : "");
      nunused++;
    }
  if (!nunused && verbose) printf("There are no unused options.\n");
  fflush(stdout);
}

FMErrorCode FMOptionsFinalize_Private(void)
{
  report_unused();
  for (int i = 0; i < fm_nopts; i++) { free(fm_opts[i].name); free(fm_opts[i].value); }
  free(fm_opts); fm_opts = NULL; fm_nopts = fm_capopts = 0;
  for (int i = 0; i < fm_nhelped; i++) free(fm_helped[i]);
  free(fm_helped); fm_helped = NULL; fm_nhelped = fm_caphelped = 0;
  fm_help = -1;
  return FM_SUCCESS;
}

/* Print one -help line per option name, on world rank 0. */
static const char *prefixed(const char *name, char *buf, size_t len);
static void help_line(const char *name0, const char *help, const char *current)
{
  int rank = 0, init = 0;
  char buf[320];
  const char *name;
  if (fm_help != 1) return;
  name = prefixed(name0, buf, sizeof(buf));
  for (int i = 0; i < fm_nhelped; i++)
    if (!strcmp(fm_helped[i], name)) return;
  if (fm_nhelped == fm_caphelped) {
    int cap = fm_caphelped ? 2 * fm_caphelped : 32;
    char **n = (char **)realloc(fm_helped, (size_t)cap * sizeof(*n));
    if (!n) return;
    fm_helped = n; fm_caphelped = cap;
  }
  if (FMStrdup(name, &fm_helped[fm_nhelped])) return;
  fm_nhelped++;
  MPI_Initialized(&init);
  if (init) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) printf("  %s <%s>: %s\n", name, current ? current : "", help ? help : "");
}

/* The prefix stack (FMOptionsPushPrefix_Private); "" entries push no prefix. */
#define FM_PREFIX_DEPTH 8
static char fm_prefix[FM_PREFIX_DEPTH][FM_OPTIONS_PREFIX_MAX + 1];
static int fm_nprefix;

FMErrorCode FMOptionsPushPrefix_Private(const char *prefix)
{
  FMCheck(fm_nprefix < FM_PREFIX_DEPTH, MPI_COMM_SELF, FM_ERR_LIB, "Options prefixes nested deeper than %d", FM_PREFIX_DEPTH);
  FMCheck(!prefix || strlen(prefix) < sizeof(fm_prefix[0]), MPI_COMM_SELF, FM_ERR_ARG_WRONG,
          "Options prefix \"%s\" is longer than %zu characters", prefix, sizeof(fm_prefix[0]) - 1);
  strcpy(fm_prefix[fm_nprefix++], prefix ? prefix : "");
  return FM_SUCCESS;
}

FMErrorCode FMOptionsPopPrefix_Private(void)
{
  FMCheck(fm_nprefix > 0, MPI_COMM_SELF, FM_ERR_LIB, "Options prefix popped without a push");
  fm_nprefix--;
  return FM_SUCCESS;
}

/* The name a lookup of `name` reads under the current prefix ("-" prefix name+1); buf holds it. */
static const char *prefixed(const char *name, char *buf, size_t len)
{
  const char *pre = fm_nprefix ? fm_prefix[fm_nprefix - 1] : "";
  if (!pre[0] || name[0] != '-') return name;
  snprintf(buf, len, "-%s%s", pre, name + 1);
  return buf;
}

static FMOption *lookup(const char *name)
{
  char buf[320];
  FMOption *o = find(prefixed(name, buf, sizeof(buf)));
  if (o) o->used = 1;
  return o;
}

FMErrorCode FMOptionsHasName(const char *name, FMBool *set)
{
  FMValidPointer(name, 1);
  FMValidPointer(set, 2);
  *set = lookup(name) ? FM_TRUE : FM_FALSE;
  return FM_SUCCESS;
}

static FMErrorCode parse_int(const char *name, const char *s, int *v)
{
  char *end;
  long x;
  FMCheck(s && *s, MPI_COMM_SELF, FM_ERR_OPT, "Option %s needs an integer value", name);
  errno = 0;
  x = strtol(s, &end, 0);
  /* accept k/K and m/M suffixes (1024, 1048576) for sequence lengths */
  FMCheck(errno == 0 && x >= INT_MIN && x <= INT_MAX, MPI_COMM_SELF, FM_ERR_OPT,
          "Option %s has value \"%s\"; expected an integer that fits in an int", name, s);
  if (*end == 'k' || *end == 'K') { x *= 1024; end++; }
  else if (*end == 'm' || *end == 'M') { x *= 1048576; end++; }
  FMCheck(!*end && x >= INT_MIN && x <= INT_MAX, MPI_COMM_SELF, FM_ERR_OPT,
          "Option %s has value \"%s\"; expected an integer that fits in an int", name, s);
  *v = (int)x;
  return FM_SUCCESS;
}

FMErrorCode FMOptionsGetInt(const char *name, const char *help, int *value, FMBool *set)
{
  FMOption *o;
  char cur[32];
  FMValidPointer(name, 1);
  FMValidPointer(value, 3);
  o = lookup(name);
  if (set) *set = FM_FALSE;
  if (o) {
    FMCall(parse_int(name, o->value, value));
    if (set) *set = FM_TRUE;
  }
  snprintf(cur, sizeof(cur), "%d", *value);
  help_line(name, help, cur);
  return FM_SUCCESS;
}

FMErrorCode FMOptionsGetReal(const char *name, const char *help, double *value, FMBool *set)
{
  FMOption *o;
  char cur[32];
  FMValidPointer(name, 1);
  FMValidPointer(value, 3);
  o = lookup(name);
  if (set) *set = FM_FALSE;
  if (o) {
    char *end;
    FMCheck(o->value && *o->value, MPI_COMM_SELF, FM_ERR_OPT, "Option %s needs a real value", name);
    double x = strtod(o->value, &end);
    FMCheck(!*end, MPI_COMM_SELF, FM_ERR_OPT, "Option %s has value \"%s\"; expected a real number", name, o->value);
    *value = x;
    if (set) *set = FM_TRUE;
  }
  snprintf(cur, sizeof(cur), "%g", *value);
  help_line(name, help, cur);
  return FM_SUCCESS;
}

FMErrorCode FMOptionsGetBool(const char *name, const char *help, FMBool *value, FMBool *set)
{
  FMOption *o;
  FMValidPointer(name, 1);
  FMValidPointer(value, 3);
  o = lookup(name);
  if (set) *set = FM_FALSE;
  if (o) {
    const char *s = o->value;
    if (!s || !strcasecmp(s, "1") || !strcasecmp(s, "true") || !strcasecmp(s, "yes") || !strcasecmp(s, "on")) *value = FM_TRUE;
    else if (!strcasecmp(s, "0") || !strcasecmp(s, "false") || !strcasecmp(s, "no") || !strcasecmp(s, "off")) *value = FM_FALSE;
    else FMRaise(MPI_COMM_SELF, FM_ERR_OPT, "Option %s has value \"%s\"; expected true/false/1/0/yes/no", name, s);
    if (set) *set = FM_TRUE;
  }
  help_line(name, help, *value ? "true" : "false");
  return FM_SUCCESS;
}

FMErrorCode FMOptionsGetString(const char *name, const char *help, char *value, size_t len, FMBool *set)
{
  FMOption *o;
  FMValidPointer(name, 1);
  FMValidPointer(value, 3);
  FMCheck(len > 0, MPI_COMM_SELF, FM_ERR_ARG_SIZ, "Argument 4 (len) is 0; expected the size of the value buffer");
  o = lookup(name);
  if (set) *set = FM_FALSE;
  if (o) {
    FMCheck(o->value, MPI_COMM_SELF, FM_ERR_OPT, "Option %s needs a value", name);
    FMCheck(strlen(o->value) < len, MPI_COMM_SELF, FM_ERR_OPT, "Option %s value \"%s\" is longer than %zu characters", name,
            o->value, len - 1);
    strcpy(value, o->value);
    if (set) *set = FM_TRUE;
  }
  help_line(name, help, value);
  return FM_SUCCESS;
}

FMErrorCode FMOptionsGetIntArray(const char *name, const char *help, int *value, int *n, FMBool *set)
{
  FMOption *o;
  FMValidPointer(name, 1);
  FMValidPointer(value, 3);
  FMValidPointer(n, 4);
  o = lookup(name);
  if (set) *set = FM_FALSE;
  if (o) {
    char *buf, *save = NULL;
    int cnt = 0;
    FMCheck(o->value, MPI_COMM_SELF, FM_ERR_OPT, "Option %s needs a comma-separated list of integers", name);
    FMCall(FMStrdup(o->value, &buf));
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
      if (cnt >= *n) {
        free(buf);
        FMRaise(MPI_COMM_SELF, FM_ERR_OPT, "Option %s has more than %d values", name, *n);
      }
      FMErrorCode ierr = parse_int(name, t, &value[cnt]);
      if (ierr) { free(buf); FMCall(ierr); }
      cnt++;
    }
    free(buf);
    *n = cnt;
    if (set) *set = FM_TRUE;
  }
  help_line(name, help, o && o->value ? o->value : "");
  return FM_SUCCESS;
}

FMErrorCode FMOptionsGetEnum_Private(const char *name, const char *help, const char *const *list, int *value, FMBool *set)
{
  FMOption *o;
  char all[512] = "";
  FMValidPointer(name, 1);
  FMValidPointer(list, 3);
  FMValidPointer(value, 4);
  for (int i = 0; list[i]; i++) {
    if (i) strncat(all, "|", sizeof(all) - strlen(all) - 1);
    strncat(all, list[i], sizeof(all) - strlen(all) - 1);
  }
  o = lookup(name);
  if (set) *set = FM_FALSE;
  if (o) {
    int found = -1;
    FMCheck(o->value, MPI_COMM_SELF, FM_ERR_OPT, "Option %s needs a value, one of %s", name, all);
    for (int i = 0; list[i]; i++)
      if (!strcasecmp(list[i], o->value)) found = i;
    FMCheck(found >= 0, MPI_COMM_SELF, FM_ERR_OPT, "Option %s has value \"%s\"; expected one of %s", name, o->value, all);
    *value = found;
    if (set) *set = FM_TRUE;
  }
  {
    char line[640];
    snprintf(line, sizeof(line), "%s (one of %s)", help ? help : "", all);
    int nlist = 0;
    while (list[nlist]) nlist++;
    help_line(name, line, (*value >= 0 && *value < nlist) ? list[*value] : "");
  }
  return FM_SUCCESS;
}

FMErrorCode FMOptionsGetView_Private(const char *name, const char *help, FMBool *set)
{
  FMBool v = FM_FALSE;
  FMCall(FMOptionsGetBool(name, help, &v, NULL));
  FMValidPointer(set, 3);
  *set = v;
  return FM_SUCCESS;
}
