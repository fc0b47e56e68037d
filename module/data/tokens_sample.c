/* Batches from token shards: random windows that are a pure function of (seed, step,
 * row) for training, and consecutive windows for evaluation (see tokens.h). */
#include "autocompress/tokens.h"

#include "util/rng.h"

uint64_t ac_tokens_window_start(uint64_t count, int seq_len, uint64_t seed, uint64_t step, int b)
{
    uint64_t span = count - (uint64_t)seq_len; /* starts 0 .. count - seq_len - 1 */
    uint64_t h = ac_rng_hash(seed ^ 0x6a09e667f3bcc908ULL);
    h = ac_rng_hash(h ^ step);
    h = ac_rng_hash(h ^ (uint64_t)(uint32_t)b);
    /* the high bits of the 128-bit product: unbiased enough and no division */
    __extension__ unsigned __int128 wide = (unsigned __int128)h * span;
    return (uint64_t)(wide >> 64);
}

ac_status ac_tokens_sample_batch(const ac_tokens *t, uint64_t seed, uint64_t step, int batch, int seq_len,
                                 int32_t *out, uint64_t *starts)
{
    uint64_t count = ac_tokens_count(t);
    if (batch <= 0 || seq_len <= 0)
        return ac_fail(AC_ERR_INVALID, "sample batch: batch %d and seq_len %d must be positive", batch, seq_len);
    if (count <= (uint64_t)seq_len)
        return ac_fail(AC_ERR_INVALID, "%s: %llu tokens cannot hold a window of seq_len + 1 = %d", ac_tokens_path(t),
                       (unsigned long long)count, seq_len + 1);
    for (int b = 0; b < batch; b++) {
        uint64_t s = ac_tokens_window_start(count, seq_len, seed, step, b);
        if (starts)
            starts[b] = s;
        ac_status st = ac_tokens_copy(t, s, (size_t)seq_len + 1, out + (size_t)b * ((size_t)seq_len + 1));
        if (st != AC_OK)
            return st;
    }
    return AC_OK;
}

uint64_t ac_tokens_window_count(const ac_tokens *t, int seq_len)
{
    uint64_t count = ac_tokens_count(t);
    if (seq_len <= 0 || count < 2)
        return 0;
    return (count - 1) / (uint64_t)seq_len;
}

void ac_tokens_iter_init(ac_tokens_iter *it, const ac_tokens *t, int seq_len)
{
    it->tokens = t;
    it->seq_len = seq_len;
    it->next = 0;
    it->total = ac_tokens_window_count(t, seq_len);
}

int ac_tokens_iter_next(ac_tokens_iter *it, int batch, int32_t *out)
{
    int rows = 0;
    size_t width = (size_t)it->seq_len + 1;
    while (rows < batch && it->next < it->total) {
        if (ac_tokens_copy(it->tokens, it->next * (uint64_t)it->seq_len, width, out + (size_t)rows * width) != AC_OK)
            break; /* cannot happen: total keeps every window inside the shard */
        it->next++;
        rows++;
    }
    return rows;
}
