/* Helpers shared by the contract reader's files; not part of the public API. */
#ifndef AC_CONTRACT_INTERNAL_H
#define AC_CONTRACT_INTERNAL_H

#include "autocompress/status.h"

/* Scans libconfig text for integer literals that libconfig 1.5 would silently wrap to
 * 32 bits (no L suffix, magnitude beyond INT32). Comments and strings are skipped.
 * Fails with "FILE:LINE: ..." naming the first such literal. */
ac_status ac_contract_check_int_literals(const char *text, const char *file);

#endif
