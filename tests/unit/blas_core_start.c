/* Linked into every test program but test_blas_core: the program runs on the OpenBLAS
 * kernels autocompress itself runs (ac_cpu_blas_restart_if_legacy), so that the tests
 * check the GEMMs users get, and a test comparing its own results with the CLI's compares
 * one kernel set. glibc passes argc, argv and the environment to a program's constructors,
 * which run once the shared libraries are initialised: OpenBLAS has made its choice, and
 * main has not started. */
#include "autocompress/host.h"

__attribute__((constructor)) static void blas_core_start(int argc, char **argv, char **envp)
{
    (void)argc;
    (void)envp;
    ac_cpu_blas_restart_if_legacy(argv);
}
