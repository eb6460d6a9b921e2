/*
 * lprotobuf.c: Lua binding of the protobuf wire codec (engine/protobuf.c). Module
 * cseng.protobuf. Synchronous.
 *
 *   protobuf.encode(schema, value)        -> bytes           (raises on a bad value or schema)
 *   protobuf.decode(schema, bytes [, opts]) -> table | nil, message, "EPROTOBUF"
 *        opts.defaults = true: absent implicit-presence scalars get 0/false/"", repeated and
 *        map fields {} (default: absent fields stay nil)
 *   protobuf.compile(schema)              -> true            (checks a schema, raises naming the field)
 *   protobuf.frame(payload [, compressed]) -> 5-byte gRPC header .. payload
 *   protobuf.deframe(data [, max])        -> {payload...}, used | nil, message, "EPROTOBUF"
 *
 * Schema format (docs/ENGINE.md, "cseng.protobuf"):
 *   message = { name = 'pkg.Msg', fields = { field... } }
 *   field   = { number, name, [label,] type, [ref], [map value type, [value ref]], oneof = 'o', packed =
 * false } label: 'repeated' | 'optional' (proto3 explicit presence); omitted: proto3 implicit presence type:
 * double float int64 uint64 int32 fixed64 fixed32 bool string bytes uint32 enum sfixed32 sfixed64 sint32
 * sint64 | 'message' (ref = message schema) | 'enum' (ref = enum schema, optional) | 'map' (ref = key type,
 * then value type and its ref) enum    = { name = 'pkg.Enum', values = { NAME = number, ... } } A schema is
 * compiled once, on first use, and cached by table identity for the process's life (schemas are module
 * constants): do not change a schema table after its first use.
 */
#include "core.h"
#include "protobuf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A compiled message: header + fields in one userdata. Its user value 1 is a table keeping
 * the field names, the nested compiled messages and the enum schemas alive. */
typedef struct {
  pb_msg m;
  int noneofs;
  const char **oneof_names;
  pb_field fields[1];
} cmsg;

static char CACHE_KEY;   /* registry: schema table -> cmsg userdata (for the process's life) */
static char PENDING_KEY; /* registry: the same, for the compilation under way */

/* ---- schema compilation -------------------------------------------------- */

static void get_table(lua_State *L, void *key) {
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, key) != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushvalue(L, -1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, key);
  }
}

static const char *schema_name(lua_State *L, int idx) {
  const char *n;
  lua_getfield(L, idx, "name");
  n = lua_tostring(L, -1);
  lua_pop(L, 1);
  return n ? n : "?";
}

/* Keep the value on top alive in the user-value table at keep; returns it unpopped. */
static void keep(lua_State *L, int keepidx) {
  lua_pushvalue(L, -1);
  lua_rawseti(L, keepidx, (lua_Integer)lua_rawlen(L, keepidx) + 1);
}

static cmsg *compile(lua_State *L, int schema);

/* Scalar type name at idx (a string) for field fi of message mname. */
static int check_type(lua_State *L, int idx, const char *mname, const char *fname, int allow_message) {
  const char *t = lua_tostring(L, idx);
  int type;
  if (lua_type(L, idx) != LUA_TSTRING)
    return luaL_error(L, "protobuf schema %s.%s: type must be a string, got %s", mname, fname,
                      luaL_typename(L, idx));
  if (strcmp(t, "message") == 0) type = PB_MESSAGE;
  else type = pb_type_from_name(t);
  if (!type || (type == PB_MESSAGE && !allow_message))
    return luaL_error(L, "protobuf schema %s.%s: unknown type '%s'", mname, fname, t);
  return type;
}

/* A message schema at idx (or an enum schema for enums); kept in keepidx. */
static const pb_msg *ref_message(lua_State *L, int idx, const char *mname, const char *fname) {
  cmsg *c;
  if (!lua_istable(L, idx))
    luaL_error(L, "protobuf schema %s.%s: a message field needs its message schema (a table), got %s", mname,
               fname, luaL_typename(L, idx));
  c = compile(L, lua_absindex(L, idx)); /* pushes the cmsg userdata */
  return &c->m;
}

static void check_enum(lua_State *L, int idx, const char *mname, const char *fname) {
  if (lua_isnil(L, idx)) return;
  lua_getfield(L, idx, "values");
  if (!lua_istable(L, idx) || !lua_istable(L, -1))
    luaL_error(L, "protobuf schema %s.%s: an enum's schema is {name=, values={NAME=number...}}", mname,
               fname);
  lua_pop(L, 1);
}

