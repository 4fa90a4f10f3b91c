/* A workload that uses memory: `hog MIB [STEP_MIB]` allocates MIB mebibytes,
 * writing to every page so the kernel charges them to its cgroup, STEP_MIB at
 * a time (default: all at once) with a second between steps, says on stdout
 * how much it holds after each step, then sleeps until it is stopped. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MIB (1024L * 1024L)

static void stop(int signal) {
    (void)signal;
    _exit(0);
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: hog MIB [STEP_MIB]\n");
        return 2;
    }
    long total = atol(argv[1]);
    long step = argc == 3 ? atol(argv[2]) : total;
    if (total <= 0 || step <= 0) {
        fprintf(stderr, "hog: MIB and STEP_MIB are positive numbers of mebibytes\n");
        return 2;
    }
    struct sigaction on_stop = {.sa_handler = stop};
    sigaction(SIGTERM, &on_stop, 0);
    sigaction(SIGINT, &on_stop, 0);
    for (long held = 0; held < total;) {
        long now = total - held < step ? total - held : step;
        char *block = malloc(now * MIB);
        if (!block) {
            fprintf(stderr, "hog: could not allocate %ld MiB more after %ld MiB\n", now, held);
            return 1;
        }
        /* Every page written: the memory is resident, not only reserved. */
        memset(block, 1, now * MIB);
        held += now;
        printf("holding %ld MiB\n", held);
        fflush(stdout);
        if (held < total)
            sleep(1);
    }
    for (;;)
        pause();
}
