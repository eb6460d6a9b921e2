/*
 * aux.h: the helpers every binding shares (as lauxlib.h is Lua's): option
 * fields, errno codes, bounded formatting, a growable byte buffer, the process
 * environment as a table, and signal names. One definition, one meaning: a
 * binding that needs another behaviour says so where it differs.
 */
#ifndef CSENG_AUX_H
#define CSENG_AUX_H

#include <lua.h>
#include <lauxlib.h>
#include <stddef.h>
#include <stdint.h>

/* ---- option tables --------------------------------------------------------
 * An options argument at idx may be absent or nil (every field takes its
 * default), else it must be a table. A field that is nil takes the default; a
 * field of the wrong type raises "opts.<field> must be ...". */

/* Pushes opts.<field> (nil if the options are absent) and returns its type. */
int cs_opt_field(lua_State *L, int idx, const char *field);

/* A flag: nil -> def, else the field's truth value (Lua's: only nil and false are false). */
int cs_opt_bool(lua_State *L, int idx, const char *field, int def);

/* A number. */
double cs_opt_number(lua_State *L, int idx, const char *field, double def);

/* An integer >= min (raises "opts.<field> must be an integer >= <min>"). */
lua_Integer cs_opt_integer(lua_State *L, int idx, const char *field, lua_Integer def, lua_Integer min);

/* A string; the pointer stays valid while the options table holds it. */
const char *cs_opt_string(lua_State *L, int idx, const char *field, const char *def);

/* ---- errors ---------------------------------------------------------------- */

/* The stable code of an errno value: its name ("ENOENT"; ENOTSUP for the value
 * glibc names EOPNOTSUPP), "EIO" for 0 or an unknown value. */
const char *cs_errno_code(int e);

/* Expected failure from errno e: pushes nil, "<formatted>: <strerror(e)>",
 * cs_errno_code(e); returns 3. */
int cs_fail_errno(lua_State *L, int e, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- formatting and buffers ------------------------------------------------ */

/* snprintf for paths and messages where truncation is acceptable (callers
 * check the length where it matters), without -Wformat-truncation noise. */
void cs_fmt_into(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* A growable byte buffer (zero-initialise it; plain C, no Lua). */
typedef struct {
  char *p;
  size_t len, cap;
} cs_buf;

/* Appends n bytes; returns 1, or 0 when out of memory (the buffer is unchanged). */
int cs_buf_add(cs_buf *b, const char *p, size_t n);
void cs_buf_free(cs_buf *b);

/* Writes v in decimal to out (room for 20 digits, no NUL); returns the length. snprintf's
 * cost (~700 instructions) on every request's Content-Length and status line is not free. */
size_t cs_utoa(char *out, uint64_t v);

/* ---- the environment and signals ------------------------------------------- */

/* Copies the process environment into the table at idx (NAME -> value). */
void cs_environ_into(lua_State *L, int idx);

/* The signal number of a name: "TERM" or "SIGTERM" (any signal the C library
 * names, upper case); 0 if unknown. */
int cs_signal_number(const char *name);

/* A signal argument at idx: a name as above or a number; def if absent.
 * Raises "unknown signal 'X'" otherwise. */
int cs_check_signal(lua_State *L, int idx, int def);

/* Pushes "SIG<NAME>" ("SIG<n>" if the C library has no name). */
void cs_push_signal_name(lua_State *L, int sig);

/* t[field] = v for the table on top of the stack. */
void cs_set_integer(lua_State *L, const char *field, lua_Integer v);

/* ---- userdata classes ------------------------------------------------------- */

/* Registers the metatable tname (once: kept if it exists): __index a table of methods, and the
 * metamethods (__gc, __close, __tostring, ...) of meta. Leaves the stack as it was. */
void cs_new_class(lua_State *L, const char *tname, const luaL_Reg *methods, const luaL_Reg *meta);

#endif
