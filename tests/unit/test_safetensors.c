/* Safetensors reader, writer and sharded sets; bf16/f16 conversions. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <errno.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "autocompress/dtype.h"
#include "autocompress/safetensors.h"

static char tmpdir[64];

/* ---- helpers ---- */

static void tpath(char *buf, size_t cap, const char *name)
{
    snprintf(buf, cap, "%s/%s", tmpdir, name);
}

static void write_bytes(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (n)
        assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static unsigned char *read_bytes(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long len = ftell(f);
    assert_true(len >= 0);
    rewind(f);
    unsigned char *buf = malloc((size_t)len + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return buf;
}

static void put_le64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* A file made by hand: declared header length, header text, then data_len data bytes
 * (byte i is i & 0xff). */
static void craft_raw(const char *path, uint64_t declared, const char *header, size_t data_len)
{
    size_t hl = strlen(header);
    unsigned char *buf = malloc(8 + hl + data_len);
    assert_non_null(buf);
    put_le64(buf, declared);
    memcpy(buf + 8, header, hl);
    for (size_t i = 0; i < data_len; i++)
        buf[8 + hl + i] = (unsigned char)i;
    write_bytes(path, buf, 8 + hl + data_len);
    free(buf);
}

static void craft(const char *path, const char *header, size_t data_len)
{
    craft_raw(path, strlen(header), header, data_len);
}

static bool contains(const char *haystack, const char *needle)
{
    return strstr(haystack, needle) != NULL;
}

/* Opening `path` fails with `code` and a message containing the file's base name and
 * every string in `needles` (NULL-terminated). */
static void expect_open_fails(const char *label, const char *path, ac_status code,
                              const char *const *needles)
{
    ac_safetensors *st = (ac_safetensors *)0x1;
    ac_clear_error();
    ac_status rc = ac_safetensors_open(path, &st);
    const char *msg = ac_error_message();
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    bool ok = rc == code && st == NULL && contains(msg, base);
    for (size_t i = 0; ok && needles && needles[i]; i++)
        ok = contains(msg, needles[i]);
    if (!ok) {
        print_error("case %s: status %s (want %s), message \"%s\"\n", label, ac_status_name(rc),
                    ac_status_name(code), msg);
        if (rc == AC_OK)
            ac_safetensors_close(st);
        fail();
    }
}

/* Removes a file or a directory tree (no symlinks are followed). */
static int remove_tree(const char *path)
{
    struct stat sb;
    if (lstat(path, &sb) != 0)
        return -1;
    if (S_ISDIR(sb.st_mode)) {
        DIR *d = opendir(path);
        if (!d)
            return -1;
        struct dirent *ent;
        while ((ent = readdir(d)) != NULL) {
            if (strcmp(ent->d_name, ".") == 0 || strcmp(ent->d_name, "..") == 0)
                continue;
            char child[1024];
            snprintf(child, sizeof child, "%s/%s", path, ent->d_name);
            remove_tree(child);
        }
        closedir(d);
    }
    return remove(path);
}

static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ac_test_safetensors_XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    return remove_tree(tmpdir);
}

static void make_subdir(char *buf, size_t cap, const char *name)
{
    tpath(buf, cap, name);
    assert_int_equal(mkdir(buf, 0755), 0);
}

/* ---- conversions ---- */

static void test_bf16_constants(void **state)
{
    (void)state;
    static const struct {
        uint32_t f32;
        uint16_t bf16;
    } cases[] = {
        {0x3F800000u, 0x3F80u}, /* 1.0 */
        {0xC0200000u, 0xC020u}, /* -2.5 */
        {0x00000000u, 0x0000u}, /* +0 */
        {0x80000000u, 0x8000u}, /* -0 */
        {0x477FE000u, 0x4780u}, /* 65504 = 0x477F + 0xE000 (> half) rounds up to 65536 */
        {0x3F808000u, 0x3F80u}, /* exact tie, kept part even: stays */
        {0x3F818000u, 0x3F82u}, /* exact tie, kept part odd: up to even */
        {0x3F808001u, 0x3F81u}, /* just above the tie: up */
        {0x3F807FFFu, 0x3F80u}, /* just below the tie: down */
        {0x7F800000u, 0x7F80u}, /* +inf */
        {0xFF800000u, 0xFF80u}, /* -inf */
        {0x7F7FFFFFu, 0x7F80u}, /* FLT_MAX rounds to inf */
        {0x7F7F7FFFu, 0x7F7Fu}, /* just under the overflow tie: largest finite */
        {0x00000001u, 0x0000u}, /* smallest f32 subnormal rounds to +0 */
        {0x00008000u, 0x0000u}, /* subnormal tie to even (0) */
        {0x00018000u, 0x0002u}, /* subnormal tie to even (2) */
        {0x7FC00000u, 0x7FC0u}, /* quiet NaN */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint16_t got = ac_float_to_bf16(ac_f32_from_bits(cases[i].f32));
        if (got != cases[i].bf16) {
            print_error("bf16(0x%08X) = 0x%04X, want 0x%04X\n", cases[i].f32, got, cases[i].bf16);
            fail();
        }
    }
    /* A signalling NaN whose payload is only in the dropped bits must stay NaN. */
    uint16_t nan = ac_float_to_bf16(ac_f32_from_bits(0x7F800001u));
    assert_int_equal(nan & 0x7F80u, 0x7F80u);
    assert_int_not_equal(nan & 0x007Fu, 0);
    nan = ac_float_to_bf16(ac_f32_from_bits(0xFF800001u));
    assert_int_equal(nan & 0xFF80u, 0xFF80u);
    assert_int_not_equal(nan & 0x007Fu, 0);

    assert_int_equal(ac_f32_bits(ac_bf16_to_float(0x3F80u)), 0x3F800000u);
    assert_int_equal(ac_f32_bits(ac_bf16_to_float(0xC020u)), 0xC0200000u);
    assert_int_equal(ac_f32_bits(ac_bf16_to_float(0x0001u)), 0x00010000u);
    assert_int_equal(ac_f32_bits(ac_bf16_to_float(0xFF80u)), 0xFF800000u);
    assert_true(isnan(ac_bf16_to_float(0x7FC1u)));

    /* Every non-NaN bf16 survives bf16 -> f32 -> bf16; NaNs stay NaN. */
    for (uint32_t h = 0; h < 0x10000u; h++) {
        float f = ac_bf16_to_float((uint16_t)h);
        uint16_t back = ac_float_to_bf16(f);
        if ((h & 0x7FFFu) > 0x7F80u)
            assert_true(isnan(ac_bf16_to_float(back)));
        else
            assert_int_equal(back, h);
    }
}

static void test_f16_constants(void **state)
{
    (void)state;
    static const struct {
        uint32_t f32;
        uint16_t f16;
    } cases[] = {
        {0x3F800000u, 0x3C00u}, /* 1.0 */
        {0xC0200000u, 0xC100u}, /* -2.5 = -1.25 * 2^1 */
        {0x00000000u, 0x0000u}, /* +0 */
        {0x80000000u, 0x8000u}, /* -0 */
        {0x477FE000u, 0x7BFFu}, /* 65504, largest finite */
        {0x477FEFFFu, 0x7BFFu}, /* just below 65520: down */
        {0x477FF000u, 0x7C00u}, /* 65520, tie with odd 0x7BFF: up to inf */
        {0x501502F9u, 0x7C00u}, /* 1e10: overflow */
        {0xD01502F9u, 0xFC00u}, /* -1e10 */
        {0x7F800000u, 0x7C00u}, /* +inf */
        {0xFF800000u, 0xFC00u}, /* -inf */
        {0x33800000u, 0x0001u}, /* 2^-24, smallest subnormal */
        {0xB3800000u, 0x8001u}, /* -2^-24 */
        {0x33000000u, 0x0000u}, /* 2^-25, tie between 0 and 2^-24: even (0) */
        {0x33000001u, 0x0001u}, /* just above 2^-25: up */
        {0x33C00000u, 0x0002u}, /* 1.5 * 2^-24, tie between 1 and 2: even (2) */
        {0x34200000u, 0x0002u}, /* 2.5 * 2^-24, tie between 2 and 3: even (2) */
        {0x387FC000u, 0x03FFu}, /* 1023 * 2^-24, largest subnormal */
        {0x387FE000u, 0x0400u}, /* 1023.5 * 2^-24, tie: up to even 0x400 (smallest normal) */
        {0x38800000u, 0x0400u}, /* 2^-14, smallest normal */
        {0x3F801000u, 0x3C00u}, /* 1 + 2^-11, tie: even (1.0) */
        {0x3F803000u, 0x3C02u}, /* 1 + 3 * 2^-11, tie: even (0x3C02) */
        {0x3F801001u, 0x3C01u}, /* just above the tie: up */
        {0x3EAAA000u, 0x3555u}, /* 0x3555 exactly: 2^-2 * (1 + 0x155 / 1024) */
        {0x2EDBE6FFu, 0x0000u}, /* 1e-10: underflow to +0 */
        {0x00000001u, 0x0000u}, /* f32 subnormal */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint16_t got = ac_float_to_f16(ac_f32_from_bits(cases[i].f32));
        if (got != cases[i].f16) {
            print_error("f16(0x%08X) = 0x%04X, want 0x%04X\n", cases[i].f32, got, cases[i].f16);
            fail();
        }
    }
    uint16_t nan = ac_float_to_f16(ac_f32_from_bits(0x7F800001u)); /* payload only in low bits */
    assert_int_equal(nan & 0x7C00u, 0x7C00u);
    assert_int_not_equal(nan & 0x03FFu, 0);
    nan = ac_float_to_f16(ac_f32_from_bits(0xFFC00000u));
    assert_int_equal(nan & 0xFC00u, 0xFC00u);
    assert_int_not_equal(nan & 0x03FFu, 0);

    static const struct {
        uint16_t f16;
        uint32_t f32;
    } back[] = {
        {0x3C00u, 0x3F800000u}, {0xC100u, 0xC0200000u}, {0x7BFFu, 0x477FE000u},
        {0x0001u, 0x33800000u}, {0x8001u, 0xB3800000u}, {0x03FFu, 0x387FC000u},
        {0x0400u, 0x38800000u}, {0x3555u, 0x3EAAA000u}, {0x7C00u, 0x7F800000u},
        {0xFC00u, 0xFF800000u}, {0x8000u, 0x80000000u}, {0x7E00u, 0x7FC00000u},
        {0x0200u, 0x38000000u}, /* 512 * 2^-24 = 2^-15 */
    };
    for (size_t i = 0; i < sizeof back / sizeof back[0]; i++) {
        uint32_t got = ac_f32_bits(ac_f16_to_float(back[i].f16));
        if (got != back[i].f32) {
            print_error("f32(f16 0x%04X) = 0x%08X, want 0x%08X\n", back[i].f16, got, back[i].f32);
            fail();
        }
    }
    assert_true(isnan(ac_f16_to_float(0x7C01u)));

    for (uint32_t h = 0; h < 0x10000u; h++) {
        float f = ac_f16_to_float((uint16_t)h);
        uint16_t again = ac_float_to_f16(f);
        if ((h & 0x7FFFu) > 0x7C00u)
            assert_true(isnan(ac_f16_to_float(again)));
        else
            assert_int_equal(again, h);
    }
}

/* Checks that `r` is the round-to-nearest-even encoding of x: no neighbouring
 * encoding is closer, a tie picks the even one, and overflow happens exactly from
 * halfway past the largest finite value. `inf` is the format's infinity magnitude. */
static void check_nearest_even(float x, uint16_t r, float (*decode)(uint16_t), uint16_t inf,
                               const char *what)
{
    uint16_t sign = r & 0x8000u, mag = r & 0x7FFFu;
    double ax = fabs((double)x);
    double max_finite = decode((uint16_t)(inf - 1));
    double overflow_at = max_finite + (max_finite - decode((uint16_t)(inf - 2))) / 2;
    bool ok = (signbit(x) != 0) == (sign != 0);
    if (ax >= overflow_at) {
        ok = ok && mag == inf;
    } else {
        ok = ok && mag < inf;
        double err = fabs(ax - decode(mag));
        if (ok && mag > 0) {
            double e2 = fabs(ax - decode((uint16_t)(mag - 1)));
            ok = err < e2 || (err == e2 && !(mag & 1u));
        }
        if (ok && mag + 1u < inf) {
            double e2 = fabs(ax - decode((uint16_t)(mag + 1)));
            ok = err < e2 || (err == e2 && !(mag & 1u));
        }
    }
    if (!ok) {
        print_error("%s(0x%08X) = 0x%04X is not the nearest-even encoding\n", what, ac_f32_bits(x),
                    r);
        fail();
    }
}

static void test_rounding_sweep(void **state)
{
    (void)state;
    /* About a million f32 patterns across every exponent, both signs. */
    for (uint64_t u = 0; u <= 0xFFFFFFFFu; u += 4093) {
        float x = ac_f32_from_bits((uint32_t)u);
        if (isnan(x))
            continue;
        check_nearest_even(x, ac_float_to_f16(x), ac_f16_to_float, 0x7C00u, "f16");
        check_nearest_even(x, ac_float_to_bf16(x), ac_bf16_to_float, 0x7F80u, "bf16");
    }
}

static void test_convert_arrays(void **state)
{
    (void)state;
    const float src[5] = {1.0f, -2.5f, 65504.0f, 0.0f, -0.0f};
    unsigned char raw[1 + 5 * 8];
    float out[5];

    /* Unaligned source and destination bytes (offset 1). */
    assert_int_equal(ac_convert_from_f32(AC_DTYPE_F16, src, raw + 1, 5), AC_OK);
    uint16_t h;
    memcpy(&h, raw + 1 + 4, 2);
    assert_int_equal(h, 0x7BFFu);
    assert_int_equal(ac_convert_to_f32(AC_DTYPE_F16, raw + 1, out, 5), AC_OK);
    assert_memory_equal(out, src, sizeof src);

    assert_int_equal(ac_convert_from_f32(AC_DTYPE_BF16, src, raw + 1, 5), AC_OK);
    memcpy(&h, raw + 1 + 2, 2);
    assert_int_equal(h, 0xC020u);
    assert_int_equal(ac_convert_to_f32(AC_DTYPE_BF16, raw + 1, out, 5), AC_OK);
    assert_int_equal(ac_f32_bits(out[1]), 0xC0200000u);

    assert_int_equal(ac_convert_from_f32(AC_DTYPE_F64, src, raw + 1, 5), AC_OK);
    double d;
    memcpy(&d, raw + 1 + 8, 8);
    assert_true(d == -2.5);
    assert_int_equal(ac_convert_to_f32(AC_DTYPE_F64, raw + 1, out, 5), AC_OK);
    assert_memory_equal(out, src, sizeof src);

    assert_int_equal(ac_convert_to_f32(AC_DTYPE_F32, src, out, 5), AC_OK);
    assert_memory_equal(out, src, sizeof src);

    assert_int_equal(ac_convert_to_f32(AC_DTYPE_I32, raw, out, 1), AC_ERR_INVALID);
    assert_true(contains(ac_error_message(), "I32"));
    assert_int_equal(ac_convert_from_f32(AC_DTYPE_U8, src, raw, 1), AC_ERR_INVALID);

    /* The array functions agree with the scalar ones on a large (parallel) input. */
    size_t n = 200000;
    float *big = malloc(n * sizeof *big), *back = malloc(n * sizeof *back);
    uint16_t *half = malloc(n * sizeof *half);
    assert_true(big && back && half);
    for (size_t i = 0; i < n; i++)
        big[i] = ac_f32_from_bits((uint32_t)(i * 21473u));
    ac_f32_to_f16(big, half, n);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(half[i], ac_float_to_f16(big[i]));
    ac_f16_to_f32(half, back, n);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(ac_f32_bits(back[i]), ac_f32_bits(ac_f16_to_float(half[i])));
    ac_f32_to_bf16(big, half, n);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(half[i], ac_float_to_bf16(big[i]));
    ac_bf16_to_f32(half, back, n);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(ac_f32_bits(back[i]), (uint32_t)half[i] << 16);
    free(big);
    free(back);
    free(half);
}

static void test_dtype_names(void **state)
{
    (void)state;
    static const char *names[] = {"F32", "BF16", "F16", "F64", "I8", "I16", "I32",
                                  "I64", "U8",   "U16", "U32", "U64", "BOOL"};
    static const size_t sizes[] = {4, 2, 2, 8, 1, 2, 4, 8, 1, 2, 4, 8, 1};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        ac_dtype d;
        assert_int_equal(ac_dtype_parse(names[i], &d), AC_OK);
        assert_string_equal(ac_dtype_name(d), names[i]);
        assert_int_equal(ac_dtype_size(d), sizes[i]);
    }
    ac_dtype d;
    assert_int_equal(ac_dtype_parse("f32", &d), AC_ERR_INVALID);
    assert_true(contains(ac_error_message(), "f32"));
    assert_int_equal(ac_dtype_size(AC_DTYPE_COUNT), 0);
    assert_true(ac_dtype_is_float(AC_DTYPE_BF16));
    assert_false(ac_dtype_is_float(AC_DTYPE_I64));
}

