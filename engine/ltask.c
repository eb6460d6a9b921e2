/*
 * ltask.c: tasks (Lua coroutines) and the scheduler that runs them on the one
 * libuv loop. Module cseng.task: spawn, join, sleep, yield, semaphore, cancel.
 *
 * Every task's coroutine runs a C body that calls the user function inside
 * lua_pcallk with a traceback handler, so an error or a cancellation unwinds
 * inside the coroutine and to-be-closed variables are closed there (and their
 * __close may yield: a cleanup can still do HTTP).
 *
 * Loop callbacks never run Lua: they mark an op ready (cs_op_ready), which
 * queues its task; the scheduler resumes queued tasks from the main loop.
 */
#include "aux.h"
#include "core.h"
#include "redact.h"

#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TASK_MT "cseng.task"
#define SEM_MT "cseng.semaphore"
#define ERROR_MT "cseng.error"

enum { T_READY, T_RUNNING, T_WAITING, T_DONE };
static const char *const state_names[] = {"ready", "running", "waiting", "done"};

typedef struct joinwait joinwait;

struct cs_task {
  lua_State *co;
  int co_ref, self_ref, result_ref;
  int state, nargs;
  int cancel_pending, cancelled, ok, joined, in_ready;
  int delivered; /* the cancellation has been raised in the task at least once */
  int strict;    /* depth of task.guard calls: inside, the cancellation stays raised */
  lua_Integer id;
  cs_op *op;
  uint64_t wakes;       /* times it was resumed */
  uint64_t answered_at, answered_wake; /* cs_task_answered: when, and at which wake-up */
  uint64_t handshakes, handshake_ns;   /* cs_task_handshake: its calls' waits for new connections */
  cs_task *rnext;       /* ready queue */
  cs_task *prev, *next; /* live list */
  joinwait *joiners;
};

struct joinwait {
  cs_op op;
  cs_task *target;
  joinwait *prev, *next;
};

static struct {
  lua_State *L;
  uv_loop_t loop;
  cs_task *ready_head, *ready_tail;
  cs_task *live;
  int nlive;
  cs_task *current;
  lua_Integer next_id;
  int in_uv_run;      /* inside uv_run: loop callbacks are running */
  uv_async_t sigwake; /* the signal handler wakes the loop through it */
  int sigseen;        /* signals the loop has acted on */
  void (*flush)(void); /* gathered writes out (cs_sched_set_flush) */
  uint64_t flush_since; /* when the first write waiting for it was gathered (0: none) */
} S;

/* What the signal handler and the hook share. The handler runs on whatever the
 * process was doing, Lua code included: it only counts, arms a count hook on the
 * coroutine executing Lua at that instant (a task's, or one a task resumed:
 * lua_sethook is async-signal-safe, as lua.c uses it), and wakes the loop
 * (uv_async_send is too). */
static volatile sig_atomic_t sig_count, sig_last;
static lua_State *volatile running_co;
/* whether the engine says "cancelling N task(s)" itself on the first signal (a run's
 * presentation that says it in its own terms turns it off: task.interrupt_notice) */
static int notice_on = 1;

static void process_signal(void);
static void arm_hook(lua_State *co, cs_task *t);

uv_loop_t *cs_loop(void) { return &S.loop; }
int cs_interrupted(void) { return (int)sig_count; }

/* ---- errors ---------------------------------------------------------- */

/* Pushes "[stage: ]message (code)" from the fields of the table at idx, or returns 0 (and
 * pushes nothing) when it has neither a message nor a code. */
static int push_fields(lua_State *L, int idx) {
  idx = lua_absindex(L, idx);
  lua_getfield(L, idx, "message");
  lua_getfield(L, idx, "code");
  lua_getfield(L, idx, "stage");
  if (lua_type(L, -3) != LUA_TSTRING && lua_type(L, -2) != LUA_TSTRING) {
    lua_pop(L, 3);
    return 0;
  }
  if (lua_type(L, -1) == LUA_TSTRING)
    lua_pushfstring(L, "%s: %s (%s)", lua_tostring(L, -1), luaL_optstring(L, -3, "error"),
                    luaL_optstring(L, -2, "?"));
  else lua_pushfstring(L, "%s (%s)", luaL_optstring(L, -3, "error"), luaL_optstring(L, -2, "?"));
  lua_replace(L, -4);
  lua_pop(L, 2);
  return 1;
}

/* "message (code)", and "stage: message (code)" when the error names its stage. */
static int error_tostring(lua_State *L) {
  if (!push_fields(L, 1)) lua_pushliteral(L, "error (?)");
  return 1;
}

