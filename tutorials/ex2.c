static const char help[] =
  "ex2: build the FlashMask benchmark masks from options, save them to HDF5, and print\n"
  "their element density and block sparsity.\n"
  "  mpiexec -n 1 ./ex2 [-seqlen 8192] [-masks all|causal,document,...] [-o ex2.h5]\n"
  "                     [-<type>_fm_mask_docs ...] [-<type>_fm_mask_seed 42] [-<type>_fm_mask_view] [-help]\n"
  "Each mask reads its -fm_mask_* options under the prefix \"<type>_\", e.g.\n"
  "-causal_document_fm_mask_docs 4000,4192 applies to the causal_document mask only.\n";

/*
 * Tutorial 2. Masks are built by type name and parameters (or by options), validated and
 * summarized at FMMaskSetUp, and saved with FMMaskSave as /masks/<name> in an HDF5 file.
 * Read the file back with FMMaskLoad, h5dump, or h5py (share/bench/peers.py does).
 * FMMaskTypeList gives the type names; each mask gets the options prefix "<type>_"
 * (FMMaskSetOptionsPrefix), so options meant for one mask reach that mask only and the loop's
 * type is never overridden by another mask's options.
 */
#include <flashmask.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


int main(int argc, char **argv)
{
  FMContext ctx;
  int seqlen = 8192, heads = 1, rank, nsaved = 0;
  char list[1024] = "all", out[512] = "ex2.h5";
  const char *names[16];
  const char *const *types;
  int n = 0, ntypes;

  FMCall(FMInitialize(&argc, &argv, NULL, help));
  FMCall(FMOptionsGetInt("-seqlen", "sequence length of every mask", &seqlen, NULL));
  FMCall(FMOptionsGetInt("-heads", "mask heads (random_eviction differs per head)", &heads, NULL));
  FMCall(FMOptionsGetString("-masks", "comma-separated mask types, or all", list, sizeof(list), NULL));
  FMCall(FMOptionsGetString("-o", "HDF5 output file", out, sizeof(out), NULL));
  FMCall(FMContextCreate(MPI_COMM_WORLD, &ctx));
  FMCall(FMContextSetFromOptions(ctx));
  FMCall(FMContextSetUp(ctx));
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);

  char why[256] = "";
  if (!strcmp(list, "all")) {
    /* every builder: all the types but "bounds" (which needs bounds from the user) */
    FMCall(FMMaskTypeList(&ntypes, &types));
    for (int t = 0; t < ntypes && n < 16; t++)
      if (strcmp(types[t], FMMASKBOUNDS)) names[n++] = types[t];
  } else {
    FMCall(FMMaskTypeList(&ntypes, &types));
    for (char *t = strtok(list, ","); t && !why[0]; t = strtok(NULL, ",")) {
      int known = 0, twice = 0;
      for (int k = 0; k < ntypes; k++) known |= !strcmp(t, types[k]);
      for (int k = 0; k < n; k++) twice |= !strcmp(t, names[k]);
      if (!known) snprintf(why, sizeof(why), "names \"%s\", which is not a mask type (ex2 -help lists them under -fm_mask_type)", t);
      else if (twice) snprintf(why, sizeof(why), "names %s twice (the file holds one mask of each name)", t);
      else if (n == 16) snprintf(why, sizeof(why), "names more than 16 types (the 17th is %s); give at most 16", t);
      else names[n++] = t;
    }
    if (!why[0] && n == 0) snprintf(why, sizeof(why), "names no mask type; give all or a comma-separated list such as causal,document");
  }
  {
    /* every rank stops if any was given a bad list, or the ranks lists of other lengths (an MPMD
       command line may differ between them): else some would wait in a mask's set-up alone */
    int in[2] = {why[0] != 0, n}, mx[2], mn;
    MPI_Allreduce(in, mx, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(&n, &mn, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (mx[0] || mn != mx[1]) {
      if (why[0]) fprintf(stderr, "ex2 [rank %d]: -masks %s\n", rank, why);
      else if (mn != mx[1] && rank == 0) fprintf(stderr, "ex2: the ranks were given -masks lists of different lengths (%d to %d types)\n", mn, mx[1]);
      FMCall(FMContextDestroy(&ctx));
      FMCall(FMFinalize());
      return 1;
    }
  }
  if (rank == 0) printf("%-22s %8s %6s %10s %10s\n", "mask", "seqlen", "heads", "density", "sparsity");
  for (int i = 0; i < n; i++) {
    FMMask mask;
    double density, sparsity;
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "%s_", names[i]);
    FMCall(FMMaskCreate(ctx, &mask));
    FMCall(FMMaskSetOptionsPrefix(mask, prefix));
    FMCall(FMMaskSetSizes(mask, seqlen, seqlen, heads));
    FMCall(FMMaskSetType(mask, names[i]));
    FMCall(FMMaskSetFromOptions(mask));
    FMCall(FMMaskSetUp(mask));
    FMCall(FMMaskGetDensity(mask, &density, &sparsity));
    if (rank == 0) printf("%-22s %8d %6d %10.4f %10.4f\n", names[i], seqlen, heads, density, sparsity);
#if FM_HAVE_HDF5
    FMCall(FMMaskSave(mask, out, names[i]));
    nsaved++;
#else
    if (rank == 0 && i == 0) printf("  (this build has no HDF5: masks are not saved)\n");
#endif
    FMCall(FMMaskDestroy(&mask));
  }
  if (rank == 0 && nsaved) printf("ex2: saved %d mask%s to %s\n", nsaved, nsaved > 1 ? "s" : "", out);
  else if (rank == 0) printf("ex2: built %d mask%s, saved none\n", n, n == 1 ? "" : "s");
  FMCall(FMContextDestroy(&ctx));
  FMCall(FMFinalize());
  return 0;
}

/*TEST

  test:
    suffix: all
    nsize: 1
    args: -seqlen 2000 -o ex2.h5

  # every mask built is saved: as many groups under /masks as there are mask types
  test:
    suffix: saved
    requires: hdf5
    args: -seqlen 2000 -o ex2.h5
    output: ex2: saved 12 masks to ex2.h5

  # a -masks list with no name in it is refused by name
  test:
    suffix: no_masks
    args: -masks , -o ex2.h5
    returncode: 1
    output: -masks names no mask type

  # so are an unknown type and one named twice, on every rank
  test:
    suffix: bad_masks
    nsize: 2
    args: -masks causal,bogus -o ex2.h5
    returncode: 1
    output: -masks names "bogus", which is not a mask type

  test:
    suffix: twice
    args: -masks causal,document,causal -o ex2.h5
    returncode: 1
    output: -masks names causal twice

  test:
    suffix: file
    requires: hdf5 h5dump
    args: -seqlen 2000 -o ex2.h5
    check: test "$("$H5DUMP" -n ex2.h5 | grep -E -c 'group +/masks/')" = 12

TEST*/
