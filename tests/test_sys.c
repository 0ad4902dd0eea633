/*
 * test_sys - the options database (argv, FM_OPTIONS, options file), options prefixes, error
 * codes, handlers and messages, the public FMCall, FMMaskTypeList, and the event log.
 */
#include "fmtest.h"
#include <unistd.h>

static int fmcall_reached; /* how far through_fmcall got */

/* An application function in the PETSc style: FMCall returns the first error with a traceback. */
static FMErrorCode through_fmcall(FMMask mask, int bad)
{
  fmcall_reached = 1;
  FMCall(FMMaskSetSizes(mask, 64, 64, 1));
  fmcall_reached = 2;
  FMCall(FMMaskSetWindow(mask, bad ? -5 : 3, 3));
  fmcall_reached = 3;
  return FM_SUCCESS;
}

/* FMCall, FMMaskTypeList and options prefixes (the masks live on ctx). */
static void public_helpers(FMContext ctx)
{
  static const char *const expected[] = {FMMASKFULL, FMMASKCAUSAL, FMMASKSLIDINGWINDOW, FMMASKCAUSALDOCUMENT, FMMASKDOCUMENT,
                                         FMMASKSHAREQUESTION, FMMASKGLOBALSLIDINGWINDOW, FMMASKCAUSALBLOCKWISE, FMMASKPREFIXLMDOCUMENT,
                                         FMMASKPREFIXLMCAUSAL, FMMASKQKSPARSE, FMMASKRANDOMEVICTION, FMMASKBOUNDS};
  const char *const *names = NULL;
  const char *pre;
  FMMaskType type;
  FMMask a, b;
  int n = -1, qa = 0, qb = 0;

  /* FMCall: stops at the first error and returns its code; runs through on success */
  FMT_CALL(FMMaskCreate(ctx, &a));
  FMT_CHECK(through_fmcall(a, 1) == FM_ERR_ARG_OUTOFRANGE && fmcall_reached == 2, "FMCall: returned at step %d, expected 2", fmcall_reached);
  FMT_CHECK(fmt_msg_has("left"), "FMCall kept the callee's message: %s", FMGetLastErrorMessage());
  FMT_CHECK(through_fmcall(a, 0) == FM_SUCCESS && fmcall_reached == 3, "FMCall: stopped at step %d without an error", fmcall_reached);
  FMT_CHECK(FMErrorTraceback(__FILE__, __func__, __LINE__, FM_ERR_FILE) == FM_ERR_FILE, "FMErrorTraceback must return its code");
  FMT_CALL(FMMaskDestroy(&a));

  /* FMMaskTypeList: the 12 builders, then "bounds", NULL-terminated; each one is accepted */
  FMT_CALL(FMMaskTypeList(&n, &names));
  FMT_CHECK(n == 13 && names && names[n] == NULL, "FMMaskTypeList: n = %d, expected 13 and a NULL after the last", n);
  for (int t = 0; names && t < n && t < 13; t++) FMT_CHECK(!strcmp(names[t], expected[t]), "FMMaskTypeList[%d] = %s, expected %s", t, names[t], expected[t]);
  FMT_EXPECT_ERR(FMMaskTypeList(NULL, &names), FM_ERR_ARG_NULL, "argument 1");
  FMT_CALL(FMMaskCreate(ctx, &a));
  for (int t = 0; names && t < n; t++) {
    FMT_CALL(FMMaskSetType(a, names[t]));
    FMT_CALL(FMMaskGetType(a, &type));
    FMT_CHECK(!strcmp(type, names[t]), "FMMaskSetType(%s) gave type %s", names[t], type);
  }
  FMT_CALL(FMMaskDestroy(&a));

  /* Options prefixes: two masks read different -fm_mask_* options; no prefix reads the plain ones */
  FMT_CALL(FMOptionsSetValue("-fm_mask_seqlen", "96"));
  FMT_CALL(FMOptionsSetValue("-pa_fm_mask_seqlen", "200"));
  FMT_CALL(FMOptionsSetValue("-pa_fm_mask_type", FMMASKCAUSAL));
  FMT_CALL(FMOptionsSetValue("-pb_fm_mask_seqlen_q", "50"));
  FMT_CALL(FMOptionsSetValue("-pb_fm_mask_seqlen_k", "70"));
  FMT_CALL(FMMaskCreate(ctx, &a));
  FMT_CALL(FMMaskCreate(ctx, &b));
  FMT_CALL(FMMaskSetOptionsPrefix(a, "pa_"));
  FMT_CALL(FMMaskSetOptionsPrefix(b, "pb_"));
  FMT_CALL(FMMaskGetOptionsPrefix(a, &pre));
  FMT_CHECK(pre && !strcmp(pre, "pa_"), "FMMaskGetOptionsPrefix gave \"%s\"", pre ? pre : "(null)");
  FMT_CALL(FMMaskSetFromOptions(a));
  FMT_CALL(FMMaskSetFromOptions(b));
  FMT_CALL(FMMaskGetSizes(a, &qa, NULL, NULL));
  FMT_CALL(FMMaskGetType(a, &type));
  FMT_CHECK(qa == 200 && !strcmp(type, FMMASKCAUSAL), "mask with prefix pa_: seqlen_q %d type %s, expected 200 causal", qa, type);
  FMT_CALL(FMMaskGetSizes(b, &qb, &n, NULL));
  FMT_CALL(FMMaskGetType(b, &type));
  FMT_CHECK(qb == 50 && n == 70 && !strcmp(type, FMMASKFULL), "mask with prefix pb_: %d x %d type %s, expected 50 x 70 full", qb, n, type);
  FMT_CALL(FMMaskSetOptionsPrefix(b, NULL));
  FMT_CALL(FMMaskGetOptionsPrefix(b, &pre));
  FMT_CHECK(pre == NULL, "a cleared prefix reads back as \"%s\"", pre);
  FMT_CALL(FMMaskSetFromOptions(b));
  FMT_CALL(FMMaskGetSizes(b, &qb, NULL, NULL));
  FMT_CHECK(qb == 96, "without a prefix the mask reads -fm_mask_seqlen: seqlen_q %d, expected 96", qb);
  /* bad prefixes are refused and the old one kept */
  FMT_EXPECT_ERR(FMMaskSetOptionsPrefix(a, "-pa_"), FM_ERR_ARG_WRONG, "must not start with '-'");
  FMT_EXPECT_ERR(FMMaskSetOptionsPrefix(a, "p a_"), FM_ERR_ARG_WRONG, "blanks");
  FMT_EXPECT_ERR(FMMaskSetOptionsPrefix(a, "a_very_long_prefix_that_goes_on_and_on_past_the_sixty_three_characters_"), FM_ERR_ARG_WRONG,
                 "at most 63");
  FMT_EXPECT_ERR(FMMaskSetOptionsPrefix(NULL, "x_"), FM_ERR_ARG_NULL, "argument 1");
  FMT_CALL(FMMaskGetOptionsPrefix(a, &pre));
  FMT_CHECK(pre && !strcmp(pre, "pa_"), "a refused prefix replaced the old one: \"%s\"", pre ? pre : "(null)");
  FMT_CALL(FMMaskDestroy(&a));
  FMT_CALL(FMMaskDestroy(&b));
}