/* ---- round trip ---- */

typedef struct {
    const char *name;
    ac_dtype dtype;
    int ndim;
    int64_t shape[AC_TENSOR_MAX_DIMS];
    const void *data;
    size_t nbytes;
} rt_tensor;

static void check_header_layout(const char *path, const rt_tensor *t, size_t n)
{
    size_t len;
    unsigned char *file = read_bytes(path, &len);
    assert_true(len >= 8);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--)
        hl = (hl << 8) | file[i];
    assert_int_equal((8 + hl) % 8, 0);
    assert_true(8 + hl <= len);
    char *text = malloc(hl + 1);
    memcpy(text, file + 8, hl);
    text[hl] = '\0';
    /* Padding is spaces only, after the JSON object. */
    size_t json_len = strlen(text);
    while (json_len > 0 && text[json_len - 1] == ' ')
        json_len--;
    assert_int_equal(text[json_len - 1], '}');
    cJSON *root = cJSON_Parse(text);
    assert_non_null(root);
    /* Offsets are consecutive from 0 to the end of the file, each aligned to its size. */
    uint64_t *spans = calloc(2 * n, sizeof *spans);
    for (size_t i = 0; i < n; i++) {
        cJSON *e = cJSON_GetObjectItemCaseSensitive(root, t[i].name);
        assert_non_null(e);
        cJSON *offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
        spans[2 * i] = (uint64_t)cJSON_GetArrayItem(offs, 0)->valuedouble;
        spans[2 * i + 1] = (uint64_t)cJSON_GetArrayItem(offs, 1)->valuedouble;
        assert_int_equal(spans[2 * i + 1] - spans[2 * i], t[i].nbytes);
        assert_int_equal(spans[2 * i] % ac_dtype_size(t[i].dtype), 0);
        assert_memory_equal(file + 8 + hl + spans[2 * i], t[i].data, t[i].nbytes);
    }
    uint64_t covered = 0;
    for (size_t i = 0; i < n; i++)
        covered += spans[2 * i + 1] - spans[2 * i];
    assert_int_equal(covered, len - 8 - hl);
    /* No two non-empty spans share a start: together with the sum this means no holes. */
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++)
            if (t[i].nbytes && t[j].nbytes)
                assert_int_not_equal(spans[2 * i], spans[2 * j]);
    free(spans);
    cJSON_Delete(root);
    free(text);
    free(file);
}

