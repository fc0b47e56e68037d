/* Checks of a command's inputs before its first long stage: each names the flag and the
 * path ("--data /x: no such directory"), so a run that would fail after twenty minutes
 * of profiling fails at once instead. AC_ERR_IO when an input is missing, unreadable or
 * cannot be written; AC_ERR_INVALID when it is there but malformed. */
#ifndef AUTOCOMPRESS_INPUTS_H
#define AUTOCOMPRESS_INPUTS_H

#include "autocompress/arch.h"
#include "autocompress/contract.h"
#include "autocompress/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A regular file this process can read. */
ac_status ac_input_file(const char *flag, const char *path);
/* A directory that exists and can be written, or that can be created (its nearest
 * existing ancestor is a writable directory); nothing is created. */
ac_status ac_input_out_dir(const char *flag, const char *dir);
/* A file that can be written: not a directory, in a directory that exists and can be
 * written. */
ac_status ac_input_out_file(const char *flag, const char *path);
/* A device (--device, a contract's) this build has and this machine can use; NULL: the
 * CPU. AC_ERR_UNSUPPORTED naming it otherwise. */
ac_status ac_input_device(const char *flag, const char *device);

/* A checkpoint directory: DIR/config.json parses and, when `weights` is set, its
 * safetensors open. The architecture goes to *arch when arch is not NULL (free it with
 * ac_arch_free). */
ac_status ac_input_model(const char *flag, const char *dir, int weights, ac_arch *arch);
/* A contract that parses and validates (into *contract when not NULL). */
ac_status ac_input_contract(const char *flag, const char *path, ac_contract *contract);
/* Cost tables that parse and fit the parent and the contract (either may be NULL: not
 * checked against it), measured here for the contract unless `allow_foreign`
 * (ac_cost_tables_check_machine). */
ac_status ac_input_tables(const char *flag, const char *path, const ac_arch *parent, const ac_contract *contract,
                          int allow_foreign);

/* Which shards of a token directory a command reads. */
enum { AC_SHARD_TRAIN = 1, AC_SHARD_VAL = 2 };
/* DIR holds the `shards` as valid ACTOKENS files whose vocabulary fits `vocab` (the
 * model's; 0: not checked). */
ac_status ac_input_shards(const char *flag, const char *dir, int shards, int vocab);

#ifdef __cplusplus
}
#endif

#endif
