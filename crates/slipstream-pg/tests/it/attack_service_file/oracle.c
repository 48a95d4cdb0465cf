/* libpq 15's reading of a connection string together with the service files its environment
 * names, for attack_service_file.rs. One process answers many cases, over stdin/stdout; every
 * text is hex so no byte can break the lines:
 *   CLEAR             empties the environment (then LC_ALL=C, for libpq's messages)
 *   SET <name> <hex>  sets one variable (PGSERVICE, PGSERVICEFILE, PGSYSCONFDIR, HOME, PG*)
 *   RUN <hex>         answers for that connection string:
 *     MSG h<message>      what libpq said (empty if nothing yet)
 *     <keyword> h<value>  each option of the resulting connection (PQconninfo), defaults
 *                         included
 *     END
 * PQconnectStart reads the string, the service file and the environment, checks the values and
 * starts connecting; the tests name hosts that are socket directories that do not exist, so
 * nothing is reached and nothing waits. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <libpq-fe.h>

static void put_hex(const char *s) {
    putchar('h');
    for (const unsigned char *p = (const unsigned char *) s; *p; p++) printf("%02x", *p);
    putchar('\n');
}

static int hexval(int c) { return c <= '9' ? c - '0' : (c | 32) - 'a' + 10; }

/* Decodes the hex at `h` (up to a space or the end) in place; returns it. */
static char *unhex(char *h) {
    char *out = h;
    size_t m = 0;
    for (size_t i = 0; h[i] && h[i] != ' ' && h[i] != '\n' && h[i + 1]; i += 2)
        out[m++] = (char) (hexval(h[i]) << 4 | hexval(h[i + 1]));
    out[m] = '\0';
    return out;
}

int main(void) {
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, stdin) > 0) {
        line[strcspn(line, "\n")] = '\0';
        if (strcmp(line, "CLEAR") == 0) {
            clearenv();
            setenv("LC_ALL", "C", 1);
        } else if (strncmp(line, "SET ", 4) == 0) {
            char *name = line + 4, *sp = strchr(name, ' ');
            if (!sp) return 2;
            *sp = '\0';
            setenv(name, unhex(sp + 1), 1);
        } else if (strncmp(line, "RUN ", 4) == 0) {
            PGconn *c = PQconnectStart(unhex(line + 4));
            fputs("MSG ", stdout);
            put_hex(PQerrorMessage(c));
            PQconninfoOption *opts = PQconninfo(c);
            for (PQconninfoOption *o = opts; o && o->keyword; o++) {
                if (!o->val) continue;
                printf("%s ", o->keyword);
                put_hex(o->val);
            }
            PQconninfoFree(opts);
            PQfinish(c);
            puts("END");
            fflush(stdout);
        } else {
            return 2;
        }
    }
    return 0;
}