static void test_round_trip(void **state)
{
    (void)state;
    static const float f32[2][3] = {{1.0f, -2.5f, 3.25f}, {1e-30f, -0.0f, 65504.0f}};
    static const uint16_t bf16[4] = {0x3F80u, 0xC020u, 0x7F80u, 0x0001u};
    static const uint16_t f16[3][1][2] = {{{0x3C00u, 0xC100u}}, {{0x7BFFu, 0x0001u}},
                                          {{0x8000u, 0x7E00u}}};
    static const int32_t i32[5] = {0, -1, INT32_MAX, INT32_MIN, 12345};
    static const float scalar = 42.5f;
    static const uint8_t u8[3] = {0, 0x80, 0xFF};
    static const int64_t i64[2] = {INT64_MIN, 0x0123456789ABCDEFll};
    static const double f64[1] = {-1.0 / 3.0};
    static const float empty_data[1] = {0};
    const rt_tensor t[] = {
        {"model.layers.0.mixer.in_proj.weight", AC_DTYPE_F32, 2, {2, 3}, f32, sizeof f32},
        {"bf16.vec", AC_DTYPE_BF16, 1, {4}, bf16, sizeof bf16},
        {"f16.cube", AC_DTYPE_F16, 3, {3, 1, 2}, f16, sizeof f16},
        {"ints", AC_DTYPE_I32, 1, {5}, i32, sizeof i32},
        {"scalar", AC_DTYPE_F32, 0, {0}, &scalar, sizeof scalar},
        {"empty", AC_DTYPE_F32, 2, {0, 4}, empty_data, 0},
        {"bytes", AC_DTYPE_U8, 1, {3}, u8, sizeof u8},
        {"longs", AC_DTYPE_I64, 1, {2}, i64, sizeof i64},
        {"double", AC_DTYPE_F64, 2, {1, 1}, f64, sizeof f64},
        {"name with \"quotes\" \\ and \xc3\xa9", AC_DTYPE_U8, 1, {1}, u8, 1},
    };
    const size_t n = sizeof t / sizeof t[0];

    ac_safetensors_writer *w;
    assert_int_equal(ac_safetensors_writer_init(&w), AC_OK);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(
            ac_safetensors_writer_add(w, t[i].name, t[i].dtype, t[i].ndim, t[i].shape, t[i].data),
            AC_OK);
    assert_int_equal(ac_safetensors_writer_count(w), n);
    assert_int_equal(ac_safetensors_writer_set_metadata(w, "format", "np"), AC_OK);
    assert_int_equal(ac_safetensors_writer_set_metadata(w, "format", "pt"), AC_OK); /* replaces */
    assert_int_equal(ac_safetensors_writer_set_metadata(w, "note", "a\"b\\c\nd"), AC_OK);

    char path[512], tmp[520];
    tpath(path, sizeof path, "round_trip.safetensors");
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    assert_int_equal(ac_safetensors_writer_write(w, path), AC_OK);
    assert_int_equal(access(tmp, F_OK), -1);
    check_header_layout(path, t, n);
    /* Writing again replaces the file. */
    assert_int_equal(ac_safetensors_writer_write(w, path), AC_OK);
    ac_safetensors_writer_free(w);

    ac_safetensors *st;
    assert_int_equal(ac_safetensors_open(path, &st), AC_OK);
    assert_string_equal(ac_safetensors_path(st), path);
    assert_int_equal(ac_safetensors_count(st), n);
    for (size_t i = 0; i < n; i++) {
        const ac_tensor_view *v = ac_safetensors_find(st, t[i].name);
        assert_non_null(v);
        assert_string_equal(v->name, t[i].name);
        assert_int_equal(v->dtype, t[i].dtype);
        assert_int_equal(v->ndim, t[i].ndim);
        for (int d = 0; d < AC_TENSOR_MAX_DIMS; d++)
            assert_int_equal(v->shape[d], d < t[i].ndim ? t[i].shape[d] : 0);
        assert_int_equal(v->nbytes, t[i].nbytes);
        assert_int_equal((uintptr_t)v->data % ac_dtype_size(v->dtype), 0);
        if (t[i].nbytes)
            assert_memory_equal(v->data, t[i].data, t[i].nbytes);
    }
    assert_int_equal(ac_tensor_view_numel(ac_safetensors_find(st, "scalar")), 1);
    assert_int_equal(ac_tensor_view_numel(ac_safetensors_find(st, "empty")), 0);
    assert_int_equal(ac_tensor_view_numel(ac_safetensors_find(st, "f16.cube")), 6);
    /* at() is in name order and covers every tensor. */
    for (size_t i = 1; i < n; i++)
        assert_true(strcmp(ac_safetensors_at(st, i - 1)->name, ac_safetensors_at(st, i)->name) < 0);
    assert_null(ac_safetensors_at(st, n));
    assert_null(ac_safetensors_find(st, "absent"));
    assert_null(ac_safetensors_find(st, ""));
    assert_string_equal(ac_safetensors_metadata(st, "format"), "pt");
    assert_string_equal(ac_safetensors_metadata(st, "note"), "a\"b\\c\nd");
    assert_null(ac_safetensors_metadata(st, "absent"));
    assert_int_equal(ac_safetensors_metadata_count(st), 2);
    const char *k, *val;
    assert_int_equal(ac_safetensors_metadata_at(st, 0, &k, &val), AC_OK);
    assert_string_equal(k, "format");
    assert_int_equal(ac_safetensors_metadata_at(st, 2, &k, &val), AC_ERR_INVALID);

    /* A copy through add_view reproduces the file byte for byte. */
    assert_int_equal(ac_safetensors_writer_init(&w), AC_OK);
    for (size_t i = 0; i < ac_safetensors_count(st); i++)
        assert_int_equal(ac_safetensors_writer_add_view(w, ac_safetensors_at(st, i)), AC_OK);
    assert_int_equal(ac_safetensors_writer_set_metadata(w, "note", "a\"b\\c\nd"), AC_OK);
    assert_int_equal(ac_safetensors_writer_set_metadata(w, "format", "pt"), AC_OK);
    char copy[512];
    tpath(copy, sizeof copy, "round_trip_copy.safetensors");
    assert_int_equal(ac_safetensors_writer_write(w, copy), AC_OK);
    ac_safetensors_writer_free(w);
    ac_safetensors_close(st);
    size_t la, lb;
    unsigned char *a = read_bytes(path, &la), *b = read_bytes(copy, &lb);
    assert_int_equal(la, lb);
    assert_memory_equal(a, b, la);
    free(a);
    free(b);
}

