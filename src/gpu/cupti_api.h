/* cupti_api.h: the CUPTI functions loupe calls, as a table of pointers: filled by dlopen of
 * libcupti.so (cupti.c), or by a test with a fake (loupe__cupti_set_api). The signatures are
 * CUDA 13.0's (cupti_activity.h, cupti_callbacks.h, cupti_result.h, cupti_version.h), with
 * opaque handles as void * and CUptiResult / enums as int (both are C enums: int-sized).
 */
#ifndef LOUPE_GPU_CUPTI_API_H
#define LOUPE_GPU_CUPTI_API_H

#include <stddef.h>
#include <stdint.h>

/* CUptiResult values used (cupti_result.h, CUDA 13.0). */
#define LOUPE__CUPTI_SUCCESS 0
#define LOUPE__CUPTI_ERROR_MAX_LIMIT_REACHED 12
#define LOUPE__CUPTI_ERROR_INVALID_KIND 21
#define LOUPE__CUPTI_ERROR_MULTIPLE_SUBSCRIBERS 39 /* MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED */
/* CUpti_ActivityKind values (cupti_activity.h). */
#define LOUPE__CUPTI_KIND_MEMCPY 1
#define LOUPE__CUPTI_KIND_MEMSET 2
#define LOUPE__CUPTI_KIND_RUNTIME 5
#define LOUPE__CUPTI_KIND_CONCURRENT_KERNEL 10
/* The first CUPTI API version whose records have the layout read by cupti.c (CUDA 13.0:
 * CUpti_ActivityKernel10, CUpti_ActivityMemcpy6, CUpti_ActivityMemset4, CUpti_ActivityAPI). */
#define LOUPE__CUPTI_MIN_VERSION 130000u

typedef void (*loupe__cupti_req_fn)(uint8_t **buffer, size_t *size, size_t *max_records);
typedef void (*loupe__cupti_done_fn)(void *context, uint32_t stream, uint8_t *buffer, size_t size,
                                     size_t valid_size);

typedef struct loupe__cupti_api {
    int (*get_version)(uint32_t *version);
    int (*subscribe)(void **subscriber, void *callback, void *userdata);
    int (*unsubscribe)(void *subscriber);
    int (*register_timestamp_callback)(uint64_t (*fn)(void));
    int (*register_callbacks)(loupe__cupti_req_fn req, loupe__cupti_done_fn done);
    int (*enable)(int kind);
    int (*disable)(int kind);
    int (*flush_all)(uint32_t flag);
    int (*get_next_record)(uint8_t *buffer, size_t valid_size, void **record);
    int (*get_num_dropped_records)(void *context, uint32_t stream, size_t *dropped);
    int (*get_result_string)(int result, const char **str);
    int (*finalize)(void);
} loupe__cupti_api;

/* Tests: use this table instead of dlopen (NULL: back to dlopen). The table must outlive the
 * sessions that use it. Not thread-safe: call while no session runs. */
void loupe__cupti_set_api(const loupe__cupti_api *api);

#endif
