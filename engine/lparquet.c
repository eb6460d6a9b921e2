/* lparquet.c — the cseng.parquet module: Lua binding of the parquet reader (parquet.c).
 *
 *   parquet.read(path [, opts])     -> file table | nil, msg, code
 *   parquet.decode(bytes [, opts])  -> same, from a string holding a whole file
 *   parquet.info(path)              -> parquet.read(path, {rows = false})
 *   parquet.to_jsonl(path, out)     -> rows written | nil, msg, code  (out "-" is stdout;
 *                                      on failure no output file is left behind)
 *   parquet.null                    -> the null sentinel (the same value as cjson.null)
 *
 * opts: rows = false skips decoding records; nulls = "omit" leaves null struct fields
 * out instead of setting them to parquet.null (list elements always keep the sentinel,
 * so arrays keep their length); max_memory = bytes (default 1 GiB).
 *
 * Records are built through pq_sink callbacks on this lua_State. A Lua error inside
 * them (out of memory) unwinds through pq_read; the decoder and the file buffer belong
 * to a userdata whose __gc frees them, so nothing leaks. Nothing here yields. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>

#include "aux.h"
#include "parquet.h"

#define HANDLE_MT "cseng.parquet.handle"

typedef struct handle {
  pq_file *f;
  uint8_t *buf; /* file contents when read from a path */
} handle;

static void close_handle(lua_State *L, int idx);

static int handle_close(lua_State *L) {
  close_handle(L, 1);
  return 0;
}

static void close_handle(lua_State *L, int idx) {
  handle *h = luaL_checkudata(L, idx, HANDLE_MT);
  pq_close(h->f);
  h->f = NULL;
  free(h->buf);
  h->buf = NULL;
}

static handle *new_handle(lua_State *L) {
  handle *h = lua_newuserdatauv(L, sizeof *h, 0);
  h->f = NULL;
  h->buf = NULL;
  luaL_setmetatable(L, HANDLE_MT);
  return h;
}

static int push_fail(lua_State *L, const char *msg, const char *code) {
  lua_pushnil(L);
  lua_pushstring(L, msg);
  lua_pushstring(L, code);
  return 3;
}

/* Reads the whole file into h->buf. Returns 0, or pushes nil, msg, code and returns 3. */
static int slurp(lua_State *L, handle *h, const char *path, size_t *size) {
  FILE *fp = fopen(path, "rb");
  if (!fp) {
    int e = errno;
    lua_pushnil(L);
    lua_pushfstring(L, "%s: %s", path, strerror(e));
    lua_pushstring(L, e == ENOENT ? "ENOENT" : e == EACCES ? "EACCES" : "EIO");
    return 3;
  }
  size_t cap = 1 << 16, n = 0;
  uint8_t *b = malloc(cap);
  for (;;) {
    if (!b) break;
    n += fread(b + n, 1, cap - n, fp);
    if (n < cap) break;
    uint8_t *nb = cap > SIZE_MAX / 2 ? NULL : realloc(b, cap * 2);
    if (!nb) {
      free(b);
      b = NULL;
      break;
    }
    b = nb;
    cap *= 2;
  }
  int bad = ferror(fp);
  fclose(fp);
  if (!b || bad) {
    free(b);
    lua_pushnil(L);
    lua_pushfstring(L, "%s: %s", path, b ? "read error" : "out of memory");
    lua_pushstring(L, b ? "EIO" : "ENOMEM");
    return 3;
  }
  h->buf = b;
  *size = n;
  return 0;
}

/* ---- the file table (schema, columns, row groups) ---- */

static void set_str(lua_State *L, const char *k, const char *v) {
  if (v) {
    lua_pushstring(L, v);
    lua_setfield(L, -2, k);
  }
}

static void set_int(lua_State *L, const char *k, lua_Integer v) {
  lua_pushinteger(L, v);
  lua_setfield(L, -2, k);
}

static const char *kind_name(int k) {
  return k == PQ_KIND_LEAF ? "leaf" : k == PQ_KIND_LIST ? "list" : "struct";
}

static void push_schema(lua_State *L, const pq_node *n, int depth) {
  luaL_checkstack(L, 4, "parquet schema too deep");
  lua_createtable(L, 0, 8);
  lua_pushlstring(L, n->name, n->name_len);
  lua_setfield(L, -2, "name");
  if (n->parent) {
    set_str(L, "path", n->path);
    set_str(L, "repetition", pq_repetition_name(n->repetition));
  }
  set_str(L, "kind", kind_name(n->kind));
  set_str(L, "logical", pq_logical_name(n));
  if (n->kind == PQ_KIND_LEAF) {
    set_str(L, "type", pq_type_name(n->type));
    if (n->type == PQ_FIXED_LEN_BYTE_ARRAY) set_int(L, "type_length", n->type_length);
  }
  if (n->kind != PQ_KIND_LEAF) {
    lua_createtable(L, n->num_children, 0);
    for (int i = 0; i < n->num_children; i++) {
      push_schema(L, n->children[i], depth + 1);
      lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "fields");
  }
}

