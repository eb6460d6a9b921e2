#!/bin/bash
set -euo pipefail
cd /workspace/wordfreq
cat > wordfreq.c <<'C'
/* wordfreq: print the most frequent words read from stdin. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct entry {
    char *word;
    size_t len;
    long count;
};

static struct entry *entries;     /* dense array of distinct words */
static size_t nentries, centries;
static size_t *slots;             /* open-addressing hash: index+1, 0 = empty */
static size_t nslots;

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n);
    if (!q) {
        fprintf(stderr, "wordfreq: out of memory\n");
        exit(1);
    }
    return q;
}

static size_t hash(const char *s, size_t n)
{
    size_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ULL;
    }
    return h;
}

static void rehash(void)
{
    size_t nn = nslots ? nslots * 2 : 1024;
    size_t *ns = calloc(nn, sizeof *ns);
    if (!ns) {
        fprintf(stderr, "wordfreq: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < nentries; i++) {
        size_t j = hash(entries[i].word, entries[i].len) & (nn - 1);
        while (ns[j])
            j = (j + 1) & (nn - 1);
        ns[j] = i + 1;
    }
    free(slots);
    slots = ns;
    nslots = nn;
}

static void add_word(const char *w, size_t n)
{
    if ((nentries + 1) * 2 > nslots)
        rehash();
    size_t j = hash(w, n) & (nslots - 1);
    while (slots[j]) {
        struct entry *e = &entries[slots[j] - 1];
        if (e->len == n && memcmp(e->word, w, n) == 0) {
            e->count++;
            return;
        }
        j = (j + 1) & (nslots - 1);
    }
    if (nentries == centries) {
        centries = centries ? centries * 2 : 1024;
        entries = xrealloc(entries, centries * sizeof *entries);
    }
    char *copy = xrealloc(NULL, n + 1);
    memcpy(copy, w, n);
    copy[n] = '\0';
    entries[nentries] = (struct entry){copy, n, 1};
    slots[j] = ++nentries;
}

static int cmp(const void *a, const void *b)
{
    const struct entry *x = a, *y = b;
    if (x->count != y->count)
        return x->count < y->count ? 1 : -1;
    return strcmp(x->word, y->word);
}

int main(int argc, char **argv)
{
    long limit = 10;
    if (argc > 1)
        limit = atol(argv[1]);

    char *buf = NULL;
    size_t len = 0, cap = 0;
    int c;
    for (;;) {
        c = getchar();
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
            if (len + 1 >= cap) {
                cap = cap ? cap * 2 : 64;
                buf = xrealloc(buf, cap);
            }
            buf[len++] = (char)(c | 0x20);
        } else {
            if (len > 0) {
                add_word(buf, len);
                len = 0;
            }
            if (c == EOF)
                break;
        }
    }

    if (nentries > 1)
        qsort(entries, nentries, sizeof entries[0], cmp);
    for (size_t i = 0; i < nentries && (limit <= 0 || (long)i < limit); i++)
        printf("%ld %s\n", entries[i].count, entries[i].word);
    return 0;
}
C
make -s
