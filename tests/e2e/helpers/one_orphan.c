// SPDX-License-Identifier: Apache-2.0
/* one_orphan: makes one orphan and exits 7 once the nearest subreaper (or PID 1) has reaped it.
 *
 * The orphan cannot be reaped by its own parent: it blocks on a pipe whose only write end its
 * parent holds, so it exits (3) only once that parent is exiting, and a parent in the kernel's
 * exit path reaps nothing; the zombie goes to the subreaper. (A shell makes a poor orphan maker:
 * dash reaps a background child that exits before the shell does.) */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void) {
    int gate[2], report[2];
    if (pipe(gate) != 0 || pipe(report) != 0) {
        perror("pipe");
        return 1;
    }
    pid_t child = fork();
    if (child < 0) {
        perror("fork");
        return 1;
    }
    if (child == 0) {
        close(report[0]);
        pid_t orphan = fork();
        if (orphan == 0) {
            close(gate[1]);
            close(report[1]);
            char c;
            while (read(gate[0], &c, 1) < 0 && errno == EINTR) {
            }
            _exit(3);
        }
        (void)!write(report[1], &orphan, sizeof orphan);
        _exit(0); /* closes gate[1]: the orphan's read returns 0 */
    }
    close(gate[0]);
    close(gate[1]);
    close(report[1]);
    pid_t orphan = 0;
    if (read(report[0], &orphan, sizeof orphan) != (ssize_t)sizeof orphan) {
        fprintf(stderr, "one_orphan: no orphan pid\n");
        return 1;
    }
    while (waitpid(child, NULL, 0) < 0 && errno == EINTR) {
    }
    /* kill(pid, 0) succeeds on a zombie: it fails once the subreaper has reaped the orphan. */
    while (kill(orphan, 0) == 0) {
        usleep(1000);
    }
    return 7;
}