static cmsg *new_entry(lua_State *L, int keepidx, const char *mname, const char *fname, int ktype, int vtype,
                       int vref) {
  cmsg *e = lua_newuserdatauv(L, sizeof(cmsg) + sizeof(pb_field), 0);
  memset(e, 0, sizeof(cmsg) + sizeof(pb_field));
  keep(L, keepidx);
  lua_pop(L, 1);
  e->m.name = "map entry";
  e->m.nfields = 2;
  e->m.fields = e->fields;
  e->fields[0].number = 1;
  e->fields[0].type = (uint8_t)ktype;
  e->fields[0].name = "key";
  e->fields[0].oneof = -1;
  e->fields[1].number = 2;
  e->fields[1].type = (uint8_t)vtype;
  e->fields[1].name = "value";
  e->fields[1].oneof = -1;
  if (vtype == PB_MESSAGE) {
    e->fields[1].msg = ref_message(L, vref, mname, fname);
    keep(L, keepidx);
    lua_pop(L, 1);
  } else if (vtype == PB_ENUM && !lua_isnil(L, vref)) {
    check_enum(L, vref, mname, fname);
    lua_pushvalue(L, vref);
    keep(L, keepidx);
    lua_pop(L, 1);
    e->fields[1].ud = (void *)(intptr_t)lua_rawlen(L, keepidx);
  }
  return e;
}

/* Compile the message schema at index schema; pushes its cmsg userdata. */
/* The compiled message of schema in the registry table at key, pushed and returned; NULL (the
 * stack as before) when that table has none. */
static cmsg *cached(lua_State *L, void *key, int schema) {
  get_table(L, key);
  lua_pushvalue(L, schema);
  if (lua_rawget(L, -2) == LUA_TUSERDATA) {
    lua_remove(L, -2);
    return lua_touserdata(L, -1);
  }
  lua_pop(L, 2);
  return NULL;
}