void cs_push_error(lua_State *L, const char *code, const char *message) {
  lua_createtable(L, 0, 4);
  lua_pushstring(L, code);
  lua_setfield(L, -2, "code");
  lua_pushstring(L, message);
  lua_setfield(L, -2, "message");
  if (luaL_newmetatable(L, ERROR_MT)) {
    lua_pushcfunction(L, error_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pushstring(L, ERROR_MT);
    lua_setfield(L, -2, "__name");
  }
  lua_setmetatable(L, -2);
}

/* Whether the value at idx is the cancellation error (code ECANCELED): the one error a
 * task is expected to end with, and the only one nobody needs to hear about. */
static int is_cancellation(lua_State *L, int idx) {
  int yes;
  if (lua_type(L, idx) != LUA_TTABLE) return 0;
  lua_getfield(L, idx, "code");
  yes = lua_type(L, -1) == LUA_TSTRING && strcmp(lua_tostring(L, -1), "ECANCELED") == 0;
  lua_pop(L, 1);
  return yes;
}

/* Pushes a one-line description of any error value: a string as it is, a table with a
 * __tostring through it, another table as "[stage: ]message (code)" from its fields. */
static const char *describe_error(lua_State *L, int idx) {
  idx = lua_absindex(L, idx);
  if (lua_type(L, idx) == LUA_TTABLE) {
    int has_tostring = luaL_getmetafield(L, idx, "__tostring") != LUA_TNIL;
    if (has_tostring) lua_pop(L, 1);
    else if (push_fields(L, idx)) return lua_tostring(L, -1);
  }
  return luaL_tolstring(L, idx, NULL);
}

int cs_raise_cancelled(lua_State *L) {
  cs_push_error(L, "ECANCELED", "task cancelled");
  return lua_error(L);
}

int cs_fail(lua_State *L, const char *code, const char *fmt, ...) {
  va_list ap;
  lua_pushnil(L);
  va_start(ap, fmt);
  lua_pushvfstring(L, fmt, ap);
  va_end(ap);
  lua_pushstring(L, code);
  return 3;
}

/* ---- scheduler core --------------------------------------------------- */

static void enqueue(cs_task *t) {
  if (t->in_ready) return;
  t->in_ready = 1;
  t->rnext = NULL;
  if (S.ready_tail) S.ready_tail->rnext = t;
  else S.ready_head = t;
  S.ready_tail = t;
  /* Made ready by a loop callback: uv_run must not then block in poll until the next
   * timer (a timer due when uv_run starts fires before libuv computes the poll timeout). */
  if (S.in_uv_run) uv_stop(&S.loop);
}

static cs_task *dequeue(void) {
  cs_task *t = S.ready_head;
  if (!t) return NULL;
  S.ready_head = t->rnext;
  if (!S.ready_head) S.ready_tail = NULL;
  t->in_ready = 0;
  return t;
}

static cs_task *task_of(lua_State *L) { return *(cs_task **)lua_getextraspace(L); }

/* Raise the cancellation in the task t (on L: its coroutine or one it resumed). */
static int deliver(lua_State *L, cs_task *t) {
  t->cancel_pending = 0;
  t->delivered = 1;
  return cs_raise_cancelled(L);
}

/* Whether the running task's cancellation must be raised again wherever it is caught: it
 * was cancelled and runs inside task.guard. */
static int sticky(void) { return S.current && S.current->cancelled && S.current->strict > 0; }

cs_task *cs_task_current(lua_State *L) {
  cs_task *t = task_of(L);
  if (t == NULL || t != S.current || t->co != L)
    luaL_error(L,
               "this operation must run inside a cseng task (not in a plain or nested "
               "coroutine); start work with task.spawn");
  if (!lua_isyieldable(L))
    luaL_error(L,
               "this operation cannot run here: it would yield across a C call "
               "(require, table.sort, string.gsub callbacks and __tostring cannot yield)");
  if (t->cancel_pending || (t->cancelled && t->strict > 0)) deliver(L, t);
  return t;
}

void cs_task_answered(uint64_t at) {
  if (!S.current) return;
  S.current->answered_at = at;
  S.current->answered_wake = S.current->wakes;
}

uint64_t cs_task_answered_at(void) {
  cs_task *t = S.current;
  return t && t->answered_at && t->answered_wake == t->wakes ? t->answered_at : 0;
}

void cs_task_handshake(uint64_t ns) {
  if (!S.current) return;
  S.current->handshakes++;
  S.current->handshake_ns += ns;
}

void cs_task_handshakes(uint64_t *count, uint64_t *ns) {
  *count = S.current ? S.current->handshakes : 0;
  *ns = S.current ? S.current->handshake_ns : 0;
}

cs_task *cs_task_running(lua_State *L) {
  cs_task *t = task_of(L);
  if (t == NULL || t != S.current || t->co != L || !lua_isyieldable(L)) return NULL;
  return t;
}

static int yield_k(lua_State *L, int status, lua_KContext ctx) {
  cs_task *t = (cs_task *)ctx;
  cs_op *op = t->op;
  (void)status;
  t->op = NULL;
  if (t->cancel_pending || op == NULL) return deliver(L, t);
  op->ready = 0;
  return op->push(L, op);
}

int cs_yield(lua_State *L, cs_op *op) {
  cs_task *t = task_of(L);
  op->task = t;
  t->op = op;
  t->state = T_WAITING;
  if (op->ready) {
    t->state = T_READY;
    enqueue(t);
  }
  return lua_yieldk(L, 0, (lua_KContext)t, yield_k);
}

void cs_op_ready(cs_op *op) {
  cs_task *t = op->task;
  op->ready = 1;
  if (t && t->op == op && t->state == T_WAITING) {
    t->state = T_READY;
    enqueue(t);
  }
}

/* A task is cancelled once: outside task.guard the cancellation is delivered once (a task
 * already cancelled is running its cleanup, which must not be interrupted again; a second
 * Ctrl-C exits the process instead); inside a guard it stays raised (see task_guard). */
static void task_cancel(cs_task *t) {
  if (t->state == T_DONE || t->cancelled) return;
  t->cancelled = 1;
  t->cancel_pending = 1;
  if (t->op) {
    cs_op *op = t->op;
    t->op = NULL;
    op->cancel(op);
  }
  if (t->state == T_WAITING) {
    t->state = T_READY;
    enqueue(t);
  }
}

static void cancel_all(void) {
  for (cs_task *t = S.live; t; t = t->next) task_cancel(t);
}

static void finish(cs_task *t) {
  lua_State *L = S.L;
  t->state = T_DONE;
  if (t->prev) t->prev->next = t->next;
  else S.live = t->next;
  if (t->next) t->next->prev = t->prev;
  t->prev = t->next = NULL;
  S.nlive--;
  while (t->joiners) {
    joinwait *w = t->joiners;
    t->joiners = w->next;
    w->prev = w->next = NULL;
    cs_op_ready(&w->op);
  }
  luaL_unref(L, LUA_REGISTRYINDEX, t->co_ref);
  t->co_ref = LUA_NOREF;
  t->co = NULL;
  luaL_unref(L, LUA_REGISTRYINDEX, t->self_ref);
  t->self_ref = LUA_NOREF;
}

static void task_step(cs_task *t) {
  lua_State *co = t->co, *L = S.L;
  int nres = 0, nargs = t->nargs, st;
  t->nargs = 0;
  t->state = T_RUNNING;
  t->wakes++;
  S.current = t;
  if (sig_count > S.sigseen) process_signal(); /* before any task runs Lua again */
  arm_hook(co, t);
  running_co = co;
  st = lua_resume(co, L, nargs, &nres);
  running_co = NULL;
  S.current = NULL;
  if (st == LUA_YIELD) {
    if (t->state == T_RUNNING) {
      /* a bare coroutine.yield at task level: treat it as task.yield() */
      lua_pop(co, nres);
      t->state = T_READY;
      enqueue(t);
    }
    return;
  }
  if (st == LUA_OK) {
    /* the body returns ok, results... */
    int i, k = nres - 1;
    t->ok = lua_toboolean(co, -nres);
    if (t->ok) {
      lua_createtable(co, k, 1);
      for (i = 1; i <= k; i++) {
        lua_pushvalue(co, -nres - 1 + i);
        lua_rawseti(co, -2, i);
      }
      lua_pushinteger(co, k);
      lua_setfield(co, -2, "n");
    } else {
      lua_pushvalue(co, -nres + 1);
    }
  } else {
    /* only errors outside the body's pcall (out of memory, error in the handler) */
    t->ok = 0;
    luaL_traceback(co, co, lua_tostring(co, -1), 0);
  }
  lua_xmove(co, L, 1);
  t->result_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_settop(co, 0);
  finish(t);
}

/* ---- task body -------------------------------------------------------- */

/* A string error gets the traceback appended (as lua.c does); a table error keeps its
 * shape and gains a `traceback` field (unless it has one), so `{code=, message=}` raised
 * deep in a task still says where. The cancellation error is left as it is: it is expected,
 * and delivered to every task at Ctrl-C. */
static int body_msgh(lua_State *L) {
  if (lua_type(L, 1) == LUA_TTABLE) {
    if (is_cancellation(L, 1)) return 1;
    lua_pushliteral(L, "traceback");
    if (lua_rawget(L, 1) == LUA_TNIL) {
      lua_pop(L, 1);
      lua_pushliteral(L, "traceback");
      luaL_traceback(L, L, NULL, 1);
      lua_rawset(L, 1);
    } else {
      lua_pop(L, 1);
    }
    lua_settop(L, 1);
    return 1;
  }
  const char *msg = lua_tostring(L, 1);
  if (msg == NULL) msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
  luaL_traceback(L, L, msg, 1);
  return 1;
}

static int body_k(lua_State *L, int status, lua_KContext ctx) {
  (void)ctx;
  lua_pushboolean(L, status == LUA_OK || status == LUA_YIELD);
  lua_replace(L, 1); /* the message handler's slot */
  return lua_gettop(L);
}

static int task_body(lua_State *L) {
  int n = lua_gettop(L); /* fn, args... */
  lua_pushcfunction(L, body_msgh);
  lua_insert(L, 1);
  return body_k(L, lua_pcallk(L, n - 1, LUA_MULTRET, 1, 0, body_k), 0);
}

/* Create a task running the function at fidx with nargs args after it;
 * leaves the task userdata on top of L. */
static cs_task *task_new(lua_State *L, int fidx, int nargs) {
  int i;
  cs_task *t = lua_newuserdatauv(L, sizeof *t, 0);
  memset(t, 0, sizeof *t);
  t->co_ref = t->self_ref = t->result_ref = LUA_NOREF;
  luaL_setmetatable(L, TASK_MT);
  lua_pushvalue(L, -1);
  t->self_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  t->co = lua_newthread(L);
  t->co_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  *(cs_task **)lua_getextraspace(t->co) = t;
  lua_pushcfunction(t->co, task_body);
  for (i = 0; i <= nargs; i++) lua_pushvalue(L, fidx + i);
  lua_xmove(L, t->co, nargs + 1);
  t->nargs = nargs + 1;
  t->id = ++S.next_id;
  t->state = T_READY;
  t->next = S.live;
  if (S.live) S.live->prev = t;
  S.live = t;
  S.nlive++;
  enqueue(t);
  return t;
}

static cs_task *check_task(lua_State *L, int i) { return luaL_checkudata(L, i, TASK_MT); }

static int push_results(lua_State *L, cs_task *t) {
  lua_rawgeti(L, LUA_REGISTRYINDEX, t->result_ref);
  if (!t->ok) {
    lua_pushboolean(L, 0);
    lua_insert(L, -2);
    return 2;
  } else {
    lua_Integer i, n;
    int tbl = lua_gettop(L);
    lua_getfield(L, tbl, "n");
    n = lua_tointeger(L, -1);
    lua_pop(L, 1);
    luaL_checkstack(L, (int)n + 1, "too many results");
    lua_pushboolean(L, 1);
    for (i = 1; i <= n; i++) lua_rawgeti(L, tbl, i);
    return (int)n + 1;
  }
}

/* ---- task module functions -------------------------------------------- */

/** task.spawn(fn, ...) -> task */
static int task_spawn(lua_State *L) {
  luaL_checktype(L, 1, LUA_TFUNCTION);
  task_new(L, 1, lua_gettop(L) - 1);
  return 1;
}

static int join_push(lua_State *L, cs_op *op) {
  joinwait *w = (joinwait *)op;
  cs_task *t = w->target;
  free(w);
  return push_results(L, t);
}

static void join_cancel(cs_op *op) {
  joinwait *w = (joinwait *)op;
  cs_task *t = w->target;
  if (t->joiners == w) t->joiners = w->next;
  if (w->prev) w->prev->next = w->next;
  if (w->next) w->next->prev = w->prev;
  free(w);
}

/** task.join(t) -> true, results... | false, err */
static int task_join(lua_State *L) {
  cs_task *t = check_task(L, 1);
  cs_task *me = cs_task_current(L);
  joinwait *w;
  if (t == me) return luaL_error(L, "a task cannot join itself");
  t->joined = 1;
  if (t->state == T_DONE) return push_results(L, t);
  w = calloc(1, sizeof *w);
  if (!w) return luaL_error(L, "out of memory");
  w->target = t;
  w->next = t->joiners;
  if (t->joiners) t->joiners->prev = w;
  t->joiners = w;
  w->op.push = join_push;
  w->op.cancel = join_cancel;
  return cs_yield(L, &w->op);
}

typedef struct {
  cs_op op;
  uv_timer_t timer;
  uint64_t deadline; /* uv_hrtime() ns */
} sleepop;

static void sleep_free(uv_handle_t *h) { free(h->data); }

/* libuv's timers run on the loop's millisecond time, truncated (and on some kernels read from
 * the coarse clock), so a timer can fire up to a millisecond or more before its interval has
 * passed on the precise clock: a sleep is never shorter than asked, so an early fire re-arms for
 * the rest (whole milliseconds, at least one). */
static void sleep_fire(uv_timer_t *h) {
  sleepop *s = h->data;
  uint64_t now = uv_hrtime();
  if (now < s->deadline) {
    uv_timer_start(&s->timer, sleep_fire, (s->deadline - now + 999999) / 1000000, 0);
    return;
  }
  cs_op_ready(&s->op);
}

static int sleep_push(lua_State *L, cs_op *op) {
  (void)L;
  uv_close((uv_handle_t *)&((sleepop *)op)->timer, sleep_free);
  return 0;
}

static void sleep_cancel(cs_op *op) {
  sleepop *s = (sleepop *)op;
  uv_timer_stop(&s->timer);
  uv_close((uv_handle_t *)&s->timer, sleep_free);
}

static void plain_free_cancel(cs_op *op) { free(op); }
static int plain_free_push(lua_State *L, cs_op *op) {
  (void)L;
  free(op);
  return 0;
}

/** task.yield(): let every other ready task run once. */
static int task_yield(lua_State *L) {
  cs_op *op;
  cs_task_current(L);
  op = calloc(1, sizeof *op);
  if (!op) return luaL_error(L, "out of memory");
  op->push = plain_free_push;
  op->cancel = plain_free_cancel;
  op->ready = 1;
  return cs_yield(L, op);
}

/** task.sleep(seconds) */
static int task_sleep(lua_State *L) {
  double secs = luaL_checknumber(L, 1);
  sleepop *s;
  uint64_t ms;
  if (secs <= 0) return task_yield(L);
  cs_task_current(L);
  s = calloc(1, sizeof *s);
  if (!s) return luaL_error(L, "out of memory");
  ms = (uint64_t)(secs * 1000.0 + 0.999);
  s->deadline = uv_hrtime() + (uint64_t)(secs * 1e9);
  uv_update_time(&S.loop); /* the cached loop time is stale after running Lua */
  uv_timer_init(&S.loop, &s->timer);
  s->timer.data = s;
  s->op.push = sleep_push;
  s->op.cancel = sleep_cancel;
  uv_timer_start(&s->timer, sleep_fire, ms, 0);
  return cs_yield(L, &s->op);
}

/** task.current() -> the running task, or nil outside any task. */
static int task_current(lua_State *L) {
  cs_task *t = task_of(L);
  if (!t || t != S.current) return 0;
  lua_rawgeti(L, LUA_REGISTRYINDEX, t->self_ref);
  return 1;
}

/** task.cancel(t) / t:cancel(): cancel the task; its waiting operation raises ECANCELED. */
static int task_cancel_l(lua_State *L) {
  task_cancel(check_task(L, 1));
  return 0;
}

/** task.cancelled() -> whether the running task has been cancelled. */
static int task_cancelled(lua_State *L) {
  cs_task *t = task_of(L);
  lua_pushboolean(L, t && t->cancelled);
  return 1;
}

/** task.interrupted() -> how many SIGINT/SIGTERM arrived (0 if none). */
static int task_interrupted(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)sig_count);
  return 1;
}

