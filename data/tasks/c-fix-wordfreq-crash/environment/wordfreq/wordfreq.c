/* wordfreq: print the most frequent words read from stdin. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_WORDS 1024
#define MAX_LEN 32

struct entry {
    char word[MAX_LEN];
    int count;
};

static struct entry table[MAX_WORDS];
static int nwords = 0;

static void add_word(const char *w)
{
    for (int i = 0; i < nwords; i++) {
        if (strcmp(table[i].word, w) == 0) {
            table[i].count++;
            return;
        }
    }
    strcpy(table[nwords].word, w);
    table[nwords].count = 1;
    nwords++;
}

static int cmp(const void *a, const void *b)
{
    const struct entry *x = a, *y = b;
    if (x->count != y->count)
        return y->count - x->count;
    return strcmp(x->word, y->word);
}

int main(int argc, char **argv)
{
    int limit = 10;
    if (argc > 1)
        limit = atoi(argv[1]);

    char buf[MAX_LEN];
    int len = 0;
    int c;
    while ((c = getchar()) != EOF) {
        if (isalpha(c)) {
            buf[len++] = (char)tolower(c);
        } else if (len > 0) {
            buf[len] = '\0';
            add_word(buf);
            len = 0;
        }
    }
    if (len > 0) {
        buf[len] = '\0';
        add_word(buf);
    }

    qsort(table, nwords, sizeof table[0], cmp);
    for (int i = 0; i < nwords && (limit == 0 || i < limit); i++)
        printf("%d %s\n", table[i].count, table[i].word);
    return 0;
}
