/* spool_probe.c: a program that records argv[1] zones named "spool_zone" in bursts of argv[2],
 * sleeping argv[3] microseconds after each, for tests/record_spool.sh: under
 * `loupe record --spool` with a small --session-events, the pauses let the keeper spool the
 * chunks each burst filled, so every zone is kept although they are many times the capacity.
 * argv[4] = "die": SIGKILL after the last zone (the recovery of a program that spooled). */
#include <loupe/loupe.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

int main(int argc, char **argv) {
    if (argc < 4) {
        return 2;
    }
    long zones = atol(argv[1]), burst = atol(argv[2]), pause_us = atol(argv[3]);
    if (zones < 0 || burst < 1 || pause_us < 0) {
        return 2;
    }
    for (long i = 0; i < zones; i += burst) {
        for (long k = 0; k < burst && i + k < zones; k++) {
            LOUPE_ZONE("spool_zone");
        }
        struct timespec d = {pause_us / 1000000, (pause_us % 1000000) * 1000};
        nanosleep(&d, NULL);
    }
    if (argc > 4 && strcmp(argv[4], "die") == 0) {
        kill(getpid(), SIGKILL);
    }
    return 0;
}
