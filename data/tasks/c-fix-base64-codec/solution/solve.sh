#!/bin/bash
set -euo pipefail
cd /workspace/b64
cat > b64.c <<'C'
/* b64: base64 encode (-e) or decode (-d) stdin to stdout. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char ALPHABET[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static unsigned char *read_all(size_t *n)
{
    size_t cap = 4096, len = 0;
    unsigned char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + len, 1, cap - len, stdin)) > 0) {
        len += got;
        if (len == cap) {
            cap *= 2;
            buf = realloc(buf, cap);
        }
    }
    if (!buf) {
        fprintf(stderr, "b64: out of memory\n");
        exit(1);
    }
    *n = len;
    return buf;
}

static void encode(const unsigned char *in, size_t n)
{
    size_t i = 0;
    for (; i + 3 <= n; i += 3) {
        unsigned v = (unsigned)in[i] << 16 | (unsigned)in[i + 1] << 8 | in[i + 2];
        putchar(ALPHABET[(v >> 18) & 63]);
        putchar(ALPHABET[(v >> 12) & 63]);
        putchar(ALPHABET[(v >> 6) & 63]);
        putchar(ALPHABET[v & 63]);
    }
    if (n - i == 1) {
        unsigned v = (unsigned)in[i] << 16;
        putchar(ALPHABET[(v >> 18) & 63]);
        putchar(ALPHABET[(v >> 12) & 63]);
        putchar('=');
        putchar('=');
    } else if (n - i == 2) {
        unsigned v = (unsigned)in[i] << 16 | (unsigned)in[i + 1] << 8;
        putchar(ALPHABET[(v >> 18) & 63]);
        putchar(ALPHABET[(v >> 12) & 63]);
        putchar(ALPHABET[(v >> 6) & 63]);
        putchar('=');
    }
    putchar('\n');
}

static int value_of(int c)
{
    if (c == 0)
        return -1;
    const char *p = strchr(ALPHABET, c);
    return p ? (int)(p - ALPHABET) : -1;
}

static int invalid(void)
{
    fprintf(stderr, "b64: invalid input\n");
    return 1;
}

static int decode(const unsigned char *in, size_t n)
{
    unsigned char *out = malloc(n / 4 * 3 + 3);
    size_t olen = 0;
    unsigned char quad[4];
    size_t q = 0;
    int done = 0; /* a padded quad was seen: nothing may follow */
    if (!out) {
        fprintf(stderr, "b64: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        int c = in[i];
        if (c == ' ' || c == '\n' || c == '\t' || c == '\r')
            continue;
        if (done) {
            free(out);
            return invalid();
        }
        quad[q++] = (unsigned char)c;
        if (q < 4)
            continue;
        q = 0;
        int a = value_of(quad[0]), b = value_of(quad[1]);
        int pad = 0;
        if (quad[3] == '=') {
            pad = quad[2] == '=' ? 2 : 1;
        } else if (quad[2] == '=') {
            free(out);
            return invalid();
        }
        int c2 = pad == 2 ? 0 : value_of(quad[2]);
        int d = pad >= 1 ? 0 : value_of(quad[3]);
        if (a < 0 || b < 0 || c2 < 0 || d < 0) {
            free(out);
            return invalid();
        }
        unsigned v = (unsigned)a << 18 | (unsigned)b << 12 | (unsigned)c2 << 6 | (unsigned)d;
        out[olen++] = (v >> 16) & 255;
        if (pad < 2)
            out[olen++] = (v >> 8) & 255;
        if (pad < 1)
            out[olen++] = v & 255;
        if (pad)
            done = 1;
    }
    if (q != 0) {
        free(out);
        return invalid();
    }
    fwrite(out, 1, olen, stdout);
    free(out);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 2 || (strcmp(argv[1], "-e") != 0 && strcmp(argv[1], "-d") != 0)) {
        fprintf(stderr, "usage: b64 -e|-d < input > output\n");
        return 2;
    }
    size_t n;
    unsigned char *data = read_all(&n);
    int rc = 0;
    if (argv[1][1] == 'e')
        encode(data, n);
    else
        rc = decode(data, n);
    free(data);
    return rc;
}
C
make -s