/** task.signal() -> the number of the last SIGINT/SIGTERM that arrived, or nil. */
static int task_signal(lua_State *L) {
  if (sig_count) lua_pushinteger(L, (lua_Integer)sig_last);
  else lua_pushnil(L);
  return 1;
}

/** task.interrupt_notice([on]) -> whether the engine prints its own line on the first signal
 * (before the change); on = false: the caller says it (a run's presentation). */
static int task_interrupt_notice(lua_State *L) {
  int was = notice_on;
  if (!lua_isnoneornil(L, 1)) notice_on = lua_toboolean(L, 1);
  lua_pushboolean(L, was);
  return 1;
}

/** task.count() -> number of live tasks. */
static int task_count(lua_State *L) {
  lua_pushinteger(L, S.nlive);
  return 1;
}

/** task.error(code [, message [, fields]]) -> a structured error object (for error()):
 * {code=, message=} plus the string/number/boolean/table fields of `fields` (stage, ...). */
static int task_error_l(lua_State *L) {
  const char *code = luaL_checkstring(L, 1);
  cs_push_error(L, code, luaL_optstring(L, 2, code));
  if (!lua_isnoneornil(L, 3)) {
    luaL_checktype(L, 3, LUA_TTABLE);
    lua_pushnil(L);
    while (lua_next(L, 3)) {
      if (lua_type(L, -2) == LUA_TSTRING && strcmp(lua_tostring(L, -2), "code") != 0 &&
          strcmp(lua_tostring(L, -2), "message") != 0) {
        lua_pushvalue(L, -2);
        lua_insert(L, -2);
        lua_rawset(L, -4);
      } else {
        lua_pop(L, 1);
      }
    }
  }
  return 1;
}