static void test_empty_file(void **state)
{
    (void)state;
    ac_safetensors_writer *w;
    assert_int_equal(ac_safetensors_writer_init(&w), AC_OK);
    char path[512];
    tpath(path, sizeof path, "empty.safetensors");
    assert_int_equal(ac_safetensors_writer_write(w, path), AC_OK);
    ac_safetensors_writer_free(w);
    ac_safetensors *st;
    assert_int_equal(ac_safetensors_open(path, &st), AC_OK);
    assert_int_equal(ac_safetensors_count(st), 0);
    assert_null(ac_safetensors_find(st, "x"));
    assert_null(ac_safetensors_metadata(st, "x"));
    ac_safetensors_close(st);
}

static void test_many_tensors(void **state)
{
    (void)state;
    enum { N = 1500 };
    static float values[N];
    char names[N][32];
    ac_safetensors_writer *w;
    assert_int_equal(ac_safetensors_writer_init(&w), AC_OK);
    for (int i = 0; i < N; i++) {
        values[i] = (float)i;
        snprintf(names[i], sizeof names[i], "layers.%d.weight", (i * 7919) % N);
        int64_t shape[1] = {1};
        assert_int_equal(ac_safetensors_writer_add(w, names[i], AC_DTYPE_F32, 1, shape, &values[i]),
                         AC_OK);
    }
    int64_t one = 1;
    assert_int_equal(ac_safetensors_writer_add(w, names[N / 2], AC_DTYPE_F32, 1, &one, values),
                     AC_ERR_INVALID);
    char path[512];
    tpath(path, sizeof path, "many.safetensors");
    assert_int_equal(ac_safetensors_writer_write(w, path), AC_OK);
    ac_safetensors_writer_free(w);
    ac_safetensors *st;
    assert_int_equal(ac_safetensors_open(path, &st), AC_OK);
    assert_int_equal(ac_safetensors_count(st), N);
    for (int i = 0; i < N; i++) {
        const ac_tensor_view *v = ac_safetensors_find(st, names[i]);
        assert_non_null(v);
        float f;
        memcpy(&f, v->data, sizeof f);
        assert_true(f == (float)i);
    }
    ac_safetensors_close(st);
}

