/*
 * lconnect.c: Lua binding of the Connect envelope codec (engine/connect.c). Module
 * cseng.connect.
 *
 *   connect.encode(payload [, flags])  -> the 5-byte header followed by payload
 *   connect.decoder([max_frame])       -> a decoder (max_frame default 16 MiB)
 *     d:feed(chunk)   -> list of {flags=, data=, end_stream=bool, compressed=bool}
 *                        (possibly empty) | nil, message, "ECONNECT"
 *     d:finish()      -> true | nil, message, "ECONNECT" (a partial frame remains)
 *     d:ended()       -> whether an end-of-stream frame (flag 0x02) was delivered
 *     d:buffered()    -> bytes held of an unfinished frame (header included)
 *     d:close(), __close, __gc: frees the buffer (one idempotent close)
 *
 * Synchronous and small; errors are sticky (a failed decoder keeps failing). Methods on
 * a closed decoder raise.
 */
#include "aux.h"
#include "core.h"
#include "connect.h"

#include <string.h>

#define DECODER_MT "cseng.connect.decoder"

typedef struct {
  connect_decoder d;
  int closed;
} box;

/** connect.encode(payload [, flags]) -> envelope bytes */
static int connect_encode(lua_State *L) {
  size_t len;
  const char *payload = luaL_checklstring(L, 1, &len);
  lua_Integer flags = luaL_optinteger(L, 2, 0);
  uint8_t hdr[CONNECT_HEADER_LEN];
  luaL_Buffer b;
  luaL_argcheck(L, flags >= 0 && flags <= 255, 2, "flags must be 0..255");
  if (connect_header(hdr, (unsigned)flags, (uint64_t)len) != 0)
    return luaL_argerror(L, 1, "payload longer than 4 GiB - 1");
  luaL_buffinit(L, &b);
  luaL_addlstring(&b, (const char *)hdr, sizeof hdr);
  luaL_addlstring(&b, payload, len);
  luaL_pushresult(&b);
  return 1;
}

/** connect.decoder([max_frame]) -> decoder */
static int connect_new_decoder(lua_State *L) {
  lua_Integer max = luaL_optinteger(L, 1, CONNECT_MAX_FRAME_DEFAULT);
  box *bx;
  luaL_argcheck(L, max > 0 && (lua_Unsigned)max <= 0xffffffffu, 1, "max_frame must be 1..4 GiB - 1");
  bx = lua_newuserdatauv(L, sizeof *bx, 0);
  memset(bx, 0, sizeof *bx);
  connect_decoder_init(&bx->d, (size_t)max);
  luaL_setmetatable(L, DECODER_MT);
  return 1;
}

static box *check_open(lua_State *L) {
  box *bx = luaL_checkudata(L, 1, DECODER_MT);
  if (bx->closed) luaL_error(L, "attempt to use a closed connect decoder");
  return bx;
}

static int fail_with(lua_State *L, box *bx) {
  char msg[200];
  connect_decoder_message(&bx->d, msg, sizeof msg);
  return cs_fail(L, "ECONNECT", "%s", msg);
}

/* Frame callback: append {flags, data, end_stream, compressed} to the list on top. */
static int push_frame(void *ud, unsigned flags, const uint8_t *data, size_t len) {
  lua_State *L = ud;
  lua_createtable(L, 0, 4);
  lua_pushinteger(L, (lua_Integer)flags);
  lua_setfield(L, -2, "flags");
  lua_pushlstring(L, (const char *)data, len);
  lua_setfield(L, -2, "data");
  lua_pushboolean(L, (flags & CONNECT_FLAG_END_STREAM) != 0);
  lua_setfield(L, -2, "end_stream");
  lua_pushboolean(L, (flags & CONNECT_FLAG_COMPRESSED) != 0);
  lua_setfield(L, -2, "compressed");
  lua_rawseti(L, -2, (lua_Integer)lua_rawlen(L, -2) + 1);
  return 0;
}

/** d:feed(chunk) -> frames | nil, msg, "ECONNECT" */
static int decoder_feed(lua_State *L) {
  box *bx = check_open(L);
  size_t n;
  const char *p = luaL_checklstring(L, 2, &n);
  lua_settop(L, 2);
  lua_newtable(L);
  luaL_checkstack(L, 8, "connect decoder");
  if (connect_decoder_feed(&bx->d, (const uint8_t *)p, n, push_frame, L) != CONNECT_OK)
    return fail_with(L, bx);
  return 1;
}

/** d:finish() -> true | nil, msg, "ECONNECT" */
static int decoder_finish(lua_State *L) {
  box *bx = check_open(L);
  if (connect_decoder_finish(&bx->d) != CONNECT_OK) return fail_with(L, bx);
  lua_pushboolean(L, 1);
  return 1;
}

static int decoder_ended(lua_State *L) {
  lua_pushboolean(L, check_open(L)->d.ended);
  return 1;
}

static int decoder_buffered(lua_State *L) {
  box *bx = check_open(L);
  lua_pushinteger(L, (lua_Integer)(bx->d.hdr_len + bx->d.buf_len));
  return 1;
}

static int decoder_close(lua_State *L) {
  box *bx = luaL_checkudata(L, 1, DECODER_MT);
  if (!bx->closed) {
    connect_decoder_free(&bx->d);
    bx->closed = 1;
  }
  return 0;
}

static int decoder_tostring(lua_State *L) {
  box *bx = luaL_checkudata(L, 1, DECODER_MT);
  lua_pushfstring(L, "cseng.connect.decoder (%s)", bx->closed ? "closed" : "open");
  return 1;
}

int luaopen_cseng_connect(lua_State *L) {
  static const luaL_Reg funcs[] = {
      {"encode", connect_encode}, {"decoder", connect_new_decoder}, {NULL, NULL}};
  static const luaL_Reg meth[] = {{"feed", decoder_feed},   {"finish", decoder_finish},
                                  {"ended", decoder_ended}, {"buffered", decoder_buffered},
                                  {"close", decoder_close}, {NULL, NULL}};
  static const luaL_Reg meta[] = {
      {"__gc", decoder_close}, {"__close", decoder_close}, {"__tostring", decoder_tostring}, {NULL, NULL}};
  cs_new_class(L, DECODER_MT, meth, meta);
  luaL_newlib(L, funcs);
  lua_pushinteger(L, CONNECT_FLAG_COMPRESSED);
  lua_setfield(L, -2, "FLAG_COMPRESSED");
  lua_pushinteger(L, CONNECT_FLAG_END_STREAM);
  lua_setfield(L, -2, "FLAG_END_STREAM");
  return 1;
}