static int t_status(lua_State *L) {
  lua_pushstring(L, state_names[check_task(L, 1)->state]);
  return 1;
}

static int t_id(lua_State *L) {
  lua_pushinteger(L, check_task(L, 1)->id);
  return 1;
}

static int t_tostring(lua_State *L) {
  cs_task *t = check_task(L, 1);
  lua_pushfstring(L, "task %d (%s)", (int)t->id, state_names[t->state]);
  return 1;
}

/* A task that failed and was never joined says so when it is collected, unless it was
 * cancelled: a table error is described from its fields, with its traceback. */
static int t_gc(lua_State *L) {
  cs_task *t = check_task(L, 1);
  if (t->state == T_DONE && !t->ok && !t->joined && t->result_ref != LUA_NOREF) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, t->result_ref);
    if (!is_cancellation(L, -1)) {
      int err = lua_gettop(L);
      const char *tb = NULL;
      const char *what = describe_error(L, err);
      if (lua_type(L, err) == LUA_TTABLE) {
        lua_getfield(L, err, "traceback");
        tb = lua_tostring(L, -1);
      }
      cs_diag("cseng: task %d failed and was never joined: %s%s%s\n", (int)t->id, what, tb ? "\n" : "",
              tb ? tb : "");
    }
    lua_settop(L, 1);
  }
  luaL_unref(L, LUA_REGISTRYINDEX, t->result_ref);
  t->result_ref = LUA_NOREF;
  return 0;
}

