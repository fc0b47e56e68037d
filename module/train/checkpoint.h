/* Resumable training state on disk. */
#ifndef AC_TRAIN_CHECKPOINT_H
#define AC_TRAIN_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "autocompress/model.h"
#include "autocompress/optim.h"

typedef struct {
    int step;         /* optimizer steps done */
    int64_t tokens;   /* training tokens seen */
    char run[512];    /* the run's settings, so a resume with other settings is refused */
} ac_train_state;

ac_status ac_checkpoint_save(const char *dir, const ac_model *model, ac_adamw *opt, const ac_train_state *state);
/* The complete checkpoint at DIR (or DIR.old when a save was interrupted) into `found`. */
ac_status ac_checkpoint_find(const char *dir, char *found, size_t size);
/* Loads the loop state and the model (allocating it). */
ac_status ac_checkpoint_load(const char *dir, ac_model **model, ac_train_state *state);
/* Loads the moments into an optimizer made for that model. */
ac_status ac_checkpoint_load_optimizer(const char *dir, const ac_model *model, ac_adamw *opt);

#endif