/* ---- writer errors and atomicity ---- */

static void test_writer_errors(void **state)
{
    (void)state;
    ac_safetensors_writer *w;
    assert_int_equal(ac_safetensors_writer_init(&w), AC_OK);
    const float data[4] = {0};
    int64_t shape[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    assert_int_equal(ac_safetensors_writer_add(w, "a", AC_DTYPE_F32, 1, shape, data), AC_OK);
    assert_int_equal(ac_safetensors_writer_add(w, "a", AC_DTYPE_F32, 1, shape, data),
                     AC_ERR_INVALID);
    assert_true(contains(ac_error_message(), "duplicate"));
    assert_true(contains(ac_error_message(), "'a'"));
    assert_int_equal(ac_safetensors_writer_add(w, "__metadata__", AC_DTYPE_F32, 1, shape, data),
                     AC_ERR_INVALID);
    assert_int_equal(ac_safetensors_writer_add(w, "", AC_DTYPE_F32, 1, shape, data),
                     AC_ERR_INVALID);
    assert_int_equal(ac_safetensors_writer_add(w, "nine", AC_DTYPE_F32, 9, shape, data),
                     AC_ERR_INVALID);
    assert_true(contains(ac_error_message(), "'nine'"));
    assert_int_equal(ac_safetensors_writer_add(w, "neg", AC_DTYPE_F32, -1, shape, data),
                     AC_ERR_INVALID);
    int64_t negative[2] = {2, -3};
    assert_int_equal(ac_safetensors_writer_add(w, "negdim", AC_DTYPE_F32, 2, negative, data),
                     AC_ERR_INVALID);
    assert_true(contains(ac_error_message(), "'negdim'"));
    assert_int_equal(ac_safetensors_writer_add(w, "nodata", AC_DTYPE_F32, 1, shape, NULL),
                     AC_ERR_INVALID);
    assert_int_equal(ac_safetensors_writer_add(w, "baddtype", AC_DTYPE_COUNT, 1, shape, data),
                     AC_ERR_INVALID);
    int64_t huge[3] = {(int64_t)1 << 40, (int64_t)1 << 40, 4};
    assert_int_equal(ac_safetensors_writer_add(w, "huge", AC_DTYPE_F32, 3, huge, data),
                     AC_ERR_INVALID);
    int64_t zero[1] = {0};
    assert_int_equal(ac_safetensors_writer_add(w, "emptynull", AC_DTYPE_F32, 1, zero, NULL), AC_OK);
    assert_int_equal(ac_safetensors_writer_count(w), 2);
    ac_safetensors_writer_free(w);
}

static void test_writer_never_clobbers(void **state)
{
    (void)state;
    char path[512], tmp[520];
    tpath(path, sizeof path, "keep.safetensors");
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    const float good[2] = {1.0f, 2.0f}, other[2] = {3.0f, 4.0f};
    int64_t shape[1] = {2};

    ac_safetensors_writer *w;
    assert_int_equal(ac_safetensors_writer_init(&w), AC_OK);
    assert_int_equal(ac_safetensors_writer_add(w, "w", AC_DTYPE_F32, 1, shape, good), AC_OK);
    assert_int_equal(ac_safetensors_writer_write(w, path), AC_OK);
    ac_safetensors_writer_free(w);
    size_t before_len;
    unsigned char *before = read_bytes(path, &before_len);

    /* PATH.tmp cannot be created (a directory sits there): the write fails and the
     * existing file is untouched. */
    assert_int_equal(mkdir(tmp, 0755), 0);
    assert_int_equal(ac_safetensors_writer_init(&w), AC_OK);
    assert_int_equal(ac_safetensors_writer_add(w, "w", AC_DTYPE_F32, 1, shape, other), AC_OK);
    assert_int_equal(ac_safetensors_writer_write(w, path), AC_ERR_IO);
    assert_true(contains(ac_error_message(), "keep.safetensors.tmp"));
    assert_int_equal(rmdir(tmp), 0);
    size_t after_len;
    unsigned char *after = read_bytes(path, &after_len);
    assert_int_equal(before_len, after_len);
    assert_memory_equal(before, after, before_len);

    /* A write into a missing directory fails cleanly too. */
    char bad[600];
    snprintf(bad, sizeof bad, "%s/no/such/dir/x.safetensors", tmpdir);
    assert_int_equal(ac_safetensors_writer_write(w, bad), AC_ERR_IO);
    ac_safetensors_writer_free(w);
    free(before);
    free(after);
}

/* ---- malformed files ---- */

#define F32_W "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}"

static void test_malformed_headers(void **state)
{
    (void)state;
    static const struct {
        const char *label;
        const char *header;
        size_t data_len;
        const char *needles[4];
    } cases[] = {
        {"not json", "{\"w\": {\"dtype\": \"F32\", ", 0, {"not valid JSON"}},
        {"not an object", "[1, 2]", 0, {"not a JSON object"}},
        {"string header", "\"hello\"", 0, {"not a JSON object"}},
        {"trailing bytes", "{} x", 0, {"after the JSON"}},
        {"entry not object", "{\"w\": 5}", 0, {"tensor 'w'", "not a JSON object"}},
        {"missing dtype", "{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
         {"tensor 'w'", "missing \"dtype\""}},
        {"dtype not string", "{\"w\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
         {"tensor 'w'", "\"dtype\" is not a string"}},
        {"unknown dtype", "{\"w\":{\"dtype\":\"F128\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
         {"tensor 'w'", "unknown dtype 'F128'"}},
        {"lowercase dtype", "{\"w\":{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
         {"tensor 'w'", "unknown dtype 'f32'"}},
        {"missing shape", "{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4,
         {"tensor 'w'", "missing \"shape\""}},
        {"shape not array", "{\"w\":{\"dtype\":\"F32\",\"shape\":4,\"data_offsets\":[0,16]}}", 16,
         {"tensor 'w'", "\"shape\" is not an array"}},
        {"shape string dim", "{\"w\":{\"dtype\":\"F32\",\"shape\":[\"4\"],\"data_offsets\":[0,16]}}",
         16, {"tensor 'w'", "\"shape\"[0] is not a number"}},
        {"negative dim", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,-3],\"data_offsets\":[0,4]}}", 4,
         {"tensor 'w'", "\"shape\"[1] is negative"}},
        {"fractional dim", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4,
         {"tensor 'w'", "\"shape\"[0]", "not a valid dimension"}},
        {"nine dims",
         "{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4,
         {"tensor 'w'", "9 dimensions"}},
        {"huge shape",
         "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],"
         "\"data_offsets\":[0,4]}}",
         4, {"tensor 'w'", "too large"}},
        {"missing offsets", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4,
         {"tensor 'w'", "missing \"data_offsets\""}},
        {"offsets not array", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":4}}", 4,
         {"tensor 'w'", "[begin, end]"}},
        {"three offsets", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 8,
         {"tensor 'w'", "[begin, end]"}},
        {"one offset", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 8,
         {"tensor 'w'", "[begin, end]"}},
        {"string offsets",
         "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[\"0\",\"4\"]}}", 4,
         {"tensor 'w'", "data_offsets", "non-negative integers"}},
        {"negative offset", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 4,
         {"tensor 'w'", "data_offsets", "non-negative integers"}},
        {"begin after end", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", 8,
         {"tensor 'w'", "[8, 4]", "begin > end"}},
        {"outside data", "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 12,
         {"tensor 'w'", "[0, 16]", "outside the data section (12 bytes"}},
        {"size mismatch",
         "{\"layers.0.norm.weight\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,12]}}", 12,
         {"model.safetensors: tensor 'layers.0.norm.weight': shape [4] needs 16 bytes but "
          "data_offsets span 12"}},
        {"size mismatch 2d",
         "{\"w\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,16]}}", 16,
         {"tensor 'w': shape [2, 3] needs 12 bytes but data_offsets span 16"}},
        {"scalar mismatch", "{\"s\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[0,4]}}", 4,
         {"tensor 's': shape [] needs 8 bytes but data_offsets span 4"}},
        {"overlap",
         "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}",
         24, {"tensor 'b'", "overlap", "tensor 'a'"}},
        {"nested overlap",
         "{\"a\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[0,32]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[20,24]},"
         "\"c\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
         32, {"tensor 'c'", "overlap", "tensor 'a'"}},
        {"same span",
         "{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"a\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
         4, {"overlap"}},
        {"duplicate name", F32_W ",\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
         8, {"tensor 'w' appears twice"}},
        {"metadata not object", "{\"__metadata__\": 5}", 0, {"\"__metadata__\"", "not a JSON object"}},
        {"metadata value not string", "{\"__metadata__\": {\"format\": \"pt\", \"k\": 1}}", 0,
         {"\"__metadata__\"", "'k'", "not a string"}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char name[64], dir[512], path[600];
        snprintf(name, sizeof name, "malformed_%zu", i);
        make_subdir(dir, sizeof dir, name);
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        craft(path, cases[i].header, cases[i].data_len);
        expect_open_fails(cases[i].label, path, AC_ERR_INVALID, cases[i].needles);
    }
}

static void test_malformed_lengths(void **state)
{
    (void)state;
    char path[512];

    tpath(path, sizeof path, "zero_bytes.safetensors");
    write_bytes(path, "", 0);
    expect_open_fails("empty file", path, AC_ERR_INVALID,
                      (const char *[]){"0 bytes", "shorter than the 8-byte", NULL});

    tpath(path, sizeof path, "five_bytes.safetensors");
    write_bytes(path, "\x02\0\0\0\0", 5);
    expect_open_fails("5-byte file", path, AC_ERR_INVALID,
                      (const char *[]){"5 bytes", "shorter than the 8-byte", NULL});

    tpath(path, sizeof path, "long_header.safetensors");
    craft_raw(path, 100, "{}", 10);
    expect_open_fails("header past the end", path, AC_ERR_INVALID,
                      (const char *[]){"header length 100", "exceeds the 12 bytes", NULL});

    tpath(path, sizeof path, "absurd_header.safetensors");
    craft_raw(path, 200000000ull, "{}", 0);
    expect_open_fails("absurd header", path, AC_ERR_INVALID,
                      (const char *[]){"header length 200000000", "limit", NULL});

    tpath(path, sizeof path, "wild_header.safetensors");
    craft_raw(path, UINT64_MAX, "{}", 0);
    expect_open_fails("2^64-1 header", path, AC_ERR_INVALID, (const char *[]){"limit", NULL});

    tpath(path, sizeof path, "does_not_exist.safetensors");
    expect_open_fails("missing file", path, AC_ERR_IO,
                      (const char *[]){"cannot open", "No such file", NULL});

    expect_open_fails("directory", tmpdir, AC_ERR_IO, (const char *[]){"not a regular file", NULL});
}

static void test_valid_crafted(void **state)
{
    (void)state;
    char path[512];
    ac_safetensors *st;

    /* Holes between tensors are allowed, keys in any order, padding after the JSON. */
    tpath(path, sizeof path, "holes.safetensors");
    craft(path,
          "{\"b\":{\"dtype\":\"U8\",\"shape\":[2,2],\"data_offsets\":[12,16]},"
          "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
          "\"z\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[2,2]},"
          "\"__metadata__\":{\"format\":\"pt\"}}     ",
          20);
    assert_int_equal(ac_safetensors_open(path, &st), AC_OK);
    assert_int_equal(ac_safetensors_count(st), 3);
    const ac_tensor_view *b = ac_safetensors_find(st, "b");
    assert_non_null(b);
    assert_int_equal(b->nbytes, 4);
    const unsigned char *bytes = b->data;
    for (int i = 0; i < 4; i++)
        assert_int_equal(bytes[i], 12 + i);
    assert_int_equal(ac_safetensors_find(st, "z")->nbytes, 0);
    assert_string_equal(ac_safetensors_at(st, 0)->name, "a");
    assert_string_equal(ac_safetensors_metadata(st, "format"), "pt");
    ac_safetensors_close(st);

    tpath(path, sizeof path, "empty_header.safetensors");
    craft(path, "{}", 0);
    assert_int_equal(ac_safetensors_open(path, &st), AC_OK);
    assert_int_equal(ac_safetensors_count(st), 0);
    ac_safetensors_close(st);
}

static void test_truncated(void **state)
{
    (void)state;
    const int32_t a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8};
    int64_t shape[1] = {4};
    ac_safetensors_writer *w;
    assert_int_equal(ac_safetensors_writer_init(&w), AC_OK);
    assert_int_equal(ac_safetensors_writer_add(w, "a", AC_DTYPE_I32, 1, shape, a), AC_OK);
    assert_int_equal(ac_safetensors_writer_add(w, "b", AC_DTYPE_I32, 1, shape, b), AC_OK);
    char path[512];
    tpath(path, sizeof path, "whole.safetensors");
    assert_int_equal(ac_safetensors_writer_write(w, path), AC_OK);
    ac_safetensors_writer_free(w);
    size_t len;
    unsigned char *file = read_bytes(path, &len);

    /* Cut in the data: the last tensor ("b": equal element sizes go in name order) is
     * reported outside the data section. */
    tpath(path, sizeof path, "cut_data.safetensors");
    write_bytes(path, file, len - 1);
    expect_open_fails("cut by one byte", path, AC_ERR_INVALID,
                      (const char *[]){"tensor 'b'", "outside the data section", "truncated", NULL});

    tpath(path, sizeof path, "cut_all_data.safetensors");
    write_bytes(path, file, len - 32);
    expect_open_fails("cut all data", path, AC_ERR_INVALID,
                      (const char *[]){"outside the data section (0 bytes", NULL});

    tpath(path, sizeof path, "cut_header.safetensors");
    write_bytes(path, file, 20);
    expect_open_fails("cut in the header", path, AC_ERR_INVALID,
                      (const char *[]){"exceeds the 12 bytes", NULL});

    tpath(path, sizeof path, "cut_length.safetensors");
    write_bytes(path, file, 6);
    expect_open_fails("cut in the length", path, AC_ERR_INVALID,
                      (const char *[]){"6 bytes", NULL});
    free(file);
}

