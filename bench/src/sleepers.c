// Sleeping processes for the teardown case: `sleepers N FIFO`, run as the child of an init that is
// PID 1 of its own PID namespace. Forks N-1 children that wait in pause() (SIGTERM's default action
// ends them), all in this process group, writes 'R' to FIFO once every fork returned, and waits in
// pause() itself: N processes in all, each ended by SIGTERM alone. The harness (bench/teardown.py)
// measures from its SIGTERM to the init until the namespace is empty.
#include "common.h"

int main(int argc, char** argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: sleepers N FIFO\n");
        return 2;
    }
    long n = strtol(argv[1], NULL, 10);
    for (long i = 1; i < n; ++i) {
        pid_t pid = fork();
        if (pid < 0) die("fork");
        if (pid == 0) {
            for (;;) pause();
        }
    }
    int fd = open(argv[2], O_WRONLY | O_CLOEXEC);
    if (fd < 0) die("open FIFO");
    if (write_all(fd, "R", 1) != 0) die("write FIFO");
    close(fd);
    for (;;) pause();
}
