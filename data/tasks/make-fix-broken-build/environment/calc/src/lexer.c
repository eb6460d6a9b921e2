#include <ctype.h>
#include <stddef.h>
#include "lexer.h"

void lexer_init(struct lexer *lx, const char *src)
{
    lx->src = src;
    lx->pos = 0;
}

struct token lexer_next(struct lexer *lx)
{
    struct token t = {TOK_ERROR, 0};
    while (isspace((unsigned char)lx->src[lx->pos]))
        lx->pos++;
    char c = lx->src[lx->pos];
    if (c == '\0') {
        t.kind = TOK_END;
        return t;
    }
    if (isdigit((unsigned char)c)) {
        long v = 0;
        while (isdigit((unsigned char)lx->src[lx->pos]))
            v = v * 10 + (lx->src[lx->pos++] - '0');
        t.kind = TOK_NUM;
        t.value = v;
        return t;
    }
    lx->pos++;
    switch (c) {
    case '+': t.kind = TOK_PLUS; break;
    case '-': t.kind = TOK_MINUS; break;
    case '*': t.kind = TOK_STAR; break;
    case '/': t.kind = TOK_SLASH; break;
    case '(': t.kind = TOK_LPAREN; break;
    case ')': t.kind = TOK_RPAREN; break;
    default: t.kind = TOK_ERROR; break;
    }
    return t;
}
