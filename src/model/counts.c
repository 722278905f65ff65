/* counts.c: loupe_model_counts_of(), the figures a recording's report gives per process (loupe
 * record's last lines): the same numbers from a model read back and from the counts file the
 * run directory's writer leaves beside a process's trace (src/export/rundir.c). */
#include <loupe/model.h>
#include <loupe/trace.h>

#include <stdlib.h>
#include <string.h>

static uint64_t meta_u64(const loupe_model *m, const char *key) {
    uint64_t v = 0;
    for (size_t i = 0; i < m->metadata_count; i++) {
        if (strcmp(m->metadata[i].key, key) == 0) {
            v += strtoull(m->metadata[i].value, NULL, 10);
        }
    }
    return v;
}

void loupe_model_counts_of(const loupe_model *m, loupe_model_counts *out) {
    if (m == NULL || out == NULL) {
        return;
    }
    memset(out, 0, sizeof *out);
    out->events_recorded = loupe_model_events_recorded(m);
    out->events_dropped = loupe_model_events_dropped(m);
    out->samples = m->sample_count;
    out->samples_lost = m->samples_lost;
    out->events_reentered = meta_u64(m, "loupe_events_reentered");
    out->shm_lost = meta_u64(m, "loupe_recover_shm_lost");
    out->functions_filtered = meta_u64(m, "loupe_functions_filtered");
    /* a thread with samples and no zone recorded too (a program without annotations: 0.4 said
     * "0 threads" for it) */
    unsigned char *sampled = m->sample_count != 0 ? calloc(m->thread_count + 1, 1) : NULL;
    for (size_t i = 0; sampled != NULL && i < m->sample_count; i++) {
        if (m->samples[i].thread < m->thread_count) {
            sampled[m->samples[i].thread] = 1;
        }
    }
    for (size_t i = 0; i < m->thread_count; i++) {
        const loupe_model_thread *t = &m->threads[i];
        uint64_t c = t->capacity_needed;
        out->gpu_lost += t->kind == LOUPE_TRACK_GPU ? t->events_dropped : 0;
        out->capacity_needed = c > out->capacity_needed ? c : out->capacity_needed;
        out->session_needed +=
            (c + LOUPE_CHUNK_EVENTS - 1) / LOUPE_CHUNK_EVENTS * LOUPE_CHUNK_EVENTS;
        if (t->kind == LOUPE_TRACK_THREAD && t->sibling == 0 &&
            strncmp(t->name ? t->name : "", "loupe-", 6) != 0 &&
            (t->events_recorded != 0 || t->slice_count != 0 || t->instant_count != 0 ||
             (sampled != NULL && sampled[i]))) {
            out->threads++;
        }
    }
    free(sampled);
}
