/* Reading back a run's loss.csv (step,tokens,lr,loss,...): the mean of its last rows. */
#include "autocompress/train.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ac_status ac_train_tail_loss(const char *loss_csv, int last, double *mean, int *steps)
{
    *mean = 0;
    *steps = 0;
    if (last < 1)
        return ac_fail(AC_ERR_INVALID, "%s: the tail must hold at least one step, got %d", loss_csv, last);
    FILE *f = fopen(loss_csv, "r");
    if (!f)
        return ac_fail(AC_ERR_IO, "%s: cannot open: %s", loss_csv, strerror(errno));
    double *ring = calloc((size_t)last, sizeof *ring);
    if (!ring) {
        fclose(f);
        return ac_fail(AC_ERR_NOMEM, "%s: out of memory", loss_csv);
    }
    char line[512];
    int rows = 0, number = 0;
    ac_status st = AC_OK;
    while (st == AC_OK && fgets(line, sizeof line, f)) {
        number++;
        if (number == 1 || line[0] == '\n')
            continue; /* the header */
        int step;
        long long tokens;
        double lr, loss;
        if (sscanf(line, "%d,%lld,%lf,%lf", &step, &tokens, &lr, &loss) != 4)
            st = ac_fail(AC_ERR_INVALID, "%s:%d: not a loss row (step,tokens,lr,loss,...)", loss_csv, number);
        else
            ring[rows++ % last] = loss;
    }
    fclose(f);
    if (st == AC_OK && rows == 0)
        st = ac_fail(AC_ERR_INVALID, "%s: no steps logged", loss_csv);
    int n = rows < last ? rows : last;
    for (int i = 0; st == AC_OK && i < n; i++)
        *mean += ring[i] / n;
    if (st == AC_OK)
        *steps = n;
    free(ring);
    return st;
}
