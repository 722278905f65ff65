/* plugin.c: a shared library that records a zone, loaded and unloaded by tests/test_edges.c. */
#include <loupe/loupe.h>

int plugin_work(int x);

int plugin_work(int x) {
    LOUPE_ZONE("plugin_zone");
    LOUPE_COUNTER_I64("plugin_counter", x);
    return x + 1;
}
