/*
 * core.h: the contract between the scheduler (ltask.c) and every binding that
 * performs an operation which would block.
 *
 * A task is a Lua coroutine run by the scheduler. A blocking primitive:
 *   1. gets the current task with cs_task_current(L) (raises outside a task,
 *      and delivers a pending cancellation);
 *   2. starts the work in C and fills a cs_op (push and cancel callbacks);
 *   3. returns cs_yield(L, op).
 * When the work completes, the binding's libuv/libcurl callback fills its own C
 * buffers and calls cs_op_ready(op); it never runs Lua code: no call, no
 * resume, nothing that may raise, allocate a Lua object or run a metamethod.
 * Releasing a registry reference it held (luaL_unref on the main state, as
 * lhttp.c's req_release does when a transfer completes) is the one exception:
 * it only stores into an existing registry slot. The scheduler later
 * resumes the task from the main loop, and calls op->push(L, op) on the
 * coroutine: push pushes the results and returns their count (or re-yields with
 * cs_yield for multi-event operations such as streams).
 *
 * Cancellation (task:cancel(), SIGINT) calls op->cancel(op) instead of push:
 * it must stop the work and release everything; after it the binding must not
 * call cs_op_ready for that op. The task then raises a cancellation error
 * (code "ECANCELED") from the primitive that was waiting.
 *
 * A binding's diagnostic on stderr goes through cs_diag (redact.h), never fprintf: it is
 * redacted with the secret set the Lua redactor feeds.
 */
#ifndef CSENG_CORE_H
#define CSENG_CORE_H

#include <lua.h>
#include <lauxlib.h>
#include <uv.h>

typedef struct cs_task cs_task;
typedef struct cs_op cs_op;

struct cs_op {
  cs_task *task;                        /* set by cs_yield */
  int ready;                            /* set by cs_op_ready, cleared before push */
  int (*push)(lua_State *L, cs_op *op); /* push results, return their count */
  void (*cancel)(cs_op *op);            /* abort and release; called instead of push */
};

/* The process's one loop. */
uv_loop_t *cs_loop(void);

/* The running task; raises if L is not a task's own coroutine, or delivers a
 * pending cancellation. */
cs_task *cs_task_current(lua_State *L);

/* The running task if L is its coroutine and may yield here; NULL otherwise (never raises).
 * For primitives that block briefly outside tasks and yield inside them. */
cs_task *cs_task_running(lua_State *L);

/* Park the current task on op; use as `return cs_yield(L, op);`. */
int cs_yield(lua_State *L, cs_op *op);

/* From C callbacks: op's results are ready; its task will be resumed. */
void cs_op_ready(cs_op *op);

/* The running task was woken by an answer that arrived at `at` (uv_hrtime ns): a binding's push
 * says so (lhttp.c, for a whole HTTP response). Until the task waits again,
 * cs_task_answered_at() returns it: clock.answered() ends a timing there rather than when the
 * loop got round to the task. */
void cs_task_answered(uint64_t at);
uint64_t cs_task_answered_at(void); /* 0: the running task's latest wake-up was not an answer */

/* The running task's call waited ns for a new connection (TCP, TLS, HTTP/2 settings) before it
 * could be sent: a binding's push says so (lhttp.c). cs_task_handshakes() gives the task's count
 * of such calls and their total, so a timing can tell the handshakes it holds (http.handshakes). */
void cs_task_handshake(uint64_t ns);
void cs_task_handshakes(uint64_t *count, uint64_t *ns);

/* Raise the cancellation error object. */
int cs_raise_cancelled(lua_State *L);

/* Push an error object {code=, message=} with the cseng.error metatable. */
void cs_push_error(lua_State *L, const char *code, const char *message);

/* Expected failure: push nil, message, code; returns 3. */
int cs_fail(lua_State *L, const char *code, const char *fmt, ...);

/* Scheduler entry points for main.c. */
void cs_sched_init(lua_State *L);
/* Spawn the main task, run everything, and return the process exit status. The
 * stack holds the function and then its nargs arguments (the last argument on
 * top), as for lua_call; all of them are popped. */
int cs_sched_run_main(lua_State *L, int nargs);

/* After the Lua state is closed: run shutdown hooks, drain and close the loop. */
void cs_sched_shutdown(void);

/* Writes a binding gathers while tasks run, to send them together (the HTTP/2 requests a pass
 * makes on one connection: one record and one write instead of one each). The scheduler calls
 * fn before the loop polls I/O or sleeps, and during a pass once the first write gathered since
 * the last call has waited CS_FLUSH_NS: a request waits at most about that long (plus the task
 * running then) before it goes. A binding whose writes cannot gather more (an HTTP/2 connection
 * with no room for another stream) sends them at once instead. One hook; plain C, never Lua. */
#define CS_FLUSH_NS 20000
void cs_sched_set_flush(void (*fn)(void));
/* A write was gathered: the hook is due within CS_FLUSH_NS. */
void cs_sched_flush_wanted(void);

/* Register a function run at shutdown, after lua_close (plain C only). */
void cs_at_shutdown(void (*fn)(void));

/* Number of times SIGINT/SIGTERM arrived. */
int cs_interrupted(void);

#endif
