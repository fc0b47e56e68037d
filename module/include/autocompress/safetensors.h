/* Safetensors checkpoints: a memory-mapped reader, a writer, and sharded sets
 * (model.safetensors.index.json).
 *
 * File format: an 8-byte little-endian header length N, N bytes of JSON (an object
 * mapping tensor names to {"dtype", "shape", "data_offsets": [begin, end]}, plus an
 * optional "__metadata__" object of string values), then the data section; offsets
 * are relative to the start of the data section. Tensor data is little-endian.
 *
 * An opened file is immutable, so any number of threads may look tensors up and read
 * their data concurrently. Views and the strings they point to stay valid until the
 * file (or set) is closed. The file must not be truncated while it is mapped. */
#ifndef AUTOCOMPRESS_SAFETENSORS_H
#define AUTOCOMPRESS_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "autocompress/dtype.h"
#include "autocompress/status.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { AC_TENSOR_MAX_DIMS = 8 };

/* Headers longer than this are rejected as corrupt. */
#define AC_SAFETENSORS_MAX_HEADER ((uint64_t)100 * 1000 * 1000)

typedef struct {
    const char *name;
    ac_dtype dtype;
    int ndim;                          /* 0 for a scalar */
    int64_t shape[AC_TENSOR_MAX_DIMS]; /* shape[ndim..] are 0 */
    const void *data;                  /* into the mapping; aligned to the element size only
                                          if the writer aligned it (ac_safetensors_writer
                                          does); use memcpy or ac_convert_to_f32 otherwise */
    size_t nbytes;                     /* product(shape) * ac_dtype_size(dtype) */
} ac_tensor_view;

/* Number of elements (1 for a scalar, 0 if any dimension is 0). */
int64_t ac_tensor_view_numel(const ac_tensor_view *view);

/* ---- reading one file ---- */

typedef struct ac_safetensors ac_safetensors;

/* Opens and validates `path`. AC_ERR_IO when it cannot be opened or mapped;
 * AC_ERR_INVALID, with a message naming the file and the tensor or field, when the
 * header is malformed (bad JSON, missing or mistyped fields, unknown dtype, negative
 * dims, more than AC_TENSOR_MAX_DIMS dims, offsets outside the data section, a size
 * that does not match the shape, overlapping tensors, duplicate names). Holes between
 * tensors are allowed. */
ac_status ac_safetensors_open(const char *path, ac_safetensors **out);
void ac_safetensors_close(ac_safetensors *st);

/* The path the file was opened with. */
const char *ac_safetensors_path(const ac_safetensors *st);

size_t ac_safetensors_count(const ac_safetensors *st);
/* Tensors in name order (strcmp); NULL when i >= count. */
const ac_tensor_view *ac_safetensors_at(const ac_safetensors *st, size_t i);
/* Binary search by name; NULL when absent. */
const ac_tensor_view *ac_safetensors_find(const ac_safetensors *st, const char *name);

/* The "__metadata__" value for `key`, NULL when absent. */
const char *ac_safetensors_metadata(const ac_safetensors *st, const char *key);
size_t ac_safetensors_metadata_count(const ac_safetensors *st);
/* The i-th metadata entry in key order; AC_ERR_INVALID when i >= count. */
ac_status ac_safetensors_metadata_at(const ac_safetensors *st, size_t i, const char **key,
                                     const char **value);

/* ---- writing ---- */

typedef struct ac_safetensors_writer ac_safetensors_writer;

ac_status ac_safetensors_writer_init(ac_safetensors_writer **out);
void ac_safetensors_writer_free(ac_safetensors_writer *w);

/* Adds a tensor. The name and shape are copied; `data` (product(shape) elements of
 * `dtype`, little-endian) is not: the caller keeps it alive and unchanged until the
 * last write. Fails with AC_ERR_INVALID on a duplicate or empty name, the reserved
 * name "__metadata__", ndim outside [0, AC_TENSOR_MAX_DIMS], a negative dimension, an
 * invalid dtype, or NULL data for a non-empty tensor. */
ac_status ac_safetensors_writer_add(ac_safetensors_writer *w, const char *name, ac_dtype dtype,
                                    int ndim, const int64_t *shape, const void *data);

/* Adds a view read from another file (name, dtype, shape and data pointer). */
ac_status ac_safetensors_writer_add_view(ac_safetensors_writer *w, const ac_tensor_view *view);

/* Sets a "__metadata__" entry (both strings are copied; a second call for the same key
 * replaces the value). */
ac_status ac_safetensors_writer_set_metadata(ac_safetensors_writer *w, const char *key,
                                             const char *value);

size_t ac_safetensors_writer_count(const ac_safetensors_writer *w);

/* Writes one file: the header (sorted keys, padded with spaces so the data section
 * starts at a multiple of 8) then the tensors back to back with no holes, largest
 * element size first, so every tensor is aligned to its element size. The bytes go to
 * "PATH.tmp", which is flushed to disk and then renamed over PATH: a crash leaves
 * either the old file or the new one, never a partial one. The writer can be written
 * again (to another path) afterwards. */
ac_status ac_safetensors_writer_write(const ac_safetensors_writer *w, const char *path);

/* Writes a Hugging Face checkpoint directory `dir` (which must exist): one
 * model.safetensors when all tensors fit in `max_shard_bytes` (0 means no limit),
 * otherwise shards model-0000K-of-0000N.safetensors, filled in name order, plus
 * model.safetensors.index.json (written last). Each shard carries the metadata. The
 * entry point of the other layout (a stale index, or a stale model.safetensors) is
 * removed so readers cannot pick up an old checkpoint. A tensor larger than the limit
 * gets a shard of its own. */
ac_status ac_safetensors_writer_write_dir(const ac_safetensors_writer *w, const char *dir,
                                          uint64_t max_shard_bytes);

/* ---- checkpoint directories (one file or shards + index) ---- */

typedef struct ac_safetensors_set ac_safetensors_set;

/* Opens a checkpoint directory: DIR/model.safetensors.index.json when present (every
 * shard its "weight_map" names is opened once; a missing shard, a mapped tensor absent
 * from its shard, or a shard tensor the map does not list is an error naming the
 * index), else DIR/model.safetensors, else the only *.safetensors file in DIR. No
 * candidate, or several *.safetensors files without an index, is an error naming DIR. */
ac_status ac_safetensors_index_open(const char *dir, ac_safetensors_set **out);
void ac_safetensors_set_close(ac_safetensors_set *set);

size_t ac_safetensors_set_count(const ac_safetensors_set *set);
/* Tensors across all shards in name order; NULL when i >= count. */
const ac_tensor_view *ac_safetensors_set_at(const ac_safetensors_set *set, size_t i);
const ac_tensor_view *ac_safetensors_set_find(const ac_safetensors_set *set, const char *name);

size_t ac_safetensors_set_shard_count(const ac_safetensors_set *set);
/* The i-th shard (in file name order); NULL when i >= shard count. */
const ac_safetensors *ac_safetensors_set_shard(const ac_safetensors_set *set, size_t i);

/* A "__metadata__" value from the first shard (in file name order) that has `key`. */
const char *ac_safetensors_set_metadata(const ac_safetensors_set *set, const char *key);

#ifdef __cplusplus
}
#endif
#endif