/* Appends s to the array at the top of the stack unless it is there already. */
static void add_unique(lua_State *L, const char *s) {
  lua_Integer n = luaL_len(L, -1);
  for (lua_Integer i = 1; i <= n; i++) {
    lua_rawgeti(L, -1, i);
    int same = strcmp(lua_tostring(L, -1), s) == 0;
    lua_pop(L, 1);
    if (same) return;
  }
  lua_pushstring(L, s);
  lua_rawseti(L, -2, n + 1);
}

static void push_file_table(lua_State *L, const pq_file *f) {
  lua_createtable(L, 0, 10);
  set_int(L, "version", f->version);
  set_int(L, "num_rows", f->num_rows);
  set_int(L, "file_size", (lua_Integer)f->size);
  set_str(L, "created_by", f->created_by);

  push_schema(L, f->root, 0);
  lua_setfield(L, -2, "schema");

  lua_createtable(L, f->num_row_groups, 0);
  for (int g = 0; g < f->num_row_groups; g++) {
    const pq_row_group *rg = &f->row_groups[g];
    lua_createtable(L, 0, 3);
    set_int(L, "num_rows", rg->num_rows);
    set_int(L, "total_byte_size", rg->total_byte_size);
    lua_createtable(L, f->num_leaves, 0);
    for (int c = 0; c < f->num_leaves; c++) {
      const pq_column_chunk *cc = &rg->columns[c];
      lua_createtable(L, 0, 6);
      set_str(L, "path", f->leaves[c]->path);
      set_str(L, "codec", pq_codec_name(cc->codec));
      set_int(L, "num_values", cc->num_values);
      set_int(L, "compressed_size", cc->total_compressed_size);
      set_int(L, "uncompressed_size", cc->total_uncompressed_size);
      lua_createtable(L, cc->num_encodings, 0);
      for (int e = 0; e < cc->num_encodings; e++) add_unique(L, pq_encoding_name(cc->encodings[e]));
      lua_setfield(L, -2, "encodings");
      lua_rawseti(L, -2, c + 1);
    }
    lua_setfield(L, -2, "columns");
    lua_rawseti(L, -2, g + 1);
  }
  lua_setfield(L, -2, "row_groups");

  lua_createtable(L, f->num_leaves, 0);
  for (int c = 0; c < f->num_leaves; c++) {
    const pq_node *leaf = f->leaves[c];
    lua_createtable(L, 0, 10);
    set_str(L, "path", leaf->path);
    set_str(L, "type", pq_type_name(leaf->type));
    set_str(L, "logical", pq_logical_name(leaf));
    set_str(L, "repetition", pq_repetition_name(leaf->repetition));
    set_int(L, "max_definition_level", leaf->def_level);
    set_int(L, "max_repetition_level", leaf->rep_level);
    lua_Integer csize = 0, usize = 0;
    lua_newtable(L); /* codecs */
    lua_newtable(L); /* encodings */
    for (int g = 0; g < f->num_row_groups; g++) {
      const pq_column_chunk *cc = &f->row_groups[g].columns[c];
      csize += cc->total_compressed_size;
      usize += cc->total_uncompressed_size;
      for (int e = 0; e < cc->num_encodings; e++) add_unique(L, pq_encoding_name(cc->encodings[e]));
      lua_insert(L, -2);
      add_unique(L, pq_codec_name(cc->codec));
      lua_insert(L, -2);
    }
    lua_setfield(L, -3, "encodings");
    lua_setfield(L, -2, "codecs");
    set_int(L, "compressed_size", csize);
    set_int(L, "uncompressed_size", usize);
    lua_rawseti(L, -2, c + 1);
  }
  lua_setfield(L, -2, "columns");

  lua_createtable(L, f->num_kv, 0);
  for (int i = 0; i < f->num_kv; i++) {
    lua_createtable(L, 0, 2);
    lua_pushlstring(L, f->kv[i].key, f->kv[i].key_len);
    lua_setfield(L, -2, "key");
    if (f->kv[i].value) {
      lua_pushlstring(L, f->kv[i].value, f->kv[i].value_len);
      lua_setfield(L, -2, "value");
    }
    lua_rawseti(L, -2, i + 1);
  }
  lua_setfield(L, -2, "key_value");
}