/* ---- sharded sets ---- */

static void write_shard(const char *dir, const char *file, const char *const *names,
                        const float *const *data, size_t n, const char *meta)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    ac_safetensors_writer *w;
    assert_int_equal(ac_safetensors_writer_init(&w), AC_OK);
    int64_t shape[2] = {2, 2};
    for (size_t i = 0; i < n; i++)
        assert_int_equal(ac_safetensors_writer_add(w, names[i], AC_DTYPE_F32, 2, shape, data[i]),
                         AC_OK);
    if (meta)
        assert_int_equal(ac_safetensors_writer_set_metadata(w, "format", meta), AC_OK);
    assert_int_equal(ac_safetensors_writer_write(w, path), AC_OK);
    ac_safetensors_writer_free(w);
}

static void write_text(const char *dir, const char *file, const char *text)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    write_bytes(path, text, strlen(text));
}

static const float W0[4] = {1, 2, 3, 4}, W1[4] = {5, 6, 7, 8}, W2[4] = {9, 10, 11, 12};

static const char *const INDEX_TWO =
    "{\"metadata\": {\"total_size\": 48}, \"weight_map\": {"
    "\"embed\": \"model-00001-of-00002.safetensors\","
    "\"layers.0.w\": \"model-00001-of-00002.safetensors\","
    "\"layers.1.w\": \"model-00002-of-00002.safetensors\"}}";