/*
 * Options files after the main FMInitialize/FMFinalize cycle (MPI stays initialized): a line
 * far longer than any buffer is read whole, a directory and a binary file are refused with
 * FM_ERR_FILE naming the path.
 */
static void options_files(void)
{
  char path[] = "/tmp/fm_test_sys_XXXXXX", dir[] = "/tmp/fm_test_sys_dir_XXXXXX", val[64];
  const size_t pad = 20000; /* blanks before the value: the line is longer than 4096 */
  int fd = mkstemp(path), iv = 0;
  FMBool set = FM_FALSE;
  FILE *fp;
  FMErrorCode e;
  unsetenv("FM_OPTIONS"); /* read by every FMInitialize: the main cycle's are not these cycles' */
  if (fd < 0 || !mkdtemp(dir)) {
    FMT_CHECK(0, "cannot make temporary files");
    return;
  }
  fp = fdopen(fd, "w");
  fprintf(fp, "-fm_t_long");
  for (size_t i = 0; i < pad; i++) fputc(' ', fp);
  fprintf(fp, "12345 -fm_t_after 6\n");
  fclose(fp);
  FMT_CALL(FMInitialize(NULL, NULL, path, NULL));
  FMT_CALL(FMOptionsGetInt("-fm_t_long", "a long line", &iv, &set));
  FMT_CHECK(set && iv == 12345, "-fm_t_long after %zu blanks: set %d value %d, expected 12345", pad, (int)set, iv);
  iv = 0;
  FMT_CALL(FMOptionsGetInt("-fm_t_after", "after a long line", &iv, &set));
  FMT_CHECK(set && iv == 6, "-fm_t_after on the long line: set %d value %d, expected 6", (int)set, iv);
  FMT_CALL(FMFinalize());

  FMT_CALL(FMPushErrorHandler(FM_ERROR_HANDLER_SILENT));
  e = FMInitialize(NULL, NULL, dir, NULL);
  FMT_CHECK(e == FM_ERR_FILE, "a directory as options file: FMInitialize returned %s, expected FM_ERR_FILE", FMErrorString(e));
  FMT_CHECK(fmt_msg_has(dir) && fmt_msg_has("directory"), "a directory as options file: message \"%s\" names neither the path nor a directory",
            FMGetLastErrorMessage());
  if (!e) FMFinalize();
  fp = fopen(path, "wb");
  fwrite("-fm_t_bin 1\n\x7f" "ELF\x02\x01\x00\x00-fm_t_x 2\n", 1, 22, fp);
  fclose(fp);
  e = FMInitialize(NULL, NULL, path, NULL);
  FMT_CHECK(e == FM_ERR_FILE, "a binary options file: FMInitialize returned %s, expected FM_ERR_FILE", FMErrorString(e));
  FMT_CHECK(fmt_msg_has(path) && fmt_msg_has("not a text file"), "a binary options file: message \"%s\" does not name the path as not text",
            FMGetLastErrorMessage());
  if (!e) FMFinalize();
  /* Nothing of the refused file reached the database. */
  FMT_CALL(FMInitialize(NULL, NULL, NULL, NULL));
  snprintf(val, sizeof(val), "none");
  FMT_CALL(FMOptionsGetString("-fm_t_bin", "from a refused file", val, sizeof(val), &set));
  FMT_CHECK(!set, "-fm_t_bin of a refused options file is set (\"%s\")", val);
  FMT_CALL(FMFinalize());
  unlink(path);
  rmdir(dir);
}

