/* The baseline a language model must beat: a bigram model with add-alpha smoothing
 * counted on train.bin, its cross-entropy (nats/token) measured on val.bin.
 *   bench_bigram DATA_DIR [ALPHA...]        (default alphas 0.01 0.03 0.1 0.3 1) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "autocompress/tokens.h"

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_bigram DATA_DIR [ALPHA...]\n");
        return 2;
    }
    char path[4096];
    ac_tokens *train, *val;
    snprintf(path, sizeof path, "%s/train.bin", argv[1]);
    if (ac_tokens_open(path, &train) != AC_OK) {
        fprintf(stderr, "%s\n", ac_error_message());
        return 1;
    }
    snprintf(path, sizeof path, "%s/val.bin", argv[1]);
    if (ac_tokens_open(path, &val) != AC_OK) {
        fprintf(stderr, "%s\n", ac_error_message());
        return 1;
    }
    size_t V = ac_tokens_vocab_size(train);
    uint32_t *pair = calloc(V * V, sizeof *pair), *row = calloc(V, sizeof *row);
    if (!pair || !row)
        return 1;
    for (uint64_t i = 0; i + 1 < ac_tokens_count(train); i++) {
        int32_t a = ac_tokens_get(train, i), b = ac_tokens_get(train, i + 1);
        pair[(size_t)a * V + b]++;
        row[a]++;
    }
    double default_alphas[] = {0.01, 0.03, 0.1, 0.3, 1.0};
    int n_alpha = argc > 2 ? argc - 2 : 5;
    for (int k = 0; k < n_alpha; k++) {
        double alpha = argc > 2 ? atof(argv[k + 2]) : default_alphas[k];
        double nll = 0.0;
        uint64_t n = ac_tokens_count(val) - 1;
        for (uint64_t i = 0; i < n; i++) {
            int32_t a = ac_tokens_get(val, i), b = ac_tokens_get(val, i + 1);
            nll -= log((pair[(size_t)a * V + b] + alpha) / (row[a] + alpha * (double)V));
        }
        printf("{\"alpha\": %g, \"val_tokens\": %llu, \"bigram_val_loss\": %.4f}\n", alpha, (unsigned long long)n, nll / (double)n);
    }
    free(pair);
    free(row);
    ac_tokens_close(train);
    ac_tokens_close(val);
    return 0;
}
