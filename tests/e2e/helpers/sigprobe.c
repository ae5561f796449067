// SPDX-License-Identifier: Apache-2.0
// sigprobe: reports the signals it receives, one "ROLE SIGNUM" line each, to the FIFO named by
// $EVENTS, so a test can see exactly who in a tree got which signal, and in which order.
//
//   sigprobe ROLE [--fork ROLE2] [--default] [--go PATH] [--stay]
//
// Each process first reports "ROLE ready PID". HUP, INT, QUIT, USR1, USR2, TERM, ALRM, WINCH and
// the fault signals a kill() can send (ILL, TRAP, BUS, FPE, SEGV, SYS) are taken with sigwaitinfo
// (lowest number first when several are pending); INT, QUIT and TERM end the process with status
// 0 after their line.
//   --stay        INT, QUIT and TERM are reported and do not end the probe; ALRM does
//   --fork ROLE2  fork a second probe in the same process group first (reports as ROLE2)
//   --default     catch nothing: every signal takes its default action (for ^C and ^Z tests)
//   --go PATH     (with --default) read one line from PATH, report "ROLE done" and exit 0
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char* events_path;

static void report(const char* line) {
    int fd = open(events_path, O_WRONLY);
    if (fd < 0) {
        perror("sigprobe: open $EVENTS");
        exit(2);
    }
    size_t len = strlen(line);
    if (write(fd, line, len) != (ssize_t)len) {
        perror("sigprobe: write $EVENTS");
        exit(2);
    }
    close(fd);
}

static int stay;

static int run(const char* role, int catch_signals, const char* go) {
    static const int kSignals[] = {SIGHUP,   SIGINT, SIGQUIT, SIGUSR1, SIGUSR2, SIGTERM, SIGALRM,
                                   SIGWINCH, SIGILL, SIGTRAP, SIGBUS,  SIGFPE,  SIGSEGV, SIGSYS};
    sigset_t set;
    sigemptyset(&set);
    for (size_t i = 0; i < sizeof kSignals / sizeof kSignals[0]; ++i) sigaddset(&set, kSignals[i]);
    if (catch_signals && sigprocmask(SIG_BLOCK, &set, NULL) != 0) {
        perror("sigprobe: sigprocmask");
        return 2;
    }
    char line[128];
    snprintf(line, sizeof line, "%s ready %d\n", role, (int)getpid());
    report(line);
    if (!catch_signals) {
        if (!go) {
            for (;;) pause();
        }
        // Blocks until the test writes a line: a stopped probe cannot get past this.
        int fd = open(go, O_RDONLY);
        char c;
        if (fd < 0 || read(fd, &c, 1) != 1) {
            perror("sigprobe: read --go");
            return 2;
        }
        snprintf(line, sizeof line, "%s done\n", role);
        report(line);
        return 0;
    }
    for (;;) {
        int sig = sigwaitinfo(&set, NULL);
        if (sig < 0) {
            if (errno == EINTR) continue;
            perror("sigprobe: sigwaitinfo");
            return 2;
        }
        snprintf(line, sizeof line, "%s %d\n", role, sig);
        report(line);
        if (stay ? sig == SIGALRM : (sig == SIGINT || sig == SIGQUIT || sig == SIGTERM)) return 0;
    }
}

int main(int argc, char** argv) {
    events_path = getenv("EVENTS");
    if (argc < 2 || !events_path) {
        fprintf(stderr,
                "usage: EVENTS=FIFO sigprobe ROLE [--fork ROLE2] [--default] [--go PATH]\n");
        return 2;
    }
    const char* role = argv[1];
    const char* fork_role = NULL;
    const char* go = NULL;
    int catch_signals = 1;
    for (int i = 2; i < argc; ++i) {
        if (strcmp(argv[i], "--fork") == 0 && i + 1 < argc) {
            fork_role = argv[++i];
        } else if (strcmp(argv[i], "--stay") == 0) {
            stay = 1;
        } else if (strcmp(argv[i], "--default") == 0) {
            catch_signals = 0;
        } else if (strcmp(argv[i], "--go") == 0 && i + 1 < argc) {
            go = argv[++i];
        } else {
            fprintf(stderr, "sigprobe: unknown argument '%s'\n", argv[i]);
            return 2;
        }
    }
    if (fork_role) {
        pid_t pid = fork();
        if (pid < 0) {
            perror("sigprobe: fork");
            return 2;
        }
        if (pid == 0) return run(fork_role, catch_signals, NULL);
    }
    return run(role, catch_signals, go);
}
