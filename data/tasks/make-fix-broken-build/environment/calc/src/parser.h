#ifndef PARSER_H
#define PARSER_H

#include <stddef.h>
#include "lexer.h"

/* Evaluate EXPR; on success store the result in *out and return 0,
 * otherwise return -1 and store a message in err. */
int evaluate(const char *expr, long *out, char *err, size_t errlen);

#endif
