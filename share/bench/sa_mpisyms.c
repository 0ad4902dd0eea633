/* sa_mpisyms.c - storage for the Open MPI predefined handles that the error macros name
   (MPI_COMM_SELF), so standalone harness builds link without libmpi. Not part of the library. */
char ompi_mpi_comm_self[4096], ompi_mpi_comm_world[4096];