/* ---- semaphores -------------------------------------------------------- */

typedef struct semwait semwait;
typedef struct {
  lua_Integer count;
  semwait *head, *tail;
} sem;

struct semwait {
  cs_op op;
  sem *s;
  semwait *prev, *next;
  int granted;
};

static void semq_unlink(sem *s, semwait *w) {
  if (w->prev) w->prev->next = w->next;
  else s->head = w->next;
  if (w->next) w->next->prev = w->prev;
  else s->tail = w->prev;
  w->prev = w->next = NULL;
}

static void semq_give(sem *s) {
  semwait *w = s->head;
  if (w) {
    semq_unlink(s, w);
    w->granted = 1;
    cs_op_ready(&w->op);
  } else {
    s->count++;
  }
}

static int sem_push(lua_State *L, cs_op *op) {
  free(op);
  lua_settop(L, 1); /* the semaphore itself, so `local _ <close> = s:acquire()` works */
  return 1;
}

static void sem_cancel(cs_op *op) {
  semwait *w = (semwait *)op;
  if (w->granted) semq_give(w->s); /* handed a permit it will never use */
  else semq_unlink(w->s, w);
  free(w);
}

/** task.semaphore(n) -> semaphore with :acquire(), :release(), :count() */
static int task_semaphore(lua_State *L) {
  lua_Integer n = luaL_checkinteger(L, 1);
  sem *s;
  luaL_argcheck(L, n >= 0, 1, "must be >= 0");
  s = lua_newuserdatauv(L, sizeof *s, 0);
  s->count = n;
  s->head = s->tail = NULL;
  luaL_setmetatable(L, SEM_MT);
  return 1;
}

static int s_acquire(lua_State *L) {
  sem *s = luaL_checkudata(L, 1, SEM_MT);
  semwait *w;
  cs_task_current(L);
  lua_settop(L, 1);
  if (s->count > 0 && !s->head) {
    s->count--;
    return 1;
  }
  w = calloc(1, sizeof *w);
  if (!w) return luaL_error(L, "out of memory");
  w->s = s;
  w->prev = s->tail;
  if (s->tail) s->tail->next = w;
  else s->head = w;
  s->tail = w;
  w->op.push = sem_push;
  w->op.cancel = sem_cancel;
  return cs_yield(L, &w->op);
}

static int s_release(lua_State *L) {
  semq_give(luaL_checkudata(L, 1, SEM_MT));
  return 0;
}

static int s_count(lua_State *L) {
  lua_pushinteger(L, ((sem *)luaL_checkudata(L, 1, SEM_MT))->count);
  return 1;
}

