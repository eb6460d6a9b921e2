#ifndef LEXER_H
#define LEXER_H

enum token_kind { TOK_NUM, TOK_PLUS, TOK_MINUS, TOK_STAR, TOK_SLASH, TOK_LPAREN, TOK_RPAREN, TOK_END, TOK_ERROR };

struct token {
    enum token_kind kind;
    long value;
};

struct lexer {
    const char *src;
    size_t pos;
};

void lexer_init(struct lexer *lx, const char *src);
struct token lexer_next(struct lexer *lx);

#endif