static cmsg *compile(lua_State *L, int schema) {
  cmsg *c;
  const char *mname;
  lua_Integer n, i;
  int keepidx, ud, oneofs, top;
  uint32_t dup;
  if ((c = cached(L, &CACHE_KEY, schema)) || (c = cached(L, &PENDING_KEY, schema))) return c;
  luaL_checkstack(L, 40, "protobuf schema too deep");
  mname = schema_name(L, schema);
  lua_getfield(L, schema, "fields");
  if (!lua_istable(L, -1))
    luaL_error(L, "protobuf schema %s: 'fields' must be a list of fields, got %s", mname,
               luaL_typename(L, -1));
  n = (lua_Integer)lua_rawlen(L, -1);
  lua_pop(L, 1);
  c = lua_newuserdatauv(L, sizeof(cmsg) + (size_t)n * sizeof(pb_field), 1);
  memset(c, 0, sizeof(cmsg) + (size_t)n * sizeof(pb_field));
  ud = lua_gettop(L);
  lua_newtable(L);
  keepidx = lua_gettop(L);
  lua_pushvalue(L, keepidx);
  lua_setiuservalue(L, ud, 1);
  lua_pushvalue(L, keepidx);
  lua_rawsetp(L, LUA_REGISTRYINDEX, c); /* c -> its keep table, for enum names when encoding */
  get_table(L, &PENDING_KEY);
  lua_pushvalue(L, schema);
  lua_pushvalue(L, ud);
  lua_rawset(L, -3);
  lua_pop(L, 1);
  lua_getfield(L, schema, "name");
  if (lua_type(L, -1) != LUA_TSTRING)
    luaL_error(L, "protobuf schema: 'name' must be a string (the message's full name)");
  keep(L, keepidx);
  c->m.name = lua_tostring(L, -1);
  lua_pop(L, 1);
  mname = c->m.name;
  c->m.fields = c->fields;
  c->m.nfields = (size_t)n;
  c->m.ud = c;
  lua_newtable(L); /* oneof name -> index */
  oneofs = 0;
  lua_getfield(L, schema, "fields");
  for (i = 1; i <= n; i++) {
    pb_field *f = &c->fields[i - 1];
    lua_Integer num;
    int at = 3, isnum;
    const char *fname;
    top = lua_gettop(L);
    if (lua_rawgeti(L, -1, i) != LUA_TTABLE)
      luaL_error(L, "protobuf schema %s: fields[%d] must be a table", mname, (int)i);
    lua_rawgeti(L, -1, 2);
    if (lua_type(L, -1) != LUA_TSTRING)
      luaL_error(L, "protobuf schema %s: fields[%d][2] must be the field's name", mname, (int)i);
    keep(L, keepidx);
    fname = f->name = lua_tostring(L, -1);
    lua_pop(L, 1);
    lua_rawgeti(L, -1, 1);
    num = lua_tointegerx(L, -1, &isnum);
    if (!isnum || num < 1 || num > (lua_Integer)PB_MAX_FIELD || (num >= 19000 && num <= 19999))
      luaL_error(L, "protobuf schema %s.%s: field number must be an integer in 1..2^29-1 (not 19000..19999)",
                 mname, fname);
    lua_pop(L, 1);
    f->number = (uint32_t)num;
    f->oneof = -1;
    f->label = PB_SINGULAR;
    lua_rawgeti(L, -1, 3);
    if (lua_type(L, -1) == LUA_TSTRING && strcmp(lua_tostring(L, -1), "repeated") == 0)
      f->label = PB_REPEATED, at = 4;
    else if (lua_type(L, -1) == LUA_TSTRING && strcmp(lua_tostring(L, -1), "optional") == 0)
      f->label = PB_OPTIONAL, at = 4;
    lua_pop(L, 1);
    lua_rawgeti(L, -1, at);
    if (lua_type(L, -1) == LUA_TSTRING && strcmp(lua_tostring(L, -1), "map") == 0) {
      int ktype, vtype;
      cmsg *e;
      if (f->label != PB_SINGULAR) luaL_error(L, "protobuf schema %s.%s: a map takes no label", mname, fname);
      lua_rawgeti(L, -2, at + 1);
      ktype = check_type(L, -1, mname, fname, 0);
      if (ktype == PB_FLOAT || ktype == PB_DOUBLE || ktype == PB_BYTES || ktype == PB_ENUM)
        luaL_error(L, "protobuf schema %s.%s: a map key cannot be %s", mname, fname, pb_type_name(ktype));
      lua_rawgeti(L, -3, at + 2);
      vtype = check_type(L, -1, mname, fname, 1);
      lua_rawgeti(L, -4, at + 3);
      e = new_entry(L, keepidx, mname, fname, ktype, vtype, lua_gettop(L));
      f->type = PB_MESSAGE;
      f->label = PB_REPEATED;
      f->is_map = 1;
      f->msg = &e->m;
    } else {
      f->type = (uint8_t)check_type(L, -1, mname, fname, 1);
      lua_rawgeti(L, -2, at + 1);
      if (f->type == PB_MESSAGE) {
        f->msg = ref_message(L, -1, mname, fname);
        keep(L, keepidx);
        lua_pop(L, 1);
      } else if (f->type == PB_ENUM && !lua_isnil(L, -1)) {
        check_enum(L, -1, mname, fname);
        keep(L, keepidx);
        f->ud = (void *)(intptr_t)lua_rawlen(L, keepidx);
      }
      f->packed = f->label == PB_REPEATED && pb_packable(f->type);
    }
    lua_settop(L, top + 1); /* the field's table */
    if (lua_getfield(L, -1, "packed") != LUA_TNIL) {
      if (!(f->label == PB_REPEATED && pb_packable(f->type)))
        luaL_error(L, "protobuf schema %s.%s: 'packed' applies to repeated numeric fields only", mname,
                   fname);
      f->packed = (uint8_t)lua_toboolean(L, -1);
    }
    lua_pop(L, 1);
    if (lua_getfield(L, -1, "oneof") != LUA_TNIL) {
      if (lua_type(L, -1) != LUA_TSTRING)
        luaL_error(L, "protobuf schema %s.%s: 'oneof' must be a string", mname, fname);
      if (f->label != PB_SINGULAR)
        luaL_error(L, "protobuf schema %s.%s: a oneof member cannot be %s", mname, fname,
                   f->label == PB_REPEATED ? "repeated or a map" : "optional");
      lua_pushvalue(L, -1);
      if (lua_rawget(L, top - 1) == LUA_TNUMBER) {
        f->oneof = (int)lua_tointeger(L, -1);
      } else {
        f->oneof = oneofs++;
        lua_pushvalue(L, -2);
        lua_pushinteger(L, f->oneof);
        lua_rawset(L, top - 1);
      }
      lua_pop(L, 1);
    }
    lua_settop(L, top);
  }
  lua_pop(L, 1); /* fields */
  dup = pb_msg_sort(&c->m);
  if (dup) luaL_error(L, "protobuf schema %s: field number %d is used twice", mname, (int)dup);
  for (i = 1; i < n; i++) {
    lua_Integer j;
    for (j = 0; j < i; j++)
      if (strcmp(c->fields[i].name, c->fields[j].name) == 0)
        luaL_error(L, "protobuf schema %s: field name '%s' is used twice", mname, c->fields[i].name);
  }
  c->noneofs = oneofs;
  if (oneofs > 0) { /* names by index, for messages */
    const char **names = lua_newuserdatauv(L, (size_t)oneofs * sizeof *names, 0);
    keep(L, keepidx);
    lua_pop(L, 1);
    lua_pushnil(L);
    while (lua_next(L, -2)) {
      names[lua_tointeger(L, -1)] = lua_tostring(L, -2);
      lua_pushvalue(L, -2);
      keep(L, keepidx);
      lua_pop(L, 2);
    }
    c->oneof_names = names;
  }
  lua_settop(L, ud);
  return c;
}

/* Compile the schema at idx in protected mode; on success move it (and every message it
 * compiled) from PENDING to CACHE. Pushes the cmsg. */
static int compile_p(lua_State *L) {
  compile(L, 1);
  return 1;
}

