#include <stdio.h>
#include "parser.h"

struct parser {
    struct lexer lx;
    struct token cur;
    const char *error;
};

static void advance(struct parser *p) { p->cur = lexer_next(&p->lx); }

static long expr(struct parser *p);

static long primary(struct parser *p)
{
    if (p->cur.kind == TOK_NUM) {
        long v = p->cur.value;
        advance(p);
        return v;
    }
    if (p->cur.kind == TOK_MINUS) {
        advance(p);
        return -primary(p);
    }
    if (p->cur.kind == TOK_LPAREN) {
        advance(p);
        long v = expr(p);
        if (p->cur.kind != TOK_RPAREN && !p->error)
            p->error = "expected ')'";
        advance(p);
        return v;
    }
    if (!p->error)
        p->error = "unexpected token";
    return 0;
}

static long term(struct parser *p)
{
    long v = primary(p);
    while (p->cur.kind == TOK_STAR || p->cur.kind == TOK_SLASH) {
        enum token_kind op = p->cur.kind;
        advance(p);
        long r = primary(p);
        if (op == TOK_STAR) {
            v *= r;
        } else if (r == 0) {
            if (!p->error)
                p->error = "division by zero";
        } else {
            v /= r;
        }
    }
    return v;
}

static long expr(struct parser *p)
{
    long v = term(p);
    while (p->cur.kind == TOK_PLUS || p->cur.kind == TOK_MINUS) {
        enum token_kind op = p->cur.kind;
        advance(p);
        long r = term(p);
        v = op == TOK_PLUS ? v + r : v - r;
    }
    return v;
}

int evaluate(const char *src, long *out, char *err, size_t errlen)
{
    struct parser p;
    lexer_init(&p.lx, src);
    p.error = NULL;
    advance(&p);
    long v = expr(&p);
    if (!p.error && p.cur.kind != TOK_END)
        p.error = "trailing input";
    if (p.error) {
        snprintf(err, errlen, "%s", p.error);
        return -1;
    }
    *out = v;
    return 0;
}