static void write_two_shards(const char *dir)
{
    write_shard(dir, "model-00001-of-00002.safetensors", (const char *[]){"embed", "layers.0.w"},
                (const float *[]){W0, W1}, 2, "pt");
    write_shard(dir, "model-00002-of-00002.safetensors", (const char *[]){"layers.1.w"},
                (const float *[]){W2}, 1, NULL);
}

static void expect_set_fails(const char *label, const char *dir, ac_status code,
                             const char *const *needles)
{
    ac_safetensors_set *set = (ac_safetensors_set *)0x1;
    ac_clear_error();
    ac_status rc = ac_safetensors_index_open(dir, &set);
    const char *msg = ac_error_message();
    bool ok = rc == code && set == NULL;
    for (size_t i = 0; ok && needles[i]; i++)
        ok = contains(msg, needles[i]);
    if (!ok) {
        print_error("case %s: status %s (want %s), message \"%s\"\n", label, ac_status_name(rc),
                    ac_status_name(code), msg);
        if (rc == AC_OK)
            ac_safetensors_set_close(set);
        fail();
    }
}

static void test_sharded_set(void **state)
{
    (void)state;
    char dir[512];
    make_subdir(dir, sizeof dir, "sharded");
    write_two_shards(dir);
    write_text(dir, "model.safetensors.index.json", INDEX_TWO);

    ac_safetensors_set *set;
    assert_int_equal(ac_safetensors_index_open(dir, &set), AC_OK);
    assert_int_equal(ac_safetensors_set_count(set), 3);
    assert_int_equal(ac_safetensors_set_shard_count(set), 2);
    static const char *names[] = {"embed", "layers.0.w", "layers.1.w"};
    const float *data[] = {W0, W1, W2};
    for (size_t i = 0; i < 3; i++) {
        const ac_tensor_view *v = ac_safetensors_set_find(set, names[i]);
        assert_non_null(v);
        assert_ptr_equal(v, ac_safetensors_set_at(set, i));
        assert_string_equal(v->name, names[i]);
        assert_int_equal(v->dtype, AC_DTYPE_F32);
        assert_int_equal(v->ndim, 2);
        assert_int_equal(v->nbytes, 16);
        assert_memory_equal(v->data, data[i], 16);
    }
    assert_null(ac_safetensors_set_at(set, 3));
    assert_null(ac_safetensors_set_find(set, "layers.2.w"));
    assert_string_equal(ac_safetensors_set_metadata(set, "format"), "pt");
    assert_null(ac_safetensors_set_metadata(set, "absent"));
    assert_true(contains(ac_safetensors_path(ac_safetensors_set_shard(set, 1)), "model-00002"));
    assert_null(ac_safetensors_set_shard(set, 2));
    ac_safetensors_set_close(set);
}

static void test_sharded_errors(void **state)
{
    (void)state;
    char dir[512];

    make_subdir(dir, sizeof dir, "missing_shard");
    write_shard(dir, "model-00001-of-00002.safetensors", (const char *[]){"embed", "layers.0.w"},
                (const float *[]){W0, W1}, 2, NULL);
    write_text(dir, "model.safetensors.index.json", INDEX_TWO);
    expect_set_fails("missing shard", dir, AC_ERR_IO,
                     (const char *[]){"model.safetensors.index.json",
                                      "shard 'model-00002-of-00002.safetensors'", "cannot open",
                                      NULL});

    make_subdir(dir, sizeof dir, "tensor_not_in_shard");
    write_two_shards(dir);
    write_text(dir, "model.safetensors.index.json",
               "{\"weight_map\": {"
               "\"embed\": \"model-00001-of-00002.safetensors\","
               "\"layers.0.w\": \"model-00002-of-00002.safetensors\","
               "\"layers.1.w\": \"model-00002-of-00002.safetensors\"}}");
    expect_set_fails("mapped to the wrong shard", dir, AC_ERR_INVALID,
                     (const char *[]){"model.safetensors.index.json", "tensor 'layers.0.w'",
                                      "model-00002-of-00002.safetensors", "does not contain",
                                      NULL});

    make_subdir(dir, sizeof dir, "unlisted");
    write_two_shards(dir);
    write_text(dir, "model.safetensors.index.json",
               "{\"weight_map\": {"
               "\"embed\": \"model-00001-of-00002.safetensors\","
               "\"layers.1.w\": \"model-00002-of-00002.safetensors\"}}");
    expect_set_fails("shard tensor not in the map", dir, AC_ERR_INVALID,
                     (const char *[]){"model.safetensors.index.json", "'layers.0.w'",
                                      "does not list", NULL});

    make_subdir(dir, sizeof dir, "bad_index_json");
    write_two_shards(dir);
    write_text(dir, "model.safetensors.index.json", "{\"weight_map\": {");
    expect_set_fails("index not JSON", dir, AC_ERR_INVALID,
                     (const char *[]){"model.safetensors.index.json", "not valid JSON", NULL});

    make_subdir(dir, sizeof dir, "no_weight_map");
    write_text(dir, "model.safetensors.index.json", "{\"metadata\": {}}");
    expect_set_fails("no weight_map", dir, AC_ERR_INVALID,
                     (const char *[]){"model.safetensors.index.json", "weight_map", NULL});

    make_subdir(dir, sizeof dir, "weight_map_number");
    write_text(dir, "model.safetensors.index.json", "{\"weight_map\": {\"embed\": 3}}");
    expect_set_fails("weight_map value", dir, AC_ERR_INVALID,
                     (const char *[]){"model.safetensors.index.json", "'embed'", NULL});

    make_subdir(dir, sizeof dir, "escape");
    write_text(dir, "model.safetensors.index.json",
               "{\"weight_map\": {\"embed\": \"../sharded/model-00001-of-00002.safetensors\"}}");
    expect_set_fails("shard outside the directory", dir, AC_ERR_INVALID,
                     (const char *[]){"model.safetensors.index.json", "'embed'", "inside", NULL});

    /* A malformed shard keeps its own message, prefixed by the index. */
    make_subdir(dir, sizeof dir, "bad_shard");
    write_two_shards(dir);
    char shard[600];
    snprintf(shard, sizeof shard, "%s/model-00002-of-00002.safetensors", dir);
    craft(shard, "{\"layers.1.w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,12]}}",
          12);
    write_text(dir, "model.safetensors.index.json", INDEX_TWO);
    expect_set_fails("malformed shard", dir, AC_ERR_INVALID,
                     (const char *[]){"model.safetensors.index.json",
                                      "tensor 'layers.1.w': shape [2, 2] needs 16 bytes", NULL});
}

