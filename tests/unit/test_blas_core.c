/* OpenBLAS's kernel set: the choice for a legacy detection, and the CLI restarting itself
 * with that choice (what `autocompress --version` reports running) when OpenBLAS in this
 * very process, loaded without OPENBLAS_CORETYPE, chose a legacy set. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autocompress/host.h"

static void test_legacy_detection_gets_the_best_set_the_cpu_runs(void **state)
{
    (void)state;
    unsigned avx512 = AC_CPU_AVX2_FMA | AC_CPU_AVX512;
    assert_string_equal(ac_cpu_blas_core_choice("Prescott", avx512 | AC_CPU_AVX512_BF16), "Cooperlake");
    assert_string_equal(ac_cpu_blas_core_choice("prescott", avx512), "SkylakeX");
    assert_string_equal(ac_cpu_blas_core_choice("Nehalem", AC_CPU_AVX2_FMA), "Haswell");
    assert_string_equal(ac_cpu_blas_core_choice("Sandybridge", AC_CPU_AVX2_FMA), "Haswell");
    /* a bf16 bit without AVX-512 (not a real CPU) is not enough for Cooperlake */
    assert_string_equal(ac_cpu_blas_core_choice("Core2", AC_CPU_AVX2_FMA | AC_CPU_AVX512_BF16), "Haswell");
}

static void test_a_modern_detection_or_an_old_cpu_is_left_alone(void **state)
{
    (void)state;
    unsigned all = AC_CPU_AVX2_FMA | AC_CPU_AVX512 | AC_CPU_AVX512_BF16;
    assert_null(ac_cpu_blas_core_choice("Haswell", all));
    assert_null(ac_cpu_blas_core_choice("Zen", all));
    assert_null(ac_cpu_blas_core_choice("SkylakeX", all));
    assert_null(ac_cpu_blas_core_choice("Cooperlake", all));
    assert_null(ac_cpu_blas_core_choice("Prescott", 0)); /* really that old */
    assert_null(ac_cpu_blas_core_choice(NULL, all));
}

/* What `autocompress --version` says it runs, started without OPENBLAS_CORETYPE. */
static void cli_blas_core(char *core, size_t size)
{
    FILE *p = popen("env -u OPENBLAS_CORETYPE " AC_CLI_PATH " --version", "r");
    assert_non_null(p);
    char line[256];
    core[0] = '\0';
    while (fgets(line, sizeof line, p))
        if (!strncmp(line, "OpenBLAS kernels: ", 18))
            snprintf(core, size, "%.*s", (int)strcspn(line + 18, "\n"), line + 18);
    assert_int_equal(pclose(p), 0);
}

static void test_cli_runs_the_chosen_set(void **state)
{
    (void)state;
    char core[64];
    cli_blas_core(core, sizeof core);
    if (getenv("OPENBLAS_CORETYPE")) {
        /* this process's detection was overridden: only check the CLI reports a set */
        assert_true(core[0] != '\0');
        return;
    }
    const char *wanted = ac_cpu_blas_core_choice(ac_cpu_blas_core(), ac_cpu_features());
    print_message("OpenBLAS detected %s here; the CLI runs %s\n", ac_cpu_blas_core(), core);
    assert_string_equal(core, wanted ? wanted : ac_cpu_blas_core());
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_legacy_detection_gets_the_best_set_the_cpu_runs),
        cmocka_unit_test(test_a_modern_detection_or_an_old_cpu_is_left_alone),
        cmocka_unit_test(test_cli_runs_the_chosen_set),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
