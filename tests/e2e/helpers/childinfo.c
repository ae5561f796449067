// SPDX-License-Identifier: Apache-2.0
/* childinfo: prints what the child inherited from lastcall: the SigBlk/SigIgn lines of
 * /proc/self/status, then every open fd (excluding the one used to list them). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
    FILE* f = fopen("/proc/self/status", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "SigBlk:", 7) || !strncmp(line, "SigIgn:", 7) ||
            !strncmp(line, "NoNewPrivs:", 11) || !strncmp(line, "Uid:", 4) ||
            !strncmp(line, "Gid:", 4) || !strncmp(line, "Groups:", 7))
            fputs(line, stdout);
    if (f) fclose(f);
    DIR* d = opendir("/proc/self/fd");
    struct dirent* e;
    int self = dirfd(d);
    printf("fds:");
    while ((e = readdir(d)))
        if (e->d_name[0] != '.' && atoi(e->d_name) != self) printf(" %s", e->d_name);
    printf("\n");
    closedir(d);
    return 0;
}
