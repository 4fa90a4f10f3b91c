/* A process that does nothing until it is stopped (SIGINT or SIGTERM): the pod
 * sandbox's process (it holds the pod's namespaces open and reaps the children
 * it inherits) and the sleeper workload. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int signal) {
    (void)signal;
    _exit(0);
}

static void reap(int signal) {
    (void)signal;
    while (waitpid(-1, 0, WNOHANG) > 0) {
    }
}

int main(void) {
    struct sigaction on_stop = {.sa_handler = stop};
    struct sigaction on_child = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP | SA_RESTART};
    sigaction(SIGINT, &on_stop, 0);
    sigaction(SIGTERM, &on_stop, 0);
    sigaction(SIGCHLD, &on_child, 0);
    for (;;)
        pause();
}