/* ---- signals and the run loop ------------------------------------------ */

/* The count hook: a cancelled task gets the cancellation after INTERRUPT_COUNT more
 * instructions without yielding, in whichever coroutine it runs, so Lua code that never
 * yields (`while true do end`, also inside a coroutine the task resumed) is interrupted
 * too and unwinds through its cleanup (__close, pcall handlers). The signal handler arms
 * it on the coroutine executing at that instant; the scheduler (task_step) and
 * coroutine.resume/wrap arm it on every coroutine a task a signal cancelled runs
 * afterwards, until the cancellation has been raised once (outside task.guard it is
 * delivered once: a task already cancelled is running its cleanup), and, inside
 * task.guard, on every coroutine of any cancelled task for as long as it is there (the
 * cancellation stays raised). */
#define INTERRUPT_COUNT 10000

/* Whether t has a cancellation the hook must raise: one a signal brought that it has not
 * had yet, or any, inside task.guard. (Without a signal, a task.cancel() is raised at the
 * task's next yielding call, as always.) */
static int wants_hook(const cs_task *t) {
  return t->cancelled && ((!t->delivered && sig_count) || t->strict > 0);
}

static void interrupt_hook(lua_State *L, lua_Debug *ar) {
  cs_task *t = task_of(L);
  (void)ar;
  if (!t) t = S.current; /* a coroutine the task resumed */
  if (sig_count > S.sigseen) process_signal();
  if (!t || t != S.current || t->state == T_DONE || !wants_hook(t)) {
    lua_sethook(L, NULL, 0, 0);
    return;
  }
  if (t->strict == 0) lua_sethook(L, NULL, 0, 0);
  deliver(L, t);
}

/* Arms the interrupt hook on co, a coroutine the task t is about to run, when t has a
 * cancellation for it to raise; removes it (ours only) otherwise. */
static void arm_hook(lua_State *co, cs_task *t) {
  if (wants_hook(t)) {
    lua_sethook(co, interrupt_hook, LUA_MASKCOUNT, INTERRUPT_COUNT);
  } else if (lua_gethook(co) == interrupt_hook) {
    lua_sethook(co, NULL, 0, 0);
  }
}

/* SIGINT / SIGTERM (async-signal context): the second one exits at once, with status
 * 128 + the signal's number. */
static void on_signal(int signum) {
  lua_State *co = running_co;
  sig_count = sig_count + 1;
  if (sig_count >= 2) {
    char msg[] = "\ncseng: interrupted again, exiting now (status 1NN)\n";
    int code = 128 + signum, i = (int)sizeof msg - 4;
    msg[i--] = (char)('0' + code % 10);
    msg[i--] = (char)('0' + code / 10 % 10);
    msg[i] = (char)('0' + code / 100 % 10);
    if (write(2, msg, sizeof msg - 1) < 0) { /* nothing more to do */
    }
    _exit(code);
  }
  sig_last = signum;
  if (co) lua_sethook(co, interrupt_hook, LUA_MASKCOUNT, INTERRUPT_COUNT);
  uv_async_send(&S.sigwake);
}

/* After a signal, before any Lua runs again (the loop's wakeup, the next task step, the
 * hook, a coroutine resume, whichever comes first): say so, and cancel every task so
 * their cleanup runs. */
static void process_signal(void) {
  if (S.sigseen >= (int)sig_count) return;
  S.sigseen = (int)sig_count;
  if (notice_on)
    cs_diag("\ncseng: %s: cancelling %d task(s) so their cleanup runs; interrupt again to exit at once\n",
            sig_last == SIGINT ? "interrupted" : "terminated", S.nlive);
  cancel_all();
}

static void on_sigwake(uv_async_t *h) {
  (void)h;
  process_signal();
}

/* ---- coroutines and pcall inside tasks ------------------------------------ */

/* The base library's pcall/xpcall and the coroutine library's resume/wrap, as Lua 5.4
 * defines them, with two additions: a coroutine a cancelled task resumes gets the
 * interrupt hook (arm_hook), and inside task.guard a cancelled task cannot swallow its
 * cancellation: pcall, xpcall and resume raise it again where they would return false. */

static int finish_pcall(lua_State *L, int status, lua_KContext extra) {
  if (status != LUA_OK && status != LUA_YIELD) {
    if (sticky()) return deliver(L, S.current);
    lua_pushboolean(L, 0);
    lua_pushvalue(L, -2);
    return 2;
  }
  return lua_gettop(L) - (int)extra;
}

static int co_pcall(lua_State *L) {
  luaL_checkany(L, 1);
  lua_pushboolean(L, 1);
  lua_insert(L, 1);
  return finish_pcall(L, lua_pcallk(L, lua_gettop(L) - 2, LUA_MULTRET, 0, 0, finish_pcall), 0);
}

static int co_xpcall(lua_State *L) {
  int n = lua_gettop(L);
  luaL_checktype(L, 2, LUA_TFUNCTION);
  lua_pushboolean(L, 1);
  lua_pushvalue(L, 1);
  lua_rotate(L, 3, 2);
  return finish_pcall(L, lua_pcallk(L, n - 2, LUA_MULTRET, 2, 2, finish_pcall), 2);
}

/* Resumes co with narg values from L; returns the number of results moved to L, or -1
 * with the error on top of L. */
