/* lbootstrap.c: the cseng.bootstrap module, the percentile bootstrap CI of a type-7 quantile in C.
 *
 *   bootstrap.quantile_ci(xs, q, reps, seed, level) -> lo, hi   (nothing for an empty xs)
 *
 * The same numbers as lua/cseng/lib/stats.lua's Lua resampler, bit for bit (spec/lib/stats_spec.lua
 * holds them to the generic Lua path, which draws the same indices): stats.rng's generator
 * (splitmix64-scrambled seed, xorshift64* with Vigna's shifts 12, 25, 27 and multiplier
 * 0x2545F4914F6CDD1D, draws in [1, n] without modulo bias by rejecting above the last whole block
 * of n), replicate r drawing n indices in order, the replicate's type-7 quantile found by walking
 * the counts of the ranks drawn (ties ranked by value, then by index), the replicates sorted and
 * their type-7 quantiles (1-level)/2 and (1+level)/2 taken. In Lua a replicate costs about 200 ns
 * a draw; here about 5: the history store bootstraps every series of every run it indexes.
 * Synchronous: it runs on the loop thread (reps x n draws: microseconds to milliseconds). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>

static uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

typedef struct {
  double v;
  lua_Integer i;
} item;

static int by_value_then_index(const void *a, const void *b) {
  const item *x = a, *y = b;
  if (x->v != y->v) return x->v < y->v ? -1 : 1;
  return (x->i > y->i) - (x->i < y->i);
}

static int by_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* stats.quantile_sorted: type 7 over an ascending array of n >= 1 */
static double quantile_sorted(const double *s, lua_Integer n, double q) {
  if (n == 1) return s[0];
  double h = (double)(n - 1) * q + 1;
  lua_Integer lo = (lua_Integer)floor(h);
  lua_Integer hi = lo + 1 < n ? lo + 1 : n;
  return s[lo - 1] + (h - (double)lo) * (s[hi - 1] - s[lo - 1]);
}

static int l_quantile_ci(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  double q = luaL_checknumber(L, 2);
  lua_Integer reps = luaL_checkinteger(L, 3);
  int isint = 0;
  lua_Integer seed = lua_tointegerx(L, 4, &isint);
  double level = luaL_checknumber(L, 5);
  if (!isint) seed = 88172645463325252LL; /* stats.rng's default, as math.tointeger(seed) or ... */
  if (!(q >= 0 && q <= 1)) return luaL_argerror(L, 2, "a quantile in [0, 1]");
  if (reps < 1 || reps > 10000000) return luaL_argerror(L, 3, "replicates in [1, 10^7]");
  lua_Integer n = (lua_Integer)luaL_len(L, 1);
  if (n == 0) return 0;
  if (n > 100000000) return luaL_argerror(L, 1, "too many values");
  item *it = malloc((size_t)n * sizeof *it);
  double *sorted = malloc((size_t)n * sizeof *sorted);
  lua_Integer *rank = malloc((size_t)n * sizeof *rank);
  lua_Integer *counts = malloc((size_t)n * sizeof *counts);
  double *est = malloc((size_t)reps * sizeof *est);
  if (!it || !sorted || !rank || !counts || !est) {
    free(it), free(sorted), free(rank), free(counts), free(est);
    return luaL_error(L, "out of memory");
  }
  for (lua_Integer k = 1; k <= n; k++) {
    lua_rawgeti(L, 1, k);
    int ok = 0;
    double v = lua_tonumberx(L, -1, &ok);
    lua_pop(L, 1);
    if (!ok) {
      free(it), free(sorted), free(rank), free(counts), free(est);
      return luaL_error(L, "bootstrap: value %d is not a number", (int)k);
    }
    it[k - 1].v = v;
    it[k - 1].i = k;
  }
  qsort(it, (size_t)n, sizeof *it, by_value_then_index);
  for (lua_Integer r = 0; r < n; r++) {
    sorted[r] = it[r].v;
    rank[it[r].i - 1] = r; /* 0-based rank of the value at index i */
  }
  double h = (double)(n - 1) * q + 1;
  lua_Integer lo = (lua_Integer)floor(h);
  double frac = h - (double)lo;
  uint64_t x = splitmix64((uint64_t)seed);
  if (x == 0) x = 88172645463325252ULL;
  uint64_t m = (uint64_t)n;
  uint64_t maxint = (uint64_t)INT64_MAX;
  uint64_t lim = maxint - (maxint % m + 1) % m;
  for (lua_Integer rep = 0; rep < reps; rep++) {
    memset(counts, 0, (size_t)n * sizeof *counts);
    for (lua_Integer d = 0; d < n;) {
      x ^= x >> 12;
      x ^= x << 25;
      x ^= x >> 27;
      uint64_t v = (x * 0x2545F4914F6CDD1DULL) >> 1;
      if (v <= lim) {
        counts[rank[v % m]]++;
        d++;
      }
    }
    double e;
    if (n == 1) e = sorted[0];
    else {
      lua_Integer cum = 0, r = -1;
      do { r++; cum += counts[r]; } while (cum < lo);
      double a = sorted[r];
      if (lo >= n) e = a + frac * (a - a);
      else {
        while (cum < lo + 1) { r++; cum += counts[r]; }
        e = a + frac * (sorted[r] - a);
      }
    }
    est[rep] = e;
  }
  qsort(est, (size_t)reps, sizeof *est, by_double);
  double al = (1 - level) / 2;
  lua_pushnumber(L, quantile_sorted(est, reps, al));
  lua_pushnumber(L, quantile_sorted(est, reps, 1 - al));
  free(it), free(sorted), free(rank), free(counts), free(est);
  return 2;
}

int luaopen_cseng_bootstrap(lua_State *L) {
  static const luaL_Reg funcs[] = {{"quantile_ci", l_quantile_ci}, {NULL, NULL}};
  luaL_newlib(L, funcs);
  return 1;
}