static void test_directory_fallbacks(void **state)
{
    (void)state;
    char dir[512];
    ac_safetensors_set *set;

    /* model.safetensors wins over other files when there is no index. */
    make_subdir(dir, sizeof dir, "single");
    write_shard(dir, "model.safetensors", (const char *[]){"a", "b"}, (const float *[]){W0, W1},
                2, NULL);
    write_shard(dir, "other.safetensors", (const char *[]){"c"}, (const float *[]){W2}, 1, NULL);
    assert_int_equal(ac_safetensors_index_open(dir, &set), AC_OK);
    assert_int_equal(ac_safetensors_set_count(set), 2);
    assert_memory_equal(ac_safetensors_set_find(set, "b")->data, W1, 16);
    assert_null(ac_safetensors_set_find(set, "c"));
    ac_safetensors_set_close(set);

    /* The only *.safetensors file. */
    make_subdir(dir, sizeof dir, "only_one");
    write_shard(dir, "weights.safetensors", (const char *[]){"c"}, (const float *[]){W2}, 1, NULL);
    write_text(dir, "config.json", "{}");
    assert_int_equal(ac_safetensors_index_open(dir, &set), AC_OK);
    assert_int_equal(ac_safetensors_set_count(set), 1);
    assert_memory_equal(ac_safetensors_set_find(set, "c")->data, W2, 16);
    ac_safetensors_set_close(set);

    make_subdir(dir, sizeof dir, "two_files");
    write_shard(dir, "x.safetensors", (const char *[]){"c"}, (const float *[]){W2}, 1, NULL);
    write_shard(dir, "y.safetensors", (const char *[]){"d"}, (const float *[]){W2}, 1, NULL);
    expect_set_fails("two files", dir, AC_ERR_INVALID,
                     (const char *[]){dir, "2 *.safetensors files", NULL});

    make_subdir(dir, sizeof dir, "no_files");
    write_text(dir, "config.json", "{}");
    expect_set_fails("no files", dir, AC_ERR_INVALID, (const char *[]){dir, "no ", NULL});

    tpath(dir, sizeof dir, "no_such_dir");
    expect_set_fails("missing dir", dir, AC_ERR_IO, (const char *[]){dir, NULL});
}

static void test_write_dir(void **state)
{
    (void)state;
    char dir[512];
    make_subdir(dir, sizeof dir, "write_dir");
    enum { N = 7 };
    static uint16_t data[N][64];
    char names[N][32];
    ac_safetensors_writer *w;
    assert_int_equal(ac_safetensors_writer_init(&w), AC_OK);
    for (int i = 0; i < N; i++) {
        for (int j = 0; j < 64; j++)
            data[i][j] = (uint16_t)(i * 1000 + j);
        snprintf(names[i], sizeof names[i], "layers.%d.w", i);
        int64_t shape[2] = {8, 8};
        assert_int_equal(
            ac_safetensors_writer_add(w, names[i], AC_DTYPE_BF16, 2, shape, data[i]), AC_OK);
    }
    assert_int_equal(ac_safetensors_writer_set_metadata(w, "format", "pt"), AC_OK);

    /* 128 bytes a tensor, at most 300 a shard: two tensors each, four shards. */
    assert_int_equal(ac_safetensors_writer_write_dir(w, dir, 300), AC_OK);
    char path[600];
    snprintf(path, sizeof path, "%s/model-00004-of-00004.safetensors", dir);
    assert_int_equal(access(path, F_OK), 0);
    ac_safetensors_set *set;
    assert_int_equal(ac_safetensors_index_open(dir, &set), AC_OK);
    assert_int_equal(ac_safetensors_set_shard_count(set), 4);
    assert_int_equal(ac_safetensors_set_count(set), N);
    for (int i = 0; i < N; i++) {
        const ac_tensor_view *v = ac_safetensors_set_find(set, names[i]);
        assert_non_null(v);
        assert_int_equal(v->dtype, AC_DTYPE_BF16);
        assert_memory_equal(v->data, data[i], sizeof data[i]);
    }
    assert_string_equal(ac_safetensors_set_metadata(set, "format"), "pt");
    ac_safetensors_set_close(set);

    /* The index lists total_size and every tensor. */
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    size_t len;
    unsigned char *text = read_bytes(path, &len);
    text[len] = '\0';
    cJSON *index = cJSON_Parse((const char *)text);
    assert_non_null(index);
    cJSON *total = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(index, "metadata"), "total_size");
    assert_true(cJSON_IsNumber(total) && total->valuedouble == N * 128.0);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(index, "weight_map")), N);
    cJSON_Delete(index);
    free(text);

    /* Without a limit: one model.safetensors, and the stale index is gone. */
    assert_int_equal(ac_safetensors_writer_write_dir(w, dir, 0), AC_OK);
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(ac_safetensors_index_open(dir, &set), AC_OK);
    assert_int_equal(ac_safetensors_set_shard_count(set), 1);
    assert_true(contains(ac_safetensors_path(ac_safetensors_set_shard(set, 0)),
                         "/model.safetensors"));
    for (int i = 0; i < N; i++)
        assert_memory_equal(ac_safetensors_set_find(set, names[i])->data, data[i], sizeof data[i]);
    ac_safetensors_set_close(set);

    /* Sharded again: the stale model.safetensors is removed. */
    assert_int_equal(ac_safetensors_writer_write_dir(w, dir, 128), AC_OK);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(ac_safetensors_index_open(dir, &set), AC_OK);
    assert_int_equal(ac_safetensors_set_shard_count(set), N);
    ac_safetensors_set_close(set);
    ac_safetensors_writer_free(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bf16_constants),
        cmocka_unit_test(test_f16_constants),
        cmocka_unit_test(test_rounding_sweep),
        cmocka_unit_test(test_convert_arrays),
        cmocka_unit_test(test_dtype_names),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_empty_file),
        cmocka_unit_test(test_many_tensors),
        cmocka_unit_test(test_writer_errors),
        cmocka_unit_test(test_writer_never_clobbers),
        cmocka_unit_test(test_malformed_headers),
        cmocka_unit_test(test_malformed_lengths),
        cmocka_unit_test(test_valid_crafted),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_sharded_set),
        cmocka_unit_test(test_sharded_errors),
        cmocka_unit_test(test_directory_fallbacks),
        cmocka_unit_test(test_write_dir),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
