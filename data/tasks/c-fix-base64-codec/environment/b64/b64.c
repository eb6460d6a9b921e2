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
        unsigned v = in[i] << 16 | in[i + 1] << 8 | in[i + 2];
        putchar(ALPHABET[(v >> 18) & 63]);
        putchar(ALPHABET[(v >> 12) & 63]);
        putchar(ALPHABET[(v >> 6) & 63]);
        putchar(ALPHABET[v & 63]);
    }
    if (n - i == 1) {
        unsigned v = in[i] << 16;
        putchar(ALPHABET[(v >> 18) & 63]);
        putchar(ALPHABET[(v >> 12) & 63]);
        putchar('=');
    } else if (n - i == 2) {
        unsigned v = in[i] << 16 | in[i + 1];
        putchar(ALPHABET[(v >> 18) & 63]);
        putchar(ALPHABET[(v >> 12) & 63]);
        putchar(ALPHABET[(v >> 6) & 63]);
        putchar('=');
    }
    putchar('\n');
}

static int value_of(int c)
{
    const char *p = strchr(ALPHABET, c);
    return p ? (int)(p - ALPHABET) : -1;
}

static int decode(const unsigned char *in, size_t n)
{
    unsigned char quad[4];
    size_t q = 0;
    for (size_t i = 0; i < n; i++) {
        int c = in[i];
        if (c == ' ' || c == '\n' || c == '\t' || c == '\r')
            continue;
        quad[q++] = (unsigned char)c;
        if (q < 4)
            continue;
        q = 0;
        int a = value_of(quad[0]), b = value_of(quad[1]);
        int c2 = quad[2] == '=' ? 0 : value_of(quad[2]);
        int d = quad[3] == '=' ? 0 : value_of(quad[3]);
        if (a < 0 || b < 0 || c2 < 0 || d < 0) {
            fprintf(stderr, "b64: invalid input\n");
            return 1;
        }
        unsigned v = a << 18 | b << 12 | c2 << 6 | d;
        putchar((v >> 16) & 255);
        putchar((v >> 8) & 255);
        putchar(v & 255);
    }
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