static cmsg *get_schema(lua_State *L, int idx) {
  cmsg *c;
  idx = lua_absindex(L, idx);
  luaL_checktype(L, idx, LUA_TTABLE);
  get_table(L, &CACHE_KEY);
  lua_pushvalue(L, idx);
  if (lua_rawget(L, -2) == LUA_TUSERDATA) {
    c = lua_touserdata(L, -1);
    lua_pop(L, 2);
    return c; /* kept alive by the cache while the schema table lives */
  }
  lua_pop(L, 2);
  lua_pushcfunction(L, compile_p);
  lua_pushvalue(L, idx);
  if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
    lua_newtable(L); /* drop the half-compiled messages */
    lua_rawsetp(L, LUA_REGISTRYINDEX, &PENDING_KEY);
    lua_error(L);
  }
  c = lua_touserdata(L, -1);
  lua_pop(L, 1);
  get_table(L, &CACHE_KEY);
  get_table(L, &PENDING_KEY);
  lua_pushnil(L);
  while (lua_next(L, -2)) {
    lua_pushvalue(L, -2);
    lua_insert(L, -2);
    lua_rawset(L, -5);
  }
  lua_pop(L, 2);
  lua_newtable(L);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &PENDING_KEY);
  return c;
}

/* ---- encoding ------------------------------------------------------------ */

#define BUF_MT "cseng.protobuf.buffer"

typedef struct {
  lua_State *L;
  pb_buf *b;
  char path[512];
  size_t plen;
  int depth;
} ectx;

static int buf_gc(lua_State *L) {
  pb_buf_free(luaL_checkudata(L, 1, BUF_MT));
  return 0;
}

static void path_push(ectx *e, const char *name, lua_Integer index, size_t *saved) {
  *saved = e->plen;
  if (e->plen < sizeof e->path - 1) {
    int k = name ? snprintf(e->path + e->plen, sizeof e->path - e->plen, ".%s", name)
                 : snprintf(e->path + e->plen, sizeof e->path - e->plen, "[%lld]", (long long)index);
    e->plen += (size_t)k;
    if (e->plen >= sizeof e->path) e->plen = sizeof e->path - 1;
  }
}

static void path_pop(ectx *e, size_t saved) {
  e->plen = saved;
  e->path[saved] = '\0';
}

static int enc_error(ectx *e, const char *fmt, const char *a, const char *b) {
  lua_State *L = e->L;
  lua_pushfstring(L, "protobuf.encode: %s: ", e->path);
  lua_pushfstring(L, fmt, a, b);
  lua_concat(L, 2);
  return lua_error(L);
}

static void oom(ectx *e, int rc) {
  if (rc == PB_ENOMEM) luaL_error(e->L, "protobuf.encode: out of memory");
  if (rc == PB_ERANGE) enc_error(e, "message longer than 4 GiB%s%s", "", "");
}

static void enc_msg(ectx *e, const cmsg *c, int idx, int ownerud);

/* Encode the scalar at idx as f's wire value (no tag). keepidx: owner's user-value table. */
static void enc_scalar_value(ectx *e, const pb_field *f, int idx, int keepidx) {
  lua_State *L = e->L;
  int rc = 0;
  switch (f->type) {
    case PB_FLOAT:
    case PB_DOUBLE:
      if (lua_type(L, idx) != LUA_TNUMBER)
        enc_error(e, "expected a number, got %s%s", luaL_typename(L, idx), "");
      rc = pb_put_value(e->b, f->type, 0, lua_tonumber(L, idx));
      break;
    case PB_BOOL:
      if (lua_type(L, idx) != LUA_TBOOLEAN)
        enc_error(e, "expected a boolean, got %s%s", luaL_typename(L, idx), "");
      rc = pb_put_value(e->b, f->type, lua_toboolean(L, idx), 0);
      break;
    case PB_STRING:
    case PB_BYTES: {
      size_t n;
      const char *s;
      if (lua_type(L, idx) != LUA_TSTRING)
        enc_error(e, "expected a string, got %s%s", luaL_typename(L, idx), "");
      s = lua_tolstring(L, idx, &n);
      rc = pb_put_varint(e->b, n);
      if (!rc) rc = pb_put_raw(e->b, s, n);
      break;
    }
    default: {
      int isnum = 0;
      lua_Integer v = lua_tointegerx(L, idx, &isnum);
      if (lua_type(L, idx) == LUA_TSTRING) isnum = 0; /* no string coercion */
      if (!isnum && f->type == PB_ENUM && lua_type(L, idx) == LUA_TSTRING && f->ud) {
        lua_rawgeti(L, keepidx, (lua_Integer)(intptr_t)f->ud);
        lua_getfield(L, -1, "values");
        lua_pushvalue(L, idx);
        lua_rawget(L, -2);
        v = lua_tointegerx(L, -1, &isnum);
        lua_pop(L, 3);
        if (!isnum) enc_error(e, "'%s' is not a value of this enum%s", lua_tostring(L, idx), "");
      }
      if (!isnum) {
        if (lua_type(L, idx) == LUA_TNUMBER)
          enc_error(e, "expected an integer, got a fractional number%s%s", "", "");
        enc_error(e, "expected an integer, got %s%s", luaL_typename(L, idx), "");
      }
      switch (f->type) {
        case PB_INT32:
        case PB_SINT32:
        case PB_SFIXED32:
        case PB_ENUM:
          if (v < INT32_MIN || v > INT32_MAX)
            enc_error(e, "%s out of range for %s", lua_pushfstring(L, "%I", v), pb_type_name(f->type));
          break;
        case PB_UINT32:
        case PB_FIXED32:
          if (v < 0 || v > (lua_Integer)UINT32_MAX)
            enc_error(e, "%s out of range for %s", lua_pushfstring(L, "%I", v), pb_type_name(f->type));
          break;
        default: break;
      }
      rc = pb_put_value(e->b, f->type, v, 0);
    }
  }
  oom(e, rc);
}

