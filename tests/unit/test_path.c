/* util/path: joins that fit, joins that do not (an error naming the path, never a cut
 * one), and the up-front check of a run directory against the longest name it takes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "util/path.h"

/* The longest directory the check accepts: dir, '/', a longest name and the NUL fill
 * an AC_PATH_MAX buffer. */
enum { LONGEST_DIR = AC_PATH_MAX - 2 - AC_PATH_NAME_MAX };

static void test_join_puts_one_slash(void **state)
{
    (void)state;
    char out[64];
    assert_int_equal(ac_path_join(out, sizeof out, "run", "a.json"), AC_OK);
    assert_string_equal(out, "run/a.json");
    assert_int_equal(ac_path_join(out, sizeof out, "run/", "a.json"), AC_OK);
    assert_string_equal(out, "run/a.json");
    assert_int_equal(ac_path_join(out, sizeof out, "", "a.json"), AC_OK);
    assert_string_equal(out, "a.json");
    assert_int_equal(ac_path_suffixed(out, sizeof out, "run", ".tmp"), AC_OK);
    assert_string_equal(out, "run.tmp");
}

static void test_join_that_does_not_fit_names_the_path(void **state)
{
    (void)state;
    char out[8];
    assert_int_equal(ac_path_join(out, sizeof out, "run", "abc"), AC_OK); /* 8 bytes with the NUL */
    assert_string_equal(out, "run/abc");
    assert_int_equal(ac_path_join(out, sizeof out, "run", "abcd"), AC_ERR_INVALID);
    assert_string_equal(ac_error_message(), "run/abcd: path too long");
    assert_int_equal(ac_path_suffixed(out, sizeof out, "run", ".tmp"), AC_OK);
    assert_int_equal(ac_path_suffixed(out, sizeof out, "run.", ".tmp"), AC_ERR_INVALID);
    assert_string_equal(ac_error_message(), "run..tmp: path too long");
}

static void test_checked_dir_takes_the_longest_name(void **state)
{
    (void)state;
    static char dir[LONGEST_DIR + 1], name[AC_PATH_NAME_MAX + 1], out[AC_PATH_MAX];
    memset(dir, 'd', LONGEST_DIR);
    memset(name, 'n', AC_PATH_NAME_MAX);
    assert_int_equal(ac_path_check_dir(dir), AC_OK);
    assert_int_equal(ac_path_join(out, sizeof out, dir, name), AC_OK);
    assert_int_equal(strlen(out), AC_PATH_MAX - 1);
    assert_int_equal(ac_path_check_dir("run"), AC_OK);
}

static void test_over_long_dir_is_refused_naming_it(void **state)
{
    (void)state;
    static char dir[LONGEST_DIR + 2];
    memset(dir, 'd', LONGEST_DIR + 1);
    assert_int_equal(ac_path_check_dir(dir), AC_ERR_INVALID);
    /* the reason, then as much of the directory as the message holds */
    const char *msg = ac_error_message();
    const char *why = "directory path over 3839 bytes, too long for the files under it: ";
    assert_int_equal(strncmp(msg, why, strlen(why)), 0);
    const char *named = msg + strlen(why);
    assert_true(strlen(named) > 900);
    assert_int_equal(strncmp(named, dir, strlen(named)), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_join_puts_one_slash),
        cmocka_unit_test(test_join_that_does_not_fit_names_the_path),
        cmocka_unit_test(test_checked_dir_takes_the_longest_name),
        cmocka_unit_test(test_over_long_dir_is_refused_naming_it),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