static int auxresume(lua_State *L, lua_State *co, int narg) {
  lua_State *prev = running_co;
  int status, nres;
  if (!lua_checkstack(co, narg)) {
    lua_pushliteral(L, "too many arguments to resume");
    return -1;
  }
  lua_xmove(L, co, narg);
  if (S.current) {
    if (sig_count > S.sigseen) process_signal();
    arm_hook(co, S.current);
  }
  running_co = co;
  status = lua_resume(co, L, narg, &nres);
  running_co = prev;
  if (status == LUA_OK || status == LUA_YIELD) {
    if (!lua_checkstack(L, nres + 1)) {
      lua_pop(co, nres);
      lua_pushliteral(L, "too many results to resume");
      return -1;
    }
    lua_xmove(co, L, nres);
    return nres;
  }
  lua_xmove(co, L, 1);
  return -1;
}

static int co_resume(lua_State *L) {
  lua_State *co = lua_tothread(L, 1);
  int r;
  luaL_argexpected(L, co, 1, "coroutine");
  r = auxresume(L, co, lua_gettop(L) - 1);
  if (r < 0) {
    if (sticky()) return deliver(L, S.current);
    lua_pushboolean(L, 0);
    lua_insert(L, -2);
    return 2;
  }
  lua_pushboolean(L, 1);
  lua_insert(L, -(r + 1));
  return r + 1;
}

static int auxwrap(lua_State *L) {
  lua_State *co = lua_tothread(L, lua_upvalueindex(1));
  int r = auxresume(L, co, lua_gettop(L));
  if (r < 0) {
    int stat = lua_status(co);
    if (stat != LUA_OK && stat != LUA_YIELD) { /* an error in the coroutine: close its tbc variables */
      stat = lua_resetthread(co);
      lua_xmove(co, L, 1);
    }
    if (sticky()) return deliver(L, S.current);
    if (stat != LUA_ERRMEM && lua_type(L, -1) == LUA_TSTRING) {
      luaL_where(L, 1);
      lua_insert(L, -2);
      lua_concat(L, 2);
    }
    return lua_error(L);
  }
  return r;
}

static int co_wrap(lua_State *L) {
  lua_State *co;
  luaL_checktype(L, 1, LUA_TFUNCTION);
  co = lua_newthread(L);
  lua_pushvalue(L, 1);
  lua_xmove(L, co, 1);
  lua_pushcclosure(L, auxwrap, 1);
  return 1;
}

static int guard_k(lua_State *L, int status, lua_KContext ctx) {
  cs_task *t = (cs_task *)ctx;
  if (t) t->strict--;
  if (status != LUA_OK && status != LUA_YIELD) {
    if (sticky()) return deliver(L, S.current); /* an outer guard holds it */
    lua_pushboolean(L, 0);
    lua_insert(L, -2);
    return 2;
  }
  return lua_gettop(L);
}

/** task.guard(fn, ...) -> true, results... | false, err: pcall, and the cancellation boundary
 * for code that must not outlive an interrupt (the runner's solvers): once the task is
 * cancelled, inside fn the cancellation stays raised: pcall, xpcall and coroutine.resume
 * raise it again where they would catch it, every wait raises it, and Lua code that spins
 * is interrupted again, in any coroutine, until it has left fn (which then returns false,
 * the cancellation). Outside any guard a cancellation is delivered once. */
static int task_guard(lua_State *L) {
  cs_task *t = task_of(L);
  luaL_checkany(L, 1);
  if (!t || t != S.current || t->co != L) t = NULL; /* only a task's own coroutine counts */
  if (t) t->strict++;
  lua_pushboolean(L, 1);
  lua_insert(L, 1);
  return guard_k(L, lua_pcallk(L, lua_gettop(L) - 2, LUA_MULTRET, 0, (lua_KContext)t, guard_k),
                 (lua_KContext)t);
}

/* Installs pcall, xpcall, coroutine.resume and coroutine.wrap (above) over the standard ones. */
static void install_coroutine_guards(lua_State *L) {
  lua_pushcfunction(L, co_pcall);
  lua_setglobal(L, "pcall");
  lua_pushcfunction(L, co_xpcall);
  lua_setglobal(L, "xpcall");
  if (lua_getglobal(L, "coroutine") == LUA_TTABLE) {
    lua_pushcfunction(L, co_resume);
    lua_setfield(L, -2, "resume");
    lua_pushcfunction(L, co_wrap);
    lua_setfield(L, -2, "wrap");
  }
  lua_pop(L, 1);
}

void cs_sched_init(lua_State *L) {
  static const luaL_Reg tmeth[] = {
      {"join", task_join}, {"cancel", task_cancel_l}, {"status", t_status}, {"id", t_id}, {NULL, NULL}};
  static const luaL_Reg smeth[] = {
      {"acquire", s_acquire}, {"release", s_release}, {"count", s_count}, {NULL, NULL}};
  static const luaL_Reg tmeta[] = {{"__tostring", t_tostring}, {"__gc", t_gc}, {NULL, NULL}};
  static const luaL_Reg smeta[] = {{"__close", s_release}, {NULL, NULL}};
  S.L = L;
  *(cs_task **)lua_getextraspace(L) = NULL;
  uv_loop_init(&S.loop);
  cs_new_class(L, TASK_MT, tmeth, tmeta);
  cs_new_class(L, SEM_MT, smeth, smeta);
  install_coroutine_guards(L);
  uv_async_init(&S.loop, &S.sigwake, on_sigwake);
  uv_unref((uv_handle_t *)&S.sigwake);
  {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
  }
  signal(SIGPIPE, SIG_IGN);
}

void cs_sched_set_flush(void (*fn)(void)) { S.flush = fn; }