static int is_default(lua_State *L, const pb_field *f, int idx) {
  switch (f->type) {
    case PB_FLOAT:
    case PB_DOUBLE: {
      double d;
      if (lua_type(L, idx) != LUA_TNUMBER) return 0;
      d = lua_tonumber(L, idx);
      return d == 0 && !signbit(d);
    }
    case PB_BOOL: return lua_type(L, idx) == LUA_TBOOLEAN && !lua_toboolean(L, idx);
    case PB_STRING:
    case PB_BYTES: return lua_type(L, idx) == LUA_TSTRING && lua_rawlen(L, idx) == 0;
    case PB_MESSAGE: return 0;
    default: {
      int isnum;
      lua_Integer v;
      if (lua_type(L, idx) != LUA_TNUMBER) return 0;
      v = lua_tointegerx(L, idx, &isnum);
      return isnum && v == 0;
    }
  }
}

/* One element with its tag: a message, or a scalar. */
static void enc_one(ectx *e, const pb_field *f, int idx, int keepidx) {
  int rc;
  if (f->type == PB_MESSAGE) {
    size_t mark;
    if (!lua_istable(e->L, idx))
      enc_error(e, "expected a table (message %s), got %s", f->msg->name, luaL_typename(e->L, idx));
    oom(e, pb_put_tag(e->b, f->number, PB_WT_LEN));
    mark = pb_begin_len(e->b);
    enc_msg(e, (const cmsg *)f->msg->ud, idx, keepidx);
    rc = pb_end_len(e->b, mark);
    oom(e, rc);
    return;
  }
  oom(e, pb_put_tag(e->b, f->number, pb_wire_type(f->type)));
  enc_scalar_value(e, f, idx, keepidx);
}

static int key_cmp(lua_State *L, int a, int b) { /* for map keys: sort numbers, strings, booleans */
  int ta = lua_type(L, a), tb = lua_type(L, b);
  if (ta != tb) return ta < tb;
  if (ta == LUA_TBOOLEAN) return !lua_toboolean(L, a) && lua_toboolean(L, b);
  return lua_compare(L, a, b, LUA_OPLT);
}

/* Elements 1..n of the list at v, each encoded by one (enc_scalar_value: packed, or enc_one) with
 * its index on the error path. */
static void enc_each(ectx *e, const pb_field *f, int v, lua_Integer n, int keepidx,
                     void (*one)(ectx *, const pb_field *, int, int)) {
  lua_State *L = e->L;
  lua_Integer j;
  for (j = 1; j <= n; j++) {
    size_t s2;
    lua_rawgeti(L, v, j);
    path_push(e, NULL, j, &s2);
    one(e, f, lua_gettop(L), keepidx);
    path_pop(e, s2);
    lua_pop(L, 1);
  }
}

static void enc_map(ectx *e, const pb_field *f, int idx, int keepidx) {
  lua_State *L = e->L;
  const cmsg *entry = (const cmsg *)f->msg;
  lua_Integer n = 0, i, j;
  int keys;
  if (!lua_istable(L, idx)) enc_error(e, "expected a table (a map), got %s%s", luaL_typename(L, idx), "");
  lua_newtable(L);
  keys = lua_gettop(L);
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    lua_pop(L, 1);
    lua_pushvalue(L, -1);
    lua_rawseti(L, keys, ++n);
  }
  for (i = 2; i <= n; i++) { /* insertion sort: deterministic output (maps are small) */
    for (j = i; j > 1; j--) {
      lua_rawgeti(L, keys, j);
      lua_rawgeti(L, keys, j - 1);
      if (!key_cmp(L, -2, -1)) {
        lua_pop(L, 2);
        break;
      }
      lua_rawseti(L, keys, j);
      lua_rawseti(L, keys, j - 1);
    }
  }
  for (i = 1; i <= n; i++) {
    size_t mark, saved;
    int k, v;
    lua_rawgeti(L, keys, i);
    k = lua_gettop(L);
    lua_pushvalue(L, k);
    lua_rawget(L, idx);
    v = lua_gettop(L);
    saved = e->plen; /* "[key]" */
    {
      const char *ks = luaL_tolstring(L, k, NULL);
      int w = snprintf(e->path + e->plen, sizeof e->path - e->plen, "[%s]", ks);
      if (w > 0) e->plen = e->plen + (size_t)w < sizeof e->path ? e->plen + (size_t)w : sizeof e->path - 1;
      lua_pop(L, 1);
    }
    oom(e, pb_put_tag(e->b, f->number, PB_WT_LEN));
    mark = pb_begin_len(e->b);
    if (entry->fields[0].type == PB_STRING && lua_type(L, k) != LUA_TSTRING)
      enc_error(e, "map key: expected a string, got %s%s", luaL_typename(L, k), "");
    oom(e, pb_put_tag(e->b, 1, pb_wire_type(entry->fields[0].type)));
    enc_scalar_value(e, &entry->fields[0], k, keepidx);
    if (entry->fields[1].type == PB_MESSAGE) {
      enc_one(e, &entry->fields[1], v, keepidx);
    } else { /* an enum value's schema is kept in the owner's table (keepidx) */
      oom(e, pb_put_tag(e->b, 2, pb_wire_type(entry->fields[1].type)));
      enc_scalar_value(e, &entry->fields[1], v, keepidx);
    }
    oom(e, pb_end_len(e->b, mark));
    path_pop(e, saved);
    lua_settop(L, keys);
  }
  lua_settop(L, keys - 1);
}

