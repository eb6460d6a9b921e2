#include <stdio.h>
#include "parser.h"

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: calc EXPRESSION\n");
        return 2;
    }
    long v;
    char err[128];
    if (evaluate(argv[1], &v, err, sizeof err) != 0) {
        fprintf(stderr, "calc: %s\n", err);
        return 1;
    }
    printf("%ld\n", v);
    return 0;
}
