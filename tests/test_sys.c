/*
 * test_sys - the options database (argv, FM_OPTIONS, options file), error codes, handlers
 * and messages, and the event log.
 */
#include "fmtest.h"
#include <unistd.h>

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
  fp = fdopen(fd, "w");
  fprintf(fp, "# an options file\n-fm_test_file 11   # trailing comment\n-fm_test_override 1\n");
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

  /* Objects refuse NULL handles with a named argument. */
  FMT_EXPECT_ERR(FMContextSetUp(NULL), FM_ERR_ARG_NULL, "argument 1");
  FMT_EXPECT_ERR(FMMaskSetUp(NULL), FM_ERR_ARG_NULL, "argument 1");
  FMT_EXPECT_ERR(FMPlanSetUp(NULL), FM_ERR_ARG_NULL, "argument 1");
  FMT_EXPECT_ERR(FMContextDestroy(NULL), FM_ERR_ARG_NULL, "argument 1");
  {
    FMContext none = NULL;
    FMT_CALL(FMContextDestroy(&none)); /* a NULL handle is accepted */
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
  int rc = fmt_finish("test_sys");
  FMT_CALL(FMFinalize());
  return rc;
}