/* Encode the message table at idx with schema c. ownerud is unused (kept for symmetry). */
static void enc_msg(ectx *e, const cmsg *c, int idx, int ownerud) {
  lua_State *L = e->L;
  size_t i, matched = 0, present = 0;
  int oneof_set[64];
  const char *oneof_first[64];
  (void)ownerud;
  if (++e->depth > PB_MAX_DEPTH) enc_error(e, "nesting deeper than 64 (a cycle?)%s%s", "", "");
  luaL_checkstack(L, 20, "protobuf.encode");
  idx = lua_absindex(L, idx);
  memset(oneof_set, 0, sizeof oneof_set);
  for (i = 0; i < c->m.nfields; i++) {
    const pb_field *f = &c->fields[i];
    size_t saved;
    int v;
    lua_getfield(L, idx, f->name);
    v = lua_gettop(L);
    if (lua_isnil(L, v)) {
      lua_pop(L, 1);
      continue;
    }
    matched++;
    path_push(e, f->name, 0, &saved);
    if (f->oneof >= 0 && f->oneof < 64) {
      if (oneof_set[f->oneof])
        enc_error(e, "oneof '%s': '%s' is set too", c->oneof_names[f->oneof], oneof_first[f->oneof]);
      oneof_set[f->oneof] = 1;
      oneof_first[f->oneof] = f->name;
    }
    {
      /* the user-value table of c, for enum names */
      int kt;
      lua_pushnil(L);
      kt = lua_gettop(L);
      if (f->ud || (f->is_map && ((const cmsg *)f->msg)->fields[1].ud)) {
        lua_rawgetp(L, LUA_REGISTRYINDEX, c); /* c's keep table: the enum schemas (compile) */
        lua_replace(L, kt);
      }
      if (f->is_map) {
        enc_map(e, f, v, kt);
      } else if (f->label == PB_REPEATED) {
        lua_Integer n;
        if (!lua_istable(L, v)) enc_error(e, "expected a list (table), got %s%s", luaL_typename(L, v), "");
        n = (lua_Integer)lua_rawlen(L, v);
        if (n > 0 && f->packed) {
          size_t mark;
          oom(e, pb_put_tag(e->b, f->number, PB_WT_LEN));
          mark = pb_begin_len(e->b);
          enc_each(e, f, v, n, kt, enc_scalar_value);
          oom(e, pb_end_len(e->b, mark));
        } else {
          enc_each(e, f, v, n, kt, enc_one);
        }
      } else if (f->label == PB_SINGULAR && f->oneof < 0 && f->type != PB_MESSAGE && is_default(L, f, v)) {
        /* proto3: a default value is not sent */
      } else {
        enc_one(e, f, v, kt);
      }
    }
    path_pop(e, saved);
    lua_settop(L, v - 1);
  }
  /* every key of the table must be a field */
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    present++;
    lua_pop(L, 1);
  }
  if (present != matched) {
    lua_pushnil(L);
    while (lua_next(L, idx)) {
      int known = 0;
      lua_pop(L, 1);
      if (lua_type(L, -1) == LUA_TSTRING) {
        const char *k = lua_tostring(L, -1);
        for (i = 0; i < c->m.nfields && !known; i++) known = strcmp(c->fields[i].name, k) == 0;
      }
      if (!known) {
        const char *k = luaL_tolstring(L, -1, NULL);
        enc_error(e, "unknown field '%s' (message %s)", k, c->m.name);
      }
    }
  }
  e->depth--;
}