int main(int argc, char **argv)
{
  char path[] = "/tmp/fm_test_sys_XXXXXX";
  int fd = mkstemp(path);
  FILE *fp;
  int iv = 3, arr[8], n = 8;
  double rv = 0.5;
  FMBool bv = FM_FALSE, set = FM_FALSE, flag;
  char sv[32] = "default";

  if (fd < 0) return 99;
  MPI_Init(&argc, &argv); /* ours: FMFinalize leaves it, options_files initializes again */
  fp = fdopen(fd, "w");
  fprintf(fp, "# an options file\n-fm_test_file 11   # trailing comment\n-fm_test_override 1\n"
              "-fm_test_quoted \"a b  c\" -fm_test_squoted 'x \"y\"' -fm_test_after 4\n"
              "-fm_test_hash \"run #1\" -fm_test_apos it's # a comment\n");
  fclose(fp);
  FMT_CALL(FMInitialize(&argc, &argv, path, "test_sys: options and errors"));
  unlink(path);
  FMT_CALL(FMPushErrorHandler(FM_ERROR_HANDLER_SILENT));

  /* Sources: file < FM_OPTIONS < argv (the .sh passes -fm_test_override 3 and FM_OPTIONS sets 2). */
  FMT_CALL(FMOptionsGetInt("-fm_test_file", "from the options file", &iv, &set));
  FMT_CHECK(set && iv == 11, "-fm_test_file: set %d value %d, expected 11", (int)set, iv);
  iv = 0;
  FMT_CALL(FMOptionsGetInt("-fm_test_override", "argv beats FM_OPTIONS beats the file", &iv, &set));
  FMT_CHECK(set && iv == 3, "-fm_test_override is %d, expected 3 (argv)", iv);
  iv = 0;
  FMT_CALL(FMOptionsGetInt("-fm_test_env", "from FM_OPTIONS", &iv, &set));
  FMT_CHECK(set && iv == 7, "-fm_test_env is %d, expected 7", iv);

  /* Quotes keep blanks in a value and are removed; the other kind inside is kept. */
  {
    char qv[32] = "";
    FMT_CALL(FMOptionsGetString("-fm_test_quoted", "a double-quoted value", qv, sizeof(qv), &set));
    FMT_CHECK(set && !strcmp(qv, "a b  c"), "-fm_test_quoted is \"%s\", expected \"a b  c\"", qv);
    FMT_CALL(FMOptionsGetString("-fm_test_squoted", "a single-quoted value", qv, sizeof(qv), &set));
    FMT_CHECK(set && !strcmp(qv, "x \"y\""), "-fm_test_squoted is \"%s\", expected \"x \\\"y\\\"\"", qv);
    iv = 0;
    FMT_CALL(FMOptionsGetInt("-fm_test_after", "an option after quoted ones", &iv, &set));
    FMT_CHECK(set && iv == 4, "-fm_test_after is %d, expected 4", iv);
    /* a '#' inside quotes is no comment; a quote inside a token is an ordinary character */
    FMT_CALL(FMOptionsGetString("-fm_test_hash", "a quoted value holding #", qv, sizeof(qv), &set));
    FMT_CHECK(set && !strcmp(qv, "run #1"), "-fm_test_hash is \"%s\", expected \"run #1\"", qv);
    FMT_CALL(FMOptionsGetString("-fm_test_apos", "a value holding an apostrophe", qv, sizeof(qv), &set));
    FMT_CHECK(set && !strcmp(qv, "it's"), "-fm_test_apos is \"%s\", expected \"it's\"", qv);
  }

  /* Types. */
  FMT_CALL(FMOptionsSetValue("-fm_t_real", "-2.5e-1"));
  FMT_CALL(FMOptionsGetReal("-fm_t_real", "a real", &rv, &set));
  FMT_CHECK(set && rv == -0.25, "real option %g", rv);
  FMT_CALL(FMOptionsSetValue("-fm_t_flag", NULL));
  FMT_CALL(FMOptionsGetBool("-fm_t_flag", "a flag", &bv, &set));
  FMT_CHECK(set && bv, "flag without value must be true");
  FMT_CALL(FMOptionsSetValue("-fm_t_bool", "no"));
  bv = FM_TRUE;
  FMT_CALL(FMOptionsGetBool("-fm_t_bool", "a bool", &bv, NULL));
  FMT_CHECK(!bv, "bool 'no' must be false");
  FMT_CALL(FMOptionsSetValue("-fm_t_str", "hello"));
  FMT_CALL(FMOptionsGetString("-fm_t_str", "a string", sv, sizeof(sv), &set));
  FMT_CHECK(set && !strcmp(sv, "hello"), "string option '%s'", sv);
  FMT_CALL(FMOptionsSetValue("-fm_t_arr", "2538,1742,3213,4k"));
  FMT_CALL(FMOptionsGetIntArray("-fm_t_arr", "an array", arr, &n, &set));
  FMT_CHECK(set && n == 4 && arr[0] == 2538 && arr[1] == 1742 && arr[2] == 3213 && arr[3] == 4096, "int array n=%d", n);
  iv = 42;
  FMT_CALL(FMOptionsGetInt("-fm_t_absent", "absent", &iv, &set));
  FMT_CHECK(!set && iv == 42, "absent option must keep its default");

  /* Bad values name the option and the value. */
  FMT_CALL(FMOptionsSetValue("-fm_t_badint", "12x"));
  FMT_EXPECT_ERR(FMOptionsGetInt("-fm_t_badint", "bad", &iv, NULL), FM_ERR_OPT, "-fm_t_badint");
  FMT_CALL(FMOptionsSetValue("-fm_t_badbool", "maybe"));
  FMT_EXPECT_ERR(FMOptionsGetBool("-fm_t_badbool", "bad", &bv, NULL), FM_ERR_OPT, "maybe");
  n = 2;
  FMT_EXPECT_ERR(FMOptionsGetIntArray("-fm_t_arr", "too many", arr, &n, NULL), FM_ERR_OPT, "more than 2");
  FMT_EXPECT_ERR(FMOptionsSetValue("nodash", "1"), FM_ERR_ARG_WRONG, "nodash");
  FMT_EXPECT_ERR(FMOptionsGetInt(NULL, "x", &iv, NULL), FM_ERR_ARG_NULL, "argument 1");
  FMT_EXPECT_ERR(FMOptionsGetString("-fm_t_str", "x", sv, 3, NULL), FM_ERR_OPT, "longer than");

  /* Error strings and handlers. */
  FMErrorCode codes[] = {FM_ERR_MEM, FM_ERR_SUP, FM_ERR_ORDER, FM_ERR_LIB, FM_ERR_ARG_NULL, FM_ERR_ARG_WRONG,
                         FM_ERR_ARG_OUTOFRANGE, FM_ERR_ARG_SIZ, FM_ERR_ARG_INCOMP, FM_ERR_FILE, FM_ERR_MPI, FM_ERR_CUDA,
                         FM_ERR_NCCL, FM_ERR_HDF5, FM_ERR_HWLOC, FM_ERR_OPT, FM_ERR_COLLECTIVE, FM_ERR_MISMATCH};
  for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
    FMT_CHECK(strncmp(FMErrorString(codes[i]), "FM_ERR_", 7) == 0, "FMErrorString(%d) = %s", (int)codes[i], FMErrorString(codes[i]));
  FMT_CHECK(strstr(FMErrorString((FMErrorCode)12345), "unknown") != NULL, "unknown code string");
  FMT_EXPECT_ERR(FMPushErrorHandler((FMErrorHandler)9), FM_ERR_ARG_OUTOFRANGE, "handler");
  { /* handlers nest: a pop without a push is FM_ERR_ORDER, and at most 32 are pushed at once */
    FMErrorCode e = FM_SUCCESS;
    int n = 0;
    while (n < 40 && (e = FMPopErrorHandler()) == FM_SUCCESS) n++; /* empty the stack this test left */
    FMT_CHECK(n <= 32 && e == FM_ERR_ORDER && fmt_msg_has("without a matching"), "FMPopErrorHandler on an empty stack: %s after %d pops (%s)",
              FMErrorString(e), n, FMGetLastErrorMessage());
    for (int i = 0; i < 32; i++) FMT_CALL(FMPushErrorHandler(FM_ERROR_HANDLER_SILENT));
    e = FMPushErrorHandler(FM_ERROR_HANDLER_SILENT);
    FMT_CHECK(e == FM_ERR_ORDER && fmt_msg_has("nested 33 deep"), "a 33rd push: %s (%s)", FMErrorString(e), FMGetLastErrorMessage());
    for (int i = 0; i < 32; i++) FMT_CALL(FMPopErrorHandler());
    for (int i = 0; i < n; i++) FMT_CALL(FMPushErrorHandler(FM_ERROR_HANDLER_SILENT)); /* as deep as before, silent */
  }

  /* Objects refuse NULL handles with a named argument. */
  FMT_EXPECT_ERR(FMContextSetUp(NULL), FM_ERR_ARG_NULL, "argument 1");
  FMT_EXPECT_ERR(FMMaskSetUp(NULL), FM_ERR_ARG_NULL, "argument 1");
  FMT_EXPECT_ERR(FMPlanSetUp(NULL), FM_ERR_ARG_NULL, "argument 1");
  FMT_EXPECT_ERR(FMContextDestroy(NULL), FM_ERR_ARG_NULL, "argument 1");
  {
    FMContext none = NULL;
    FMT_CALL(FMContextDestroy(&none)); /* a NULL handle is accepted */
  }

  {
    FMContext ctx;
    FMT_CALL(FMContextCreate(MPI_COMM_WORLD, &ctx));
    public_helpers(ctx);
    FMT_CALL(FMContextDestroy(&ctx));
  }

  /* Event log. */
  {
    FMLogEvent ev, ev2;
    char buf[4096] = "";
    FILE *mem;
    FMT_CALL(FMLogEventRegister("TestEvent", &ev));
    FMT_CALL(FMLogEventRegister("TestEvent", &ev2));
    FMT_CHECK(ev == ev2, "registering the same name twice must give the same event");
    FMT_CALL(FMLogEventBegin(ev));
    FMT_CALL(FMLogEventEnd(ev, 2e9, 1e6));
    FMT_EXPECT_ERR(FMLogEventEnd(ev, 0, 0), FM_ERR_ORDER, "without FMLogEventBegin");
    FMT_EXPECT_ERR(FMLogEventBegin(999), FM_ERR_ARG_OUTOFRANGE, "event");
    mem = fmemopen(buf, sizeof(buf), "w");
    FMT_CALL(FMLogView(mem));
    fclose(mem);
    FMT_CHECK(strstr(buf, "TestEvent") != NULL, "log view does not list TestEvent:\n%s", buf);
  }
  FMT_CALL(FMInitialized(&flag));
  FMT_CHECK(flag, "FMInitialized must be true");
  FMT_CALL(FMFinalize());
  options_files();
  {
    int rc = fmt_finish("test_sys");
    MPI_Finalize();
    return rc;
  }
}