/* ---- records as Lua tables ---- */

#define MAX_NEST (2 * PQ_MAX_DEPTH + 4)

typedef struct builder {
  lua_State *L;
  int rows_idx; /* absolute index of the rows array */
  lua_Integer nrows;
  bool omit_nulls;
  int depth; /* containers open in the current row, 0 = the row itself */
  bool is_list[MAX_NEST];
  lua_Integer count[MAX_NEST];
} builder;

/* Stores the value on top of the stack into the open container. */
static void attach(builder *b, const pq_node *n) {
  lua_State *L = b->L;
  if (b->is_list[b->depth]) {
    lua_rawseti(L, -2, ++b->count[b->depth]);
  } else {
    lua_pushlstring(L, n->name, n->name_len);
    lua_insert(L, -2);
    lua_rawset(L, -3);
  }
}

static int open_container(builder *b, bool list) {
  if (b->depth + 1 >= MAX_NEST) return -1;
  luaL_checkstack(b->L, 4, "parquet record too deep");
  lua_newtable(b->L);
  b->depth++;
  b->is_list[b->depth] = list;
  b->count[b->depth] = 0;
  return 0;
}

static int b_row_begin(void *ud, int64_t row) {
  builder *b = ud;
  (void)row;
  lua_newtable(b->L);
  b->depth = 0;
  b->is_list[0] = false;
  return 0;
}

static int b_row_end(void *ud) {
  builder *b = ud;
  lua_rawseti(b->L, b->rows_idx, ++b->nrows);
  return 0;
}

static int b_struct_begin(void *ud, const pq_node *n) {
  (void)n;
  return open_container(ud, false);
}

static int b_list_begin(void *ud, const pq_node *n) {
  (void)n;
  return open_container(ud, true);
}

static int b_close(void *ud, const pq_node *n) {
  builder *b = ud;
  b->depth--;
  attach(b, n);
  return 0;
}

static int b_value(void *ud, const pq_node *n, const pq_value *v) {
  builder *b = ud;
  lua_State *L = b->L;
  switch (v->type) {
    case PQ_BOOLEAN: lua_pushboolean(L, v->b); break;
    case PQ_INT32:
    case PQ_INT64: lua_pushinteger(L, (lua_Integer)v->i); break;
    case PQ_FLOAT:
    case PQ_DOUBLE: lua_pushnumber(L, (lua_Number)v->d); break;
    default: lua_pushlstring(L, (const char *)v->bytes, v->len); break;
  }
  attach(b, n);
  return 0;
}

static int b_null(void *ud, const pq_node *n) {
  builder *b = ud;
  if (b->omit_nulls && !b->is_list[b->depth]) return 0;
  lua_pushlightuserdata(b->L, NULL); /* == cjson.null */
  attach(b, n);
  return 0;
}

/* ---- entry points ---- */

typedef struct read_opts {
  bool rows, omit_nulls;
  pq_limits limits;
} read_opts;

static void check_opts(lua_State *L, int idx, read_opts *o) {
  o->rows = true;
  o->omit_nulls = false;
  pq_limits_default(&o->limits);
  if (lua_isnoneornil(L, idx)) return;
  luaL_checktype(L, idx, LUA_TTABLE);
  o->rows = cs_opt_bool(L, idx, "rows", 1);
  if (lua_getfield(L, idx, "nulls") != LUA_TNIL) {
    const char *s = luaL_checkstring(L, -1);
    if (strcmp(s, "omit") == 0) o->omit_nulls = true;
    else if (strcmp(s, "null") != 0)
      luaL_error(L, "parquet: opts.nulls must be \"null\" or \"omit\", not \"%s\"", s);
  }
  lua_pop(L, 1);
  if (lua_getfield(L, idx, "max_memory") != LUA_TNIL) {
    lua_Integer m = luaL_checkinteger(L, -1);
    luaL_argcheck(L, m > 0, idx, "max_memory must be positive");
    o->limits.max_memory = (size_t)m;
  }
  lua_pop(L, 1);
}