/* protobuf.encode(schema, value) -> bytes */
static int pb_lencode(lua_State *L) {
  ectx e;
  cmsg *c;
  pb_buf *b;
  c = get_schema(L, 1);
  luaL_checktype(L, 2, LUA_TTABLE);
  lua_settop(L, 2);
  b = lua_newuserdatauv(L, sizeof *b, 0);
  memset(b, 0, sizeof *b);
  luaL_setmetatable(L, BUF_MT);
  memset(&e, 0, sizeof e);
  e.L = L;
  e.b = b;
  e.plen = (size_t)snprintf(e.path, sizeof e.path, "%s", c->m.name);
  enc_msg(&e, c, 2, 0);
  lua_pushlstring(L, b->p ? (const char *)b->p : "", b->len);
  pb_buf_free(b);
  return 1;
}

/* ---- decoding ------------------------------------------------------------ */

typedef struct {
  lua_State *L;
  int defaults;
  int depth;
  const pb_msg *msgs[PB_MAX_DEPTH + 2];
} dctx;

static void push_value(lua_State *L, const pb_field *f, const pb_value *v) {
  switch (f->type) {
    case PB_FLOAT:
    case PB_DOUBLE: lua_pushnumber(L, v->d); break;
    case PB_BOOL: lua_pushboolean(L, v->i != 0); break;
    case PB_STRING:
    case PB_BYTES: lua_pushlstring(L, (const char *)v->p, v->n); break;
    default: lua_pushinteger(L, (lua_Integer)v->i); break;
  }
}

static void clear_oneof(lua_State *L, const pb_msg *m, const pb_field *f, int t) {
  size_t i;
  if (f->oneof < 0) return;
  for (i = 0; i < m->nfields; i++)
    if (m->fields[i].oneof == f->oneof && &m->fields[i] != f) {
      lua_pushnil(L);
      lua_setfield(L, t, m->fields[i].name);
    }
}

/* Store the value on top into the table below it as field f of message m. */
static void store(lua_State *L, const pb_msg *m, const pb_field *f) {
  int t = lua_gettop(L) - 1;
  if (f->label == PB_REPEATED) {
    if (lua_getfield(L, t, f->name) != LUA_TTABLE) {
      lua_pop(L, 1);
      lua_newtable(L);
      lua_pushvalue(L, -1);
      lua_setfield(L, t, f->name);
    }
    lua_insert(L, -2);
    lua_rawseti(L, -2, (lua_Integer)lua_rawlen(L, -2) + 1);
    lua_pop(L, 1);
  } else {
    clear_oneof(L, m, f, t);
    lua_setfield(L, t, f->name);
  }
}

static int d_scalar(void *ud, const pb_field *f, const pb_value *v) {
  dctx *c = ud;
  push_value(c->L, f, v);
  store(c->L, c->msgs[c->depth], f);
  return 0;
}

static void fill_defaults(lua_State *L, const pb_msg *m, int t) {
  size_t i;
  for (i = 0; i < m->nfields; i++) {
    const pb_field *f = &m->fields[i];
    if (f->oneof >= 0 || f->label == PB_OPTIONAL || (f->type == PB_MESSAGE && f->label != PB_REPEATED))
      continue;
    if (lua_getfield(L, t, f->name) != LUA_TNIL) {
      lua_pop(L, 1);
      continue;
    }
    lua_pop(L, 1);
    if (f->label == PB_REPEATED) lua_newtable(L);
    else switch (f->type) {
        case PB_FLOAT:
        case PB_DOUBLE: lua_pushnumber(L, 0); break;
        case PB_BOOL: lua_pushboolean(L, 0); break;
        case PB_STRING:
        case PB_BYTES: lua_pushliteral(L, ""); break;
        default: lua_pushinteger(L, 0); break;
      }
    lua_setfield(L, t, f->name);
  }
}

static int d_begin(void *ud, const pb_field *f) {
  dctx *c = ud;
  lua_State *L = c->L;
  luaL_checkstack(L, 8, "protobuf.decode");
  if (!f->is_map && f->label != PB_REPEATED) { /* a repeated occurrence of a singular message merges */
    if (lua_getfield(L, -1, f->name) != LUA_TTABLE) {
      lua_pop(L, 1);
      lua_newtable(L);
    }
  } else {
    lua_newtable(L);
  }
  c->msgs[++c->depth] = f->msg;
  return 0;
}

static void push_default(lua_State *L, const pb_field *f) {
  switch (f->type) {
    case PB_FLOAT:
    case PB_DOUBLE: lua_pushnumber(L, 0); break;
    case PB_BOOL: lua_pushboolean(L, 0); break;
    case PB_STRING:
    case PB_BYTES: lua_pushliteral(L, ""); break;
    case PB_MESSAGE: lua_newtable(L); break;
    default: lua_pushinteger(L, 0); break;
  }
}

