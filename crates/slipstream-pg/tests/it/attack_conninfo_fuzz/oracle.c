/* libpq 15's reading of connection strings, for the differential fuzz. One input per line
 * (the string's bytes in hex); one output line each:
 *   ERR h<message>                         PQconninfoParse refused the string
 *   OK h<unix> h<tcp> key=h<value> ...     every option it set, and what libpq said when
 *                                          asked to connect with them (see below)
 * Values and messages are hex so no byte can break the line protocol. `--keys` lists the
 * keywords libpq knows. Nothing here reaches a server: the "unix" attempt replaces every host
 * with a socket directory that does not exist (libpq checks the options, the host/port lists
 * and each port, then fails to find the socket); the "tcp" attempt replaces every host with
 * 127.0.0.1 and every port with a listener of this process that closes each connection at
 * once (libpq also checks connect_timeout, the keepalives and tcp_user_timeout). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <unistd.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <libpq-fe.h>

static void *closer(void *arg) {
    int fd = *(int *) arg;
    for (;;) {
        int c = accept(fd, NULL, NULL);
        if (c >= 0) close(c);
    }
    return NULL;
}

static void put_hex(const char *s) {
    putchar('h');
    for (const unsigned char *p = (const unsigned char *) s; *p; p++) printf("%02x", *p);
}

static int hexval(int c) { return c <= '9' ? c - '0' : (c | 32) - 'a' + 10; }

static char *repeat(const char *entry, const char *list) {
    size_t n = 1;
    for (const char *p = list; p && *p; p++) if (*p == ',') n++;
    char *out = malloc(n * (strlen(entry) + 1) + 1);
    out[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        if (i) strcat(out, ",");
        strcat(out, entry);
    }
    return out;
}

/* Appends ` key='value'` at `*end`, quoted as libpq reads it back; `out` has room (see
 * attempt). */
static char *append(char *end, const char *key, const char *val) {
    end += sprintf(end, " %s='", key);
    for (const char *p = val; *p; p++) {
        if (*p == '\\' || *p == '\'') *end++ = '\\';
        *end++ = *p;
    }
    *end++ = '\'';
    *end = '\0';
    return end;
}

/* Connects with `opts`, hosts replaced by `host` (one per entry) and, if `port` is given,
 * ports likewise; hostaddr is left out (it would bypass the replaced hosts). The options go
 * back to libpq as a connection string, not as PQconnectdbParams' arrays, which take an
 * empty value for "not set" where a string's empty value is a value (`sslmode=''` is
 * refused). */
static void attempt(PQconninfoOption *opts, const char *host, const char *port) {
    char *lists[2] = {NULL, NULL};
    size_t room = 64 + 4 * (strlen(host) + strlen(port ? port : ""));
    for (PQconninfoOption *o = opts; o->keyword; o++) {
        if (!o->val) continue;
        if (strcmp(o->keyword, "host") == 0) lists[0] = repeat(host, o->val);
        if (port && strcmp(o->keyword, "port") == 0) lists[1] = repeat(port, o->val);
        room += strlen(o->keyword) + 2 * strlen(o->val) + 5;
    }
    room += (lists[0] ? 2 * strlen(lists[0]) : 0) + (lists[1] ? 2 * strlen(lists[1]) : 0);
    char *s = malloc(room), *end = s;
    *s = '\0';
    for (PQconninfoOption *o = opts; o->keyword; o++) {
        if (!o->val || strcmp(o->keyword, "hostaddr") == 0) continue;
        if (strcmp(o->keyword, "host") == 0)
            end = append(end, "host", lists[0]);
        else if (port && strcmp(o->keyword, "port") == 0)
            end = append(end, "port", lists[1]);
        else
            end = append(end, o->keyword, o->val);
    }
    if (!lists[0]) end = append(end, "host", host);
    if (port && !lists[1]) end = append(end, "port", port);
    PGconn *c = PQconnectdb(s);
    putchar(' ');
    put_hex(PQstatus(c) == CONNECTION_OK ? "CONNECTED" : PQerrorMessage(c));
    PQfinish(c);
    free(s);
    free(lists[0]);
    free(lists[1]);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--keys") == 0) {
        for (PQconninfoOption *o = PQconndefaults(); o->keyword; o++) printf("%s\n", o->keyword);
        return 0;
    }
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *) &a, sizeof a) || listen(fd, 64) ||
        getsockname(fd, (struct sockaddr *) &a, &len)) { perror("listener"); return 2; }
    char port[16];
    snprintf(port, sizeof port, "%d", ntohs(a.sin_port));
    pthread_t t;
    pthread_create(&t, NULL, closer, &fd);

    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    while ((got = getline(&line, &cap, stdin)) > 0) {
        size_t m = 0;
        for (ssize_t i = 0; i + 1 < got && line[i] != '\n'; i += 2)
            line[m++] = (char) (hexval(line[i]) << 4 | hexval(line[i + 1]));
        line[m] = '\0';
        char *err = NULL;
        PQconninfoOption *opts = PQconninfoParse(line, &err);
        if (!opts) {
            fputs("ERR ", stdout);
            put_hex(err ? err : "out of memory");
            putchar('\n');
            PQfreemem(err);
        } else {
            fputs("OK", stdout);
            attempt(opts, "/nonexistent-h64-oracle", NULL);
            attempt(opts, "127.0.0.1", port);
            for (PQconninfoOption *o = opts; o->keyword; o++) {
                if (!o->val) continue;
                printf(" %s=", o->keyword);
                put_hex(o->val);
            }
            putchar('\n');
            PQconninfoFree(opts);
        }
        fflush(stdout);
    }
    return 0;
}
