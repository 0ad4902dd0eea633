/*
 * init.c - FMInitialize/FMFinalize and the settings read once at initialization
 * (FMInitSettings). Version, enum names, time and printing: util.c.
 */
#include <flashmask/private/fmimpl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

static int fm_initialized;
static int fm_we_initialized_mpi;
static FMInitSettings fm_settings;

const FMInitSettings *FMGetInitSettings_Private(void) { return &fm_settings; }

/* The settings of FMInitSettings, read once. */
static FMErrorCode read_settings(void)
{
  memset(&fm_settings, 0, sizeof(fm_settings));
  FMCall(FMOptionsGetBool("-fm_trace_serial", "write -fm_trace files through rank 0 even with parallel HDF5", &fm_settings.trace_serial, NULL));
  return FM_SUCCESS;
}

int FMIsInitialized_Private(void) { return fm_initialized; }

FMErrorCode FMInitialized(FMBool *flag)
{
  FMValidPointer(flag, 1);
  *flag = fm_initialized ? FM_TRUE : FM_FALSE;
  return FM_SUCCESS;
}

FMErrorCode FMInitialize(int *argc, char ***argv, const char *file, const char *help)
{
  int init = 0, rank = 0;
  FMBool flag = FM_FALSE;
  if (fm_initialized) return FM_SUCCESS;
  MPI_Initialized(&init);
  if (!init) {
    int provided;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
      FMRaise(MPI_COMM_SELF, FM_ERR_MPI, "MPI_Init_thread() failed");
    fm_we_initialized_mpi = 1;
  }
  /* agreed: an options file that one node cannot read is an error on every rank, not a hang later */
  FMCall(FMAgreeCode(MPI_COMM_WORLD, FMOptionsInitialize_Private(argc ? *argc : 0, argv ? *argv : NULL, file)));
  FMCall(FMLogInitialize_Private());
  fm_initialized = 1;
  FMCall(FMOptionsHasName("-help", &flag));
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (flag && rank == 0) {
    if (help) printf("%s\n", help);
    printf("flashmask %s options (current value in <>):\n", FMGetVersion());
    printf("  -help: print this list of options as they are read\n");
  }
  if (flag) { /* read quietly by the options' set-up above: listed here, under the banner */
    char file[PATH_MAX] = "";
    FMCall(FMOptionsGetString("-options_file", FM_OPTIONS_FILE_HELP, file, sizeof(file), NULL));
  }
  /* Read through the options functions: each is listed once by -help and counts as used. */
  flag = FM_FALSE;
  FMCall(FMOptionsGetBool("-fm_error_abort", "call MPI_Abort on the first error", &flag, NULL));
  if (flag) FMCall(FMPushErrorHandler(FM_ERROR_HANDLER_ABORT));
  flag = FM_FALSE;
  FMCall(FMOptionsGetBool("-fm_error_silent", "return error codes without printing the traceback", &flag, NULL));
  if (flag) FMCall(FMPushErrorHandler(FM_ERROR_HANDLER_SILENT));
  FMCall(FMLogViewRequested_Private(&flag));
  flag = FM_TRUE;
  FMCall(FMOptionsGetBool("-options_left", "at FMFinalize, list options that were set but never used (default: when there are any; 0: never)",
                          &flag, NULL));
  FMCall(read_settings());
  {
    char spec[128] = "";
    FMCall(FMOptionsGetString("-fm_debug_fail", "testing aid: make fault site SITE fail on RANK (default 0) for its first COUNT hits "
                                                "(default 1, 0 = every hit): site[:rank[:count]] (sites: HACKING.md)",
                              spec, sizeof(spec), NULL));
    FMCall(FMFaultArm_Private(spec));
  }
  return FM_SUCCESS;
}

FMErrorCode FMFinalize(void)
{
  FMBool logview = FM_FALSE;
  int fin = 0;
  if (!fm_initialized) return FM_SUCCESS;
  FMCall(FMLogViewRequested_Private(&logview));
  if (logview) FMCall(FMLogView(stdout));
  FMCall(FMOptionsFinalize_Private());
  FMCall(FMLogFinalize_Private());
  (void)FMFaultArm_Private(NULL); /* disarm (never fails) */
  fm_initialized = 0;
  MPI_Finalized(&fin);
  if (fm_we_initialized_mpi && !fin) MPI_Finalize();
  fm_we_initialized_mpi = 0;
  return FM_SUCCESS;
}