/* Opens data (owned by h or by a Lua string on the stack) and pushes the result. */
static int open_and_push(lua_State *L, handle *h, const uint8_t *data, size_t size, const read_opts *o) {
  pq_error err;
  h->f = pq_open(data, size, &o->limits, &err);
  if (!h->f) return push_fail(L, err.msg, pq_status_code(err.status));
  push_file_table(L, h->f);
  if (o->rows) {
    int top = lua_gettop(L);
    lua_Integer n = h->f->num_rows > 0 && h->f->num_rows < (1 << 24) ? (lua_Integer)h->f->num_rows : 0;
    lua_createtable(L, (int)n, 0);
    builder b = {.L = L, .rows_idx = top + 1, .omit_nulls = o->omit_nulls};
    pq_sink s = {
        .ud = &b,
        .row_begin = b_row_begin,
        .row_end = b_row_end,
        .struct_begin = b_struct_begin,
        .struct_end = b_close,
        .list_begin = b_list_begin,
        .list_end = b_close,
        .value = b_value,
        .null = b_null,
    };
    if (pq_read(h->f, &s, &err)) {
      lua_settop(L, top);
      return push_fail(L, err.msg, pq_status_code(err.status));
    }
    lua_setfield(L, top, "rows");
  }
  return 1;
}

/* The options at opts_idx into *o, a new handle (pushed) into *hp and the file named by argument 1
 * read into it (*size bytes); 0, or the count of results of the failure pushed. */
static int load(lua_State *L, int opts_idx, read_opts *o, handle **hp, size_t *size) {
  const char *path = luaL_checkstring(L, 1);
  check_opts(L, opts_idx, o);
  *hp = new_handle(L);
  return slurp(L, *hp, path, size);
}

static int l_read(lua_State *L) {
  read_opts o;
  handle *h;
  size_t size;
  int r = load(L, 2, &o, &h, &size);
  if (r) return r;
  int hidx = lua_gettop(L);
  r = open_and_push(L, h, h->buf, size, &o);
  close_handle(L, hidx); /* free now rather than at the next collection */
  return r;
}

static int l_decode(lua_State *L) {
  size_t size;
  const char *bytes = luaL_checklstring(L, 1, &size);
  read_opts o;
  check_opts(L, 2, &o);
  handle *h = new_handle(L);
  int hidx = lua_gettop(L);
  int r = open_and_push(L, h, (const uint8_t *)bytes, size, &o);
  close_handle(L, hidx);
  return r;
}

static int l_info(lua_State *L) {
  luaL_checkstring(L, 1);
  lua_settop(L, 1);
  lua_createtable(L, 0, 1);
  lua_pushboolean(L, 0);
  lua_setfield(L, -2, "rows");
  return l_read(L);
}

static int write_line(void *ud, const char *s, size_t len) {
  return fwrite(s, 1, len, (FILE *)ud) == len ? 0 : -1;
}

static int l_to_jsonl(lua_State *L) {
  luaL_checkstring(L, 1);
  const char *out = luaL_checkstring(L, 2);
  read_opts o;
  handle *h;
  size_t size;
  int r = load(L, 3, &o, &h, &size);
  if (r) return r;
  pq_error err;
  h->f = pq_open(h->buf, size, &o.limits, &err);
  if (!h->f) return push_fail(L, err.msg, pq_status_code(err.status));
  bool to_stdout = strcmp(out, "-") == 0;
  FILE *fp = to_stdout ? stdout : fopen(out, "wb");
  if (!fp) {
    lua_pushnil(L);
    lua_pushfstring(L, "%s: %s", out, strerror(errno));
    lua_pushstring(L, "EIO");
    return 3;
  }
  int64_t n = pq_write_jsonl(h->f, write_line, fp, &err);
  int bad = fflush(fp) != 0 || ferror(fp);
  if (!to_stdout && fclose(fp) != 0) bad = 1;
  close_handle(L, lua_absindex(L, -1));          /* the handle is at the top */
  if ((n < 0 || bad) && !to_stdout) remove(out); /* no half-converted file left behind */
  if (n < 0) return push_fail(L, err.msg, pq_status_code(err.status));
  if (bad) {
    lua_pushnil(L);
    lua_pushfstring(L, "%s: write failed", out);
    lua_pushstring(L, "EIO");
    return 3;
  }
  lua_pushinteger(L, (lua_Integer)n);
  return 1;
}

static const luaL_Reg parquet_funcs[] = {
    {"read", l_read}, {"decode", l_decode}, {"info", l_info}, {"to_jsonl", l_to_jsonl}, {NULL, NULL},
};

int luaopen_cseng_parquet(lua_State *L) {
  if (luaL_newmetatable(L, HANDLE_MT)) {
    lua_pushcfunction(L, handle_close);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, handle_close);
    lua_setfield(L, -2, "__close");
    lua_pushboolean(L, 0);
    lua_setfield(L, -2, "__metatable");
  }
  lua_pop(L, 1);
  luaL_newlib(L, parquet_funcs);
  lua_pushlightuserdata(L, NULL);
  lua_setfield(L, -2, "null");
  return 1;
}