void cs_sched_flush_wanted(void) {
  if (!S.flush_since) S.flush_since = uv_hrtime();
}

static void flush_now(void) {
  S.flush_since = 0;
  if (S.flush) S.flush();
}

static int loop_run(uv_run_mode mode) {
  int alive;
  if (S.flush_since) flush_now(); /* what the tasks wrote goes before the loop looks for answers */
  S.in_uv_run = 1;
  alive = uv_run(&S.loop, mode);
  S.in_uv_run = 0;
  return alive;
}

/* A pass polls I/O (without blocking) once this long has gone by since the last poll: answers
 * that arrive during a long pass are read then, not at its end. A socket left unread holds what
 * arrived on it meanwhile, and the kernel merges what queues there and stamps the merged bytes
 * with the newest arrival: an HTTP/2 connection carrying many calls would stamp an answer that
 * waited under a later one with the later one's time. 30 us: at 100 us, TLS/2 with 100 calls a
 * connection at 256 in flight had an error p99 of 0.15 ms against 0.11 (docs/PERFORMANCE.md, item
 * 25), for some 3% more CPU a request at 1,024. */
#define POLL_EVERY_NS 30000

/* One pass: run the tasks that were ready when it began. Tasks they make ready (a
 * task.yield() loop) wait for the next pass, so the loop polls I/O, timers and signals
 * between passes and no task can starve the others; a long pass polls in between too
 * (POLL_EVERY_NS). */
static void drain_ready(void) {
  cs_task *t, *last = S.ready_tail;
  uint64_t polled = uv_hrtime();
  while (last && (t = dequeue()) != NULL) {
    uint64_t now;
    if (t->state == T_READY) task_step(t);
    if (t == last) break;
    now = uv_hrtime();
    if (now - polled > POLL_EVERY_NS) {
      loop_run(UV_RUN_NOWAIT);
      polled = uv_hrtime();
    } else if (S.flush_since && now - S.flush_since > CS_FLUSH_NS)
      flush_now();
  }
}

int cs_sched_run_main(lua_State *L, int nargs) {
  int fidx = lua_gettop(L) - nargs, code = 0, main_done = 0, stuck = 0;
  cs_task *m = task_new(L, fidx, nargs);
  int main_ref;
  lua_pushvalue(L, -1);
  main_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_settop(L, fidx - 1);
  for (;;) {
    drain_ready();
    if (m->state == T_DONE && !main_done) {
      main_done = 1;
      cancel_all(); /* tasks left behind by the main task end with it */
      continue;
    }
    if (S.nlive == 0) break;
    if (S.ready_head) {
      loop_run(UV_RUN_NOWAIT); /* poll I/O between passes; never block */
      continue;
    }
    if (loop_run(UV_RUN_ONCE) == 0 && !S.ready_head) {
      if (stuck++) break;
      cs_diag("cseng: deadlock: %d task(s) wait on each other with nothing in flight; cancelling them\n",
              S.nlive);
      cancel_all();
    } else {
      stuck = 0;
    }
  }
  if (m->state != T_DONE) {
    code = 1;
  } else if (m->ok) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, m->result_ref);
    lua_rawgeti(L, -1, 1);
    if (lua_isinteger(L, -1)) code = (int)lua_tointeger(L, -1);
    else if (lua_isboolean(L, -1)) code = lua_toboolean(L, -1) ? 0 : 1;
    lua_pop(L, 2);
  } else {
    lua_rawgeti(L, LUA_REGISTRYINDEX, m->result_ref);
    if (!sig_count || !is_cancellation(L, -1)) {
      cs_diag("cseng: %s\n", describe_error(L, -1));
      code = 1;
      lua_pop(L, 1);
    }
    m->joined = 1;
    lua_pop(L, 1);
  }
  luaL_unref(L, LUA_REGISTRYINDEX, main_ref);
  /* interrupted: the status a shell expects of a process a signal stopped, whatever the
   * command returned after its cleanup */
  if (sig_count) code = 128 + (int)sig_last;
  return code;
}

static void close_walk(uv_handle_t *h, void *arg) {
  (void)arg;
  if (!uv_is_closing(h)) uv_close(h, NULL);
}

static void (*shutdown_hooks[16])(void);
static int nshutdown_hooks;

void cs_at_shutdown(void (*fn)(void)) {
  if (nshutdown_hooks < 16) shutdown_hooks[nshutdown_hooks++] = fn;
}

/* Called by main.c after lua_close: let bindings' close callbacks run. */
void cs_sched_shutdown(void) {
  while (nshutdown_hooks > 0) shutdown_hooks[--nshutdown_hooks]();
  uv_run(&S.loop, UV_RUN_DEFAULT);
  uv_walk(&S.loop, close_walk, NULL);
  uv_run(&S.loop, UV_RUN_DEFAULT);
  uv_loop_close(&S.loop);
}

int luaopen_cseng_task(lua_State *L) {
  static const luaL_Reg funcs[] = {{"spawn", task_spawn},
                                   {"join", task_join},
                                   {"sleep", task_sleep},
                                   {"yield", task_yield},
                                   {"current", task_current},
                                   {"cancel", task_cancel_l},
                                   {"cancelled", task_cancelled},
                                   {"interrupted", task_interrupted},
                                   {"signal", task_signal},
                                   {"interrupt_notice", task_interrupt_notice},
                                   {"count", task_count},
                                   {"semaphore", task_semaphore},
                                   {"error", task_error_l},
                                   {"guard", task_guard},
                                   {NULL, NULL}};
  luaL_newlib(L, funcs);
  return 1;
}