static int d_end(void *ud, const pb_field *f) {
  dctx *c = ud;
  lua_State *L = c->L;
  c->depth--;
  if (f->is_map) { /* {key=, value=} -> parent[name][key] = value */
    int entry = lua_gettop(L), t = entry - 1;
    const pb_msg *em = f->msg;
    if (lua_getfield(L, t, f->name) != LUA_TTABLE) {
      lua_pop(L, 1);
      lua_newtable(L);
      lua_pushvalue(L, -1);
      lua_setfield(L, t, f->name);
    }
    if (lua_getfield(L, entry, "key") == LUA_TNIL) {
      lua_pop(L, 1);
      push_default(L, &em->fields[0]);
    }
    if (lua_getfield(L, entry, "value") == LUA_TNIL) {
      lua_pop(L, 1);
      push_default(L, &em->fields[1]);
    } else if (c->defaults && em->fields[1].type == PB_MESSAGE) {
      fill_defaults(L, em->fields[1].msg, lua_gettop(L));
    }
    lua_rawset(L, -3);
    lua_settop(L, t);
    return 0;
  }
  if (c->defaults) fill_defaults(L, f->msg, lua_gettop(L));
  store(L, c->msgs[c->depth], f);
  return 0;
}

/* protobuf.decode(schema, bytes [, opts]) -> table | nil, msg, "EPROTOBUF" */
static int pb_ldecode(lua_State *L) {
  static const pb_callbacks cb = {d_scalar, d_begin, d_end};
  size_t n;
  const char *p;
  cmsg *c = get_schema(L, 1);
  dctx d;
  pb_error err;
  int rc;
  p = luaL_checklstring(L, 2, &n);
  memset(&d, 0, sizeof d);
  d.L = L;
  if (!lua_isnoneornil(L, 3)) {
    luaL_checktype(L, 3, LUA_TTABLE);
    lua_getfield(L, 3, "defaults");
    d.defaults = lua_toboolean(L, -1);
    lua_pop(L, 1);
  }
  lua_settop(L, 3);
  lua_newtable(L);
  d.msgs[0] = &c->m;
  rc = pb_decode(&c->m, (const uint8_t *)p, n, &cb, &d, &err);
  if (rc != PB_OK) {
    char msg[400];
    pb_error_message(&err, msg, sizeof msg);
    lua_settop(L, 3);
    return cs_fail(L, "EPROTOBUF", "%s", msg);
  }
  lua_settop(L, 4);
  if (d.defaults) fill_defaults(L, &c->m, 4);
  return 1;
}

static int pb_lcompile(lua_State *L) {
  get_schema(L, 1);
  lua_pushboolean(L, 1);
  return 1;
}

/* ---- gRPC framing ------------------------------------------------------ */

static int pb_lframe(lua_State *L) {
  size_t n;
  const char *p = luaL_checklstring(L, 1, &n);
  uint8_t hdr[GRPC_HEADER_LEN];
  luaL_Buffer b;
  if (grpc_frame_header(hdr, lua_toboolean(L, 2), n) != 0)
    return luaL_argerror(L, 1, "payload longer than 4 GiB - 1");
  luaL_buffinit(L, &b);
  luaL_addlstring(&b, (const char *)hdr, sizeof hdr);
  luaL_addlstring(&b, p, n);
  luaL_pushresult(&b);
  return 1;
}

static int pb_ldeframe(lua_State *L) {
  size_t n, at = 0;
  const char *p = luaL_checklstring(L, 1, &n);
  lua_Integer max = luaL_optinteger(L, 2, 4 << 20);
  lua_Integer k = 0;
  luaL_argcheck(L, max >= 0 && (lua_Unsigned)max <= 0xffffffffu, 2, "max must be 0..4 GiB - 1");
  lua_newtable(L);
  for (;;) {
    unsigned flags;
    const uint8_t *payload;
    size_t len;
    int64_t r = grpc_frame_parse((const uint8_t *)p + at, n - at, (size_t)max, &flags, &payload, &len);
    if (r == 0) break;
    if (r == PB_EWIRE) {
      char hx[8];
      snprintf(hx, sizeof hx, "0x%02x", (unsigned char)p[at]);
      return cs_fail(L, "EPROTOBUF", "gRPC frame at byte %d: flags byte %s (only 0 and 1 exist)", (int)at,
                     hx);
    }
    if (r == PB_ETOOBIG)
      return cs_fail(L, "EPROTOBUF", "gRPC frame at byte %d: message larger than the %d-byte limit", (int)at,
                     (int)max);
    if (flags & 1)
      return cs_fail(L, "EPROTOBUF",
                     "gRPC frame at byte %d: compressed message (no grpc-encoding is supported)", (int)at);
    lua_pushlstring(L, (const char *)payload, len);
    lua_rawseti(L, -2, ++k);
    at += (size_t)r;
  }
  lua_pushinteger(L, (lua_Integer)at);
  return 2;
}

int luaopen_cseng_protobuf(lua_State *L) {
  static const luaL_Reg funcs[] = {{"encode", pb_lencode}, {"decode", pb_ldecode},   {"compile", pb_lcompile},
                                   {"frame", pb_lframe},   {"deframe", pb_ldeframe}, {NULL, NULL}};
  luaL_newmetatable(L, BUF_MT);
  lua_pushcfunction(L, buf_gc);
  lua_setfield(L, -2, "__gc");
  lua_pop(L, 1);
  luaL_newlib(L, funcs);
  return 1;
}
