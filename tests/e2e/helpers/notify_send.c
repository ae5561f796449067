// SPDX-License-Identifier: Apache-2.0
// notify_send MESSAGE [COMMAND [ARGS...]]: sends MESSAGE as one datagram to $NOTIFY_SOCKET (a path
// or an @abstract name), then execs COMMAND if one is given, else exits 0. A stand-in for
// systemd-notify, which insists on talking as the service's main pid.
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int main(int argc, char** argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: notify_send MESSAGE [COMMAND [ARGS...]]\n");
        return 2;
    }
    const char* target = getenv("NOTIFY_SOCKET");
    if (!target || !*target) {
        fprintf(stderr, "notify_send: NOTIFY_SOCKET is not set\n");
        return 1;
    }
    struct sockaddr_un addr;
    memset(&addr, 0, sizeof addr);
    addr.sun_family = AF_UNIX;
    size_t len = strlen(target);
    if (len >= sizeof addr.sun_path) {
        fprintf(stderr, "notify_send: NOTIFY_SOCKET too long\n");
        return 1;
    }
    memcpy(addr.sun_path, target, len);
    if (target[0] == '@') addr.sun_path[0] = '\0';
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        perror("notify_send: socket");
        return 1;
    }
    socklen_t alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len);
    if (sendto(fd, argv[1], strlen(argv[1]), 0, (struct sockaddr*)&addr, alen) < 0) {
        fprintf(stderr, "notify_send: sendto %s: %s\n", target, strerror(errno));
        return 1;
    }
    close(fd);
    if (argc > 2) {
        execvp(argv[2], argv + 2);
        fprintf(stderr, "notify_send: exec %s: %s\n", argv[2], strerror(errno));
        return 127;
    }
    return 0;
}
