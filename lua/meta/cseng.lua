---@meta _
-- LuaLS definitions of the engine modules (engine/l*.c), for editor completion and type
-- checking only: nothing here runs. The modules themselves are preloaded by the binary under
-- the names cseng.task, cseng.http, ... ; each lua/meta/cseng/<name>.lua maps one of those
-- require names onto the classes below (LuaLS gives one require name per meta file).
-- Never require this file or lua/meta/*: the last line raises if it is ever loaded.
-- Reference: docs/ENGINE.md. `.luarc.json` at the repository root points LuaLS here.

-- ---------------------------------------------------------------------------------------
-- Shared shapes
-- ---------------------------------------------------------------------------------------

---A structured error (`task.error`, the cancellation error; lua/cseng/lib/errors.lua builds on it):
---`tostring` gives "message (code)", or "stage: message (code)" when it has a stage.
---@class cseng.Error
---@field code string stable code, e.g. "ECANCELED"
---@field message string
---@field stage? string the phase it happened in (runner)
---@field traceback? string added when the error leaves a task (not to the cancellation)

---Stable error codes returned as the third value of an expected failure.
---@alias cseng.Code string

-- ---------------------------------------------------------------------------------------
-- cseng.task
-- ---------------------------------------------------------------------------------------

---A task: a Lua coroutine run by the scheduler.
---@class cseng.Task
local Task = {}

---Wait until the task is done. `true, results...` if its function returned, `false, err` if it
---raised (string errors with a traceback appended; table errors as they were).
---@async
---@return boolean ok
---@return any ...
function Task:join() end

---Cancel the task (delivered once): the operation it waits on is abandoned and raises the
---`ECANCELED` error; a task already cancelled or done is left alone.
function Task:cancel() end

---@return "ready"|"running"|"waiting"|"done"
function Task:status() end

---The task's number (the main task is 1).
---@return integer
function Task:id() end

---A counting semaphore (`task.semaphore(n)`). Its `__close` is `release`.
---@class cseng.Semaphore
local Semaphore = {}

---Take a permit, waiting (FIFO) while none is free. Returns the semaphore itself, so
---`local _ <close> = sem:acquire()` holds the permit for the block.
---@async
---@return cseng.Semaphore self
function Semaphore:acquire() end

---Give a permit back (to the first waiter, else to the pool). Never yields.
function Semaphore:release() end

---Free permits.
---@return integer
function Semaphore:count() end

---Tasks, the scheduler, cancellation and signals (engine/ltask.c).
---@class cseng.task
local task = {}

---Start `fn(...)` in a new task; it runs once the caller yields.
---@param fn async fun(...): ...
---@param ... any arguments for fn
---@return cseng.Task
function task.spawn(fn, ...) end

---Wait until `t` is done: `true, results...` or `false, err`.
---@async
---@param t cseng.Task
---@return boolean ok
---@return any ...
function task.join(t) end

---Sleep (millisecond timer, rounded up); `seconds <= 0` is `task.yield()`.
---@async
---@param seconds number
function task.sleep(seconds) end

---Let every other ready task run once.
---@async
function task.yield() end

---The running task, or nil inside a plain coroutine.
---@return cseng.Task?
function task.current() end

---Cancel a task (delivered once).
---@param t cseng.Task
function task.cancel(t) end

---Whether the running task has been cancelled.
---@return boolean
function task.cancelled() end

---How many SIGINT/SIGTERM arrived.
---@return integer
function task.interrupted() end

---The number of the last SIGINT/SIGTERM that arrived, or nil.
---@return integer|nil
function task.signal() end

---Whether the engine prints its own line on the first signal (before this call); false turns
---it off for a caller that says it in its own terms.
---@param on? boolean
---@return boolean
function task.interrupt_notice(on) end

---Live tasks, the running one included.
---@return integer
function task.count() end

---A semaphore with `n >= 0` permits.
---@param n integer
---@return cseng.Semaphore
function task.semaphore(n) end

---`pcall(fn, ...)`, and the cancellation boundary: once the task is cancelled, inside `fn` the
---cancellation stays raised (pcall, xpcall and coroutine.resume raise it again, every wait raises
---it, a spin is interrupted again) until it has left `fn`, which then returns `false, err`.
---@param fn function
---@return boolean ok
---@return any ...
function task.guard(fn, ...) end

---A structured error object for `error(...)`.
---@param code string
---@param message? string defaults to code
---@param fields? table more fields (stage, ...)
---@return cseng.Error
function task.error(code, message, fields) end

-- ---------------------------------------------------------------------------------------
-- cseng.clock
-- ---------------------------------------------------------------------------------------

---Time (engine/lclock.c). Nothing yields.
---@class cseng.clock
local clock = {}

---Monotonic nanoseconds (integer; arbitrary origin). Durations: `(clock.now() - t0) / 1e9`.
---@return integer
function clock.now() end

---ISO-8601 UTC with microseconds, e.g. "2026-11-29T08:11:54.519815Z"; of `epoch` if given.
---@param epoch? number seconds since 1970
---@return string
function clock.wall(epoch) end

---Wall time as float seconds since 1970.
---@return number
function clock.epoch() end

-- ---------------------------------------------------------------------------------------
-- cseng.http
-- ---------------------------------------------------------------------------------------

---@class cseng.http.Options
---@field url string
---@field method? string default "GET"
---@field headers? table<string, string|number|boolean> one value per name ("" sends an empty header)
---@field body? string
---@field timeout? number seconds for the whole transfer (default 60; 0 = none)
---@field connect_timeout? number seconds
---@field unix_socket? string connect to this Unix socket
---@field follow? boolean follow redirects
---@field insecure? boolean skip TLS verification
---@field ca_file? string PEM file of the CAs to trust instead of libcurl's built-in bundle (its CA directory stays)
---@field max_body? integer bytes (EBODY beyond)
---@field stream? async fun(chunk: string, head: cseng.http.Head?): boolean? the body in chunks; false stops it (EABORTED)
---@field http_version? "1.1"|"2"|"2-prior-knowledge" "2": ALPN over TLS, prior knowledge for http:// (the response must be HTTP/2, else EHTTP2)

---What a stream callback's first call gets beside its chunk: the response's status and headers.
---@class cseng.http.Head
---@field status integer
---@field headers table<string, string> lowercased names

---Cumulative marks in seconds since the request started (curl's *_TIME_T).
---@class cseng.http.Timings
---@field dns number
---@field connect number 0 on a reused connection
---@field tls number 0 for plain HTTP and reused connections
---@field ttfb number first response byte
---@field total number

---@class cseng.http.Response
---@field status integer
---@field headers table<string, string> lowercased names; repeated headers joined with ", "
---@field body string "" for HEAD and streamed requests
---@field trailers table<string, string> response trailers (HTTP/2, chunked HTTP/1.1), lowercased; {} when none
---@field http_version "1.0"|"1.1"|"2"
---@field timings cseng.http.Timings

---@class cseng.http.Config
---@field max_connections? integer cache size per pool (and idle native connections per host)
---@field max_host_connections? integer
---@field max_total_connections? integer
---@field max_concurrent_streams? integer
---@field pools? integer
---@field native? boolean the native path (HTTP/1.1 and HTTP/2, plain and over TLS) on or off
---@field ca_file? string|false the CA bundle of requests that name none (false: the built-in one again)

---@class cseng.http.NativeStats
---@field enabled boolean the native path (engine/h1.c, tls.c, h2.c) takes the requests it can
---@field requests integer requests sent through it
---@field connects integer connections it opened
---@field reused integer requests that reused an idle connection
---@field retried integer requests sent again on a new connection (the reused one had been closed)
---@field open integer connections open now
---@field idle integer of them idle
---@field tls_handshakes integer TLS handshakes done
---@field tls_resumed integer of them resuming a session
---@field h2_connections integer HTTP/2 connections opened
---@field h2_streams integer HTTP/2 streams started
---@field unit_reads integer reads that ended where a TLS record, an HTTP/2 frame or its header ends (several streams open)

---@class cseng.http.Stats
---@field in_flight integer
---@field started integer
---@field completed integer
---@field pools integer
---@field max_concurrent_streams integer HTTP/2 streams a connection carries (http.configure)
---@field native cseng.http.NativeStats

---HTTP client on libcurl's multi-socket API (engine/lhttp.c); the requests libcurl would send with
---nothing of its own on a native path (engine/h1.c, tls.c, h2.c) with the same results (docs/ENGINE.md).
---@class cseng.http
local http = {}

---Make a request. Failure codes: ETIMEDOUT, ECONNREFUSED, ENOENT, EACCES, EHOSTUNREACH,
---ENOTFOUND, ECONNRESET, ETLS, EBODY, EABORTED, EREDIRECT, EURL, EHTTP2, ECURL. An HTTP error
---status is a response, not a failure. A bad option raises "http.request: opts.<name> must be ...".
---@async
---@param opts cseng.http.Options
---@return cseng.http.Response? response
---@return string? message
---@return cseng.Code? code
function http.request(opts) end

---Connection limits of the process's multi handles (pools: docs/ENGINE.md).
---@param opts cseng.http.Config
function http.configure(opts) end

---@return cseng.http.Stats
function http.stats() end

---@class cseng.http.WarmOptions
---@field url string the origin (scheme, host, port; the path is ignored)
---@field calls? integer requests that should start at once without a new connection (default 1)
---@field http_version? "1.1"|"2"
---@field ca_file? string
---@field insecure? boolean
---@field timeout? number
---@field connect_timeout? number

---@class cseng.http.WarmInfo
---@field opened integer connections opened
---@field ready integer calls that would now start without a new connection
---@field http_version "1.1"|"2"
---@field connections? integer HTTP/2 connections to the origin
---@field streams? integer streams each may carry
---@field seconds number

---Open the native path's connections a burst of `calls` requests would start on (TCP, TLS,
---HTTP/2 settings), options not given taken from the origin's latest native request.
---@async
---@param opts cseng.http.WarmOptions
---@return cseng.http.WarmInfo? info
---@return string? message
---@return cseng.Code? code
function http.warm(opts) end

---Close the idle native connections to the URL's scheme, host and port; returns how many.
---@param url string
---@return integer
function http.close_idle(url) end

---How many of the running task's requests waited for a new connection, and for how long in all.
---@return integer count
---@return number seconds
function http.handshakes() end

-- ---------------------------------------------------------------------------------------
-- cseng.proc
-- ---------------------------------------------------------------------------------------

---@class cseng.proc.RunOptions
---@field argv (string|number)[] argv[1] is looked up in PATH
---@field cwd? string
---@field env? table<string, string> replaces the environment
---@field env_add? table<string, string|false> merged over the environment (false removes)
---@field stdin? string written to the child's stdin, then closed (else /dev/null)
---@field timeout? number seconds; then SIGTERM to the group, SIGKILL after kill_grace
---@field kill_grace? number seconds (default 2)
---@field tail_bytes? integer bytes kept of each of stdout and stderr (default 1 MiB), the tail
---@field kill_group? boolean default true: SIGKILL the group once the leader exits

---@class cseng.proc.Exit
---@field code integer exit status; 128 + signo for a death by signal
---@field signal string? "SIGTERM", "SIGKILL", ... when killed by a signal
---@field elapsed number seconds
---@field elapsed_ns integer
---@field timed_out boolean

---@class cseng.proc.Result: cseng.proc.Exit
---@field stdout string
---@field stderr string
---@field stdout_dropped integer bytes discarded from the front
---@field stderr_dropped integer
---@field pid integer

---@class cseng.proc.SpawnOptions
---@field argv (string|number)[]
---@field cwd? string
---@field env? table<string, string>
---@field env_add? table<string, string|false>
---@field kill_group? boolean
---@field kill_grace? number
---@field stdin? "null"|"inherit"|string a file path to read
---@field stdout? "null"|"inherit"|"pipe"|string a file path (created or truncated); "pipe": read with Process:read_line
---@field stderr? "null"|"inherit"|string

---A long-running child (`proc.spawn`); close (or `<close>`, or GC) TERMs then KILLs its group.
---@class cseng.proc.Process
local Process = {}

---@return integer pid the child's pid (= its process group id)
function Process:pid() end

---Signal the whole group. `sig`: a signal name, SIG prefix optional ("TERM", the default,
---"SIGKILL", "CONT", ...; the names sys.kill takes) or a number.
---@param sig? string|integer
---@return true|nil ok
---@return string? message
---@return cseng.Code? code "ESRCH"
function Process:kill(sig) end

---Wait for the child's exit; with a timeout that expires: nil, msg, "ETIMEDOUT" (it keeps running).
---@async
---@param timeout? number seconds
---@return cseng.proc.Exit? exit
---@return string? message
---@return cseng.Code? code
function Process:wait(timeout) end

---One line of the child's stdout (spawned with stdout = "pipe"), without its newline; yields until
---it arrives. nil, msg, "EOF" when stdout closed first; "ETIMEDOUT" after timeout seconds;
---"EPROTO" for a line longer than 4,096 bytes.
---@async
---@param timeout? number
---@return string? line
---@return string? message
---@return cseng.Code? code
function Process:read_line(timeout) end

---SIGTERM to the group, SIGKILL after kill_grace; idempotent.
function Process:close() end

---Subprocesses on the loop, each in its own session and process group (engine/lproc.c).
---@class cseng.proc
local proc = {}

---Run a command to completion.
---@async
---@param opts cseng.proc.RunOptions
---@return cseng.proc.Result? result a timeout is a result (timed_out = true), not a failure
---@return string? message
---@return cseng.Code? code "ENOENT", "EACCES", ...
function proc.run(opts) end

---Start a long-running child.
---@param opts cseng.proc.SpawnOptions
---@return cseng.proc.Process? process
---@return string? message
---@return cseng.Code? code
function proc.spawn(opts) end

---The first executable named `name` in PATH.
---@param name string
---@return string? path
---@return string? message
---@return cseng.Code? code "ENOENT"
function proc.which(name) end

-- ---------------------------------------------------------------------------------------
-- cseng.serve
-- ---------------------------------------------------------------------------------------

---A request; fields can be added.
---@class cseng.serve.Request
---@field method string
---@field path string target before "?", not decoded
---@field query string raw text after "?", or ""
---@field headers table<string, string> lowercased names
---@field body string
---@field remote string "127.0.0.1:54321"
---@field version string "1.1"
local Request = {}

---Send the whole response at once (does not yield).
---@param status integer
---@param headers? table<string, string|string[]>
---@param body? string
---@return true|nil ok
---@return string? message
---@return cseng.Code? code "EPIPE"
function Request:respond(status, headers, body) end

---Begin a streamed (chunked) response.
---@param status integer
---@param headers? table<string, string|string[]>
function Request:start(status, headers) end

---Write a chunk of a streamed response; yields until written.
---@async
---@param chunk string
---@return true|nil ok
---@return string? message
---@return cseng.Code? code "EPIPE"
function Request:write(chunk) end

---End a streamed response.
function Request:finish() end

---Drop the connection.
function Request:abort() end

---@return "pending"|"streaming"|"done"
function Request:state() end

---@class cseng.serve.Stats
---@field requests integer
---@field in_flight integer
---@field max_in_flight integer
---@field connections integer

---A listening server (`serve.listen`); `close`, `<close>` and GC close it.
---@class cseng.serve.Server
local Server = {}

---@return integer
function Server:port() end

---@return string url "http://127.0.0.1:PORT"
function Server:url() end

---The next request (servers without a handler).
---@async
---@return cseng.serve.Request? request
---@return string? message
---@return cseng.Code? code "ECLOSED"
function Server:accept() end

---@return cseng.serve.Stats
function Server:stats() end

function Server:close() end

---A handler returns `status, headers, body` or `{status=, headers=, body=}`.
---@alias cseng.serve.Handler async fun(req: cseng.serve.Request): (integer|cseng.serve.Reply)?, table?, string?

---@class cseng.serve.Reply
---@field status integer
---@field headers? table<string, string|string[]>
---@field body? string

---@class cseng.serve.Options
---@field host? string numeric address (default "127.0.0.1")
---@field port? integer default 0: ephemeral
---@field handler? cseng.serve.Handler each request runs it in a task of the dispatcher's pool
---@field backlog? integer default 1024
---@field max_body? integer request body limit in bytes (default 64 MiB)
---@field max_header? integer request line + headers limit in bytes (default 64 KiB; 431 beyond)
---@field max_connections? integer open connections at most (default min(128, nofile/4); 503 beyond)
---@field idle_timeout? number seconds without a request in progress before a connection is closed (default 60; 0 never)

---An HTTP/1.1 server whose handlers are tasks (engine/lserve.c).
---@class cseng.serve
local serve = {}

---@param opts cseng.serve.Options
---@return cseng.serve.Server? server
---@return string? message
---@return cseng.Code? code "EADDRINUSE", "EACCES", ...
function serve.listen(opts) end

-- ---------------------------------------------------------------------------------------
-- cseng.crypto
-- ---------------------------------------------------------------------------------------

---Hashes, MACs, encodings, randomness (OpenSSL; engine/lcrypto.c). Synchronous.
---@class cseng.crypto
local crypto = {}

---@param s string
---@return string digest 32 raw bytes
function crypto.sha256(s) end

---@param s string
---@return string hex 64 lowercase hex digits
function crypto.sha256_hex(s) end

---@param key string
---@param msg string
---@return string mac 32 raw bytes
function crypto.hmac_sha256(key, msg) end

---@param s string
---@return string hex lowercase
function crypto.hex(s) end

---@param s string
---@return string? bytes
---@return string? message
---@return cseng.Code? code "EINVAL"
function crypto.unhex(s) end

---@param s string
---@return string base64 standard alphabet, padded, no line breaks
function crypto.base64(s) end

---Strict decoding; line breaks are skipped.
---@param s string
---@return string? bytes
---@return string? message
---@return cseng.Code? code "EINVAL"
function crypto.unbase64(s) end

---@param n integer 0 <= n <= 64 MiB
---@return string bytes
function crypto.random_bytes(n) end

-- ---------------------------------------------------------------------------------------
-- cseng.fs
-- ---------------------------------------------------------------------------------------

---@alias cseng.fs.Type "file"|"dir"|"link"|"fifo"|"socket"|"char"|"block"

---@class cseng.fs.Stat
---@field type cseng.fs.Type
---@field size integer
---@field mode integer permission bits
---@field mtime number seconds
---@field mtime_ns integer
---@field uid integer
---@field gid integer

---@class cseng.fs.WalkEntry
---@field path string relative to the walked directory
---@field type cseng.fs.Type
---@field size integer
---@field mode integer

---Local files (engine/lfs.c). Every call is synchronous and blocks the loop. Failures:
---nil, "<path>: <strerror>", errno name ("ENOENT", "EACCES", "EEXIST", ...).
---@class cseng.fs
local fs = {}

---@param path string
---@return string? data
---@return string? message
---@return cseng.Code? code
function fs.read(path) end

---Atomic write (temporary file, then rename).
---@param path string
---@param data string
---@param opts? {mode?: integer|string, sync?: boolean}
---@return true|nil ok
---@return string? message
---@return cseng.Code? code
function fs.write(path, data, opts) end

---One write(2) on an O_APPEND descriptor.
---@param path string
---@param data string
---@param opts? {sync?: boolean}
---@return true|nil ok
---@return string? message
---@return cseng.Code? code
function fs.append(path, data, opts) end

---Synced appends made inside tasks, and the fsyncs that covered them (group commit: appends to one
---file made while its fsync runs share the next one).
---@return {records: integer, fsyncs: integer}
function fs.commit_stats() end

---@param path string
---@param mode? integer|string default 0755
---@return true|nil ok
---@return string? message
---@return cseng.Code? code
function fs.mkdir_p(path, mode) end

---Names in `dir`, sorted, without "." and "..".
---@param dir string
---@return string[]? names
---@return string? message
---@return cseng.Code? code
function fs.list(dir) end

---Every entry below `dir`, sorted by path; symlinks are not followed.
---@param dir string
---@return cseng.fs.WalkEntry[]? entries
---@return string? message
---@return cseng.Code? code
function fs.walk(dir) end

---@param path string
---@return cseng.fs.Stat? stat follows symlinks
---@return string? message
---@return cseng.Code? code
function fs.stat(path) end

---@param path string
---@return cseng.fs.Stat? stat of the name itself
---@return string? message
---@return cseng.Code? code
function fs.lstat(path) end

---Whether the name exists (a dangling symlink exists).
---@param path string
---@return boolean
function fs.exists(path) end

---A file, a symlink or an empty directory.
---@param path string
---@return true|nil ok
---@return string? message
---@return cseng.Code? code
function fs.remove(path) end

---`path` and everything below it, never following a symlink.
---@param path string
---@return true|nil ok
---@return string? message
---@return cseng.Code? code
function fs.remove_tree(path) end

---A new 0700 directory $TMPDIR/<prefix>XXXXXX.
---@param prefix? string default "cseng-"
---@return string? path
---@return string? message
---@return cseng.Code? code
function fs.tempdir(prefix) end

---Copy files, directories and symlinks (as symlinks) with their permission bits.
---@param src string
---@param dst string
---@return true|nil ok
---@return string? message
---@return cseng.Code? code
function fs.copy_tree(src, dst) end

---@param target string
---@param path string
---@return true|nil ok
---@return string? message
---@return cseng.Code? code
function fs.symlink(target, path) end

---@param path string
---@return string? target
---@return string? message
---@return cseng.Code? code
function fs.readlink(path) end

---@param path string
---@param mode integer|string
---@return true|nil ok
---@return string? message
---@return cseng.Code? code
function fs.chmod(path, mode) end

---Atomic within one filesystem (EXDEV across).
---@param from string
---@param to string
---@return true|nil ok
---@return string? message
---@return cseng.Code? code
function fs.rename(from, to) end

---An exclusive flock(2) on path (created 0644 if missing), not waiting: a file another process
---holds is nil, msg, "EAGAIN". Held until lock:close() or collection; close-on-exec.
---@param path string
---@return {close: fun(self)}|nil lock
---@return string? message
---@return cseng.Code? code
function fs.lock(path) end

---@param path string
---@param size integer
---@return true|nil ok
---@return string? message
---@return cseng.Code? code
function fs.truncate(path, size) end

---@param p string
---@return string
function fs.basename(p) end

---@param p string
---@return string
function fs.dirname(p) end

---Components joined by exactly one "/"; an absolute later component does not reset the path.
---@param a string
---@param ... string
---@return string
function fs.join(a, ...) end

-- ---------------------------------------------------------------------------------------
-- cseng.archive
-- ---------------------------------------------------------------------------------------

---@class cseng.archive.ExtractOptions
---@field from? "bytes"|"path" what `src` is (guessed without it)
---@field max_entries? integer default 100000
---@field max_bytes? integer default 512 MiB of file data (a 1 GiB bomb is refused)
---@field strip_components? integer
---@field owners? boolean restore uid/gid (default off)
---@field unsafe_symlinks? boolean allow symlinks that could leave the directory

---@class cseng.archive.ListEntry
---@field path string
---@field type "file"|"dir"|"symlink"|"hardlink"|"fifo"|"char"|"block"|"socket"
---@field size integer
---@field mode integer
---@field linkname string?

---An entry of `archive.pack`: one of data (a string), file (a host path), type="dir" or
---type="symlink" with target.
---@class cseng.archive.Entry
---@field path string
---@field data? string
---@field file? string
---@field type? "file"|"dir"|"symlink"|"link"
---@field target? string
---@field mode? integer|string default 0644 (files), 0755 (directories)

---@class cseng.archive.PackDirOptions
---@field format? "tar.gz"|"tar" default "tar.gz"
---@field exclude? string[] anchored fnmatch patterns relative to the directory
---@field prefix? string put every entry under this path
---@field modes? "preserve"|"normalize"

---Tar archives with libarchive (engine/larchive.c). Synchronous.
---@class cseng.archive
local archive = {}

---Safe extraction into an existing directory. Codes: EUNSAFE, ELIMIT, EARCHIVE, errno names.
---@param src string archive bytes or a path
---@param dir string
---@param opts? cseng.archive.ExtractOptions
---@return {entries: integer, bytes: integer}? result
---@return string? message "<entry>: <reason>"
---@return cseng.Code? code
function archive.extract(src, dir, opts) end

---@param src string archive bytes or a path
---@param opts? {from?: "bytes"|"path", max_entries?: integer}
---@return cseng.archive.ListEntry[]? entries
---@return string? message
---@return cseng.Code? code
function archive.list(src, opts) end

---Deterministic packing: the same entries give the same bytes.
---@param entries cseng.archive.Entry[]
---@param opts? {format?: "tar.gz"|"tar"}
---@return string? bytes
---@return string? message
---@return cseng.Code? code
function archive.pack(entries, opts) end

---`dir`'s tree (not `dir` itself), deterministically.
---@param dir string
---@param opts? cseng.archive.PackDirOptions
---@return string? bytes
---@return string? message
---@return cseng.Code? code
function archive.pack_dir(dir, opts) end

-- ---------------------------------------------------------------------------------------
-- cseng.sys
-- ---------------------------------------------------------------------------------------

---@class cseng.sys.Versions
---@field cseng string
---@field lua string
---@field libcurl string the libcurl it runs with and was built with: "8.14.1 (built with 8.14.1)"
---@field libcurl_runtime string
---@field libcurl_built string
---@field libuv string
---@field libarchive string
---@field openssl string
---@field malloc string the allocator: "jemalloc 5.3.0-..." (./cseng) or "glibc malloc 2.36" (cseng-asan)

---The process and its host (engine/lsys.c).
---@class cseng.sys
local sys = {}

---@return cseng.sys.Versions
function sys.versions() end

---The directory holding lua/ ($CSENG_ROOT, the binary's directory, or the install data dir).
---@return string
function sys.root() end

---@param name string
---@return string?
function sys.getenv(name) end

---@return table<string, string>
function sys.environ() end

---@return string? hostname
---@return string? message
---@return cseng.Code? code "EHOST"
function sys.hostname() end

---@return integer
function sys.pid() end

---@return integer
function sys.uid() end

---@param fd? integer default 1
---@return boolean
function sys.isatty(fd) end

---@return integer
function sys.cpu_count() end

---@return {maxrss_kb: integer, user_s: number, sys_s: number}
function sys.usage() end

---@param p string
---@return string? path
---@return string? message
---@return cseng.Code? code "ENOENT" (whatever the cause)
function sys.realpath(p) end

---@return string? cwd
---@return string? message
---@return cseng.Code? code "EIO"
function sys.cwd() end

---Signal one process. `sig`: a signal name, SIG prefix optional ("TERM", the default,
---"SIGCONT", ...; the names Process:kill takes) or a number.
---@param pid integer
---@param sig? string|integer default "TERM"
---@return true|nil ok
---@return string? message
---@return cseng.Code? code "ESRCH" or "EPERM"
function sys.kill(pid, sig) end

-- ---------------------------------------------------------------------------------------
-- cseng.parquet
-- ---------------------------------------------------------------------------------------

---@class cseng.parquet.Node
---@field name string
---@field path? string dotted path (absent on the root)
---@field repetition? "REQUIRED"|"OPTIONAL"|"REPEATED"
---@field kind "struct"|"list"|"leaf"
---@field logical? string "STRING", "JSON", "LIST", "DECIMAL", ...
---@field type? string physical type of a leaf
---@field type_length? integer FIXED_LEN_BYTE_ARRAY width
---@field fields? cseng.parquet.Node[]

---@class cseng.parquet.Column
---@field path string
---@field type string
---@field logical? string
---@field repetition string
---@field max_definition_level integer
---@field max_repetition_level integer
---@field codecs string[]
---@field encodings string[]
---@field compressed_size integer
---@field uncompressed_size integer

---@class cseng.parquet.ChunkInfo
---@field path string
---@field codec string
---@field encodings string[]
---@field num_values integer
---@field compressed_size integer
---@field uncompressed_size integer

---@class cseng.parquet.RowGroup
---@field num_rows integer
---@field total_byte_size integer
---@field columns cseng.parquet.ChunkInfo[]

---@class cseng.parquet.File
---@field version integer
---@field num_rows integer
---@field file_size integer
---@field created_by? string
---@field schema cseng.parquet.Node
---@field columns cseng.parquet.Column[]
---@field row_groups cseng.parquet.RowGroup[]
---@field key_value {key: string, value?: string}[]
---@field rows? table[] absent with {rows = false}

---@class cseng.parquet.Options
---@field rows? boolean false: metadata only
---@field nulls? "null"|"omit" "omit" leaves null struct fields out
---@field max_memory? integer bytes decoding may allocate (default 1 GiB)

---Parquet reader (engine/lparquet.c). Synchronous. Codes: ENOENT, EACCES, EIO, ENOMEM,
---PARQUET_MAGIC, PARQUET_TRUNCATED, PARQUET_METADATA, PARQUET_PAGE, PARQUET_DICTIONARY,
---PARQUET_CODEC, PARQUET_UNSUPPORTED, PARQUET_LIMIT.
---@class cseng.parquet
---@field null lightuserdata the null sentinel (== cjson.null; truthy)
local parquet = {}

---@param path string
---@param opts? cseng.parquet.Options
---@return cseng.parquet.File? file
---@return string? message
---@return cseng.Code? code
function parquet.read(path, opts) end

---@param bytes string a whole parquet file
---@param opts? cseng.parquet.Options
---@return cseng.parquet.File? file
---@return string? message
---@return cseng.Code? code
function parquet.decode(bytes, opts) end

---Metadata only.
---@param path string
---@return cseng.parquet.File? file
---@return string? message
---@return cseng.Code? code
function parquet.info(path) end

---One JSON object per row; out "-" is stdout; no output file is left on failure.
---@param path string
---@param out string
---@param opts? {max_memory?: integer}
---@return integer? rows
---@return string? message
---@return cseng.Code? code
function parquet.to_jsonl(path, out, opts) end

-- ---------------------------------------------------------------------------------------
-- cseng.redact
-- ---------------------------------------------------------------------------------------

---The C side's secret set (engine/redact.c), fed by lua/cseng/lib/util.lua.
---@class cseng.redact
local redact = {}

---Hide s (6 or more bytes) in C diagnostics; with fragments, every 8-byte run of it too.
---@param s string
---@param fragments? boolean
function redact.add(s, fragments) end

---Forget every secret.
function redact.clear() end

---s as the C side redacts it.
---@param s string
---@return string
function redact.apply(s) end

---Write s to stderr as a C diagnostic (redacted, control characters escaped).
---@param s string
function redact.diag(s) end

-- ---------------------------------------------------------------------------------------
-- cseng.sqlite
-- ---------------------------------------------------------------------------------------

---Debian's libsqlite3 (engine/lsqlite.c): synchronous, values only as bound parameters.
---@class cseng.sqlite
local sqlite = {}

---@class cseng.sqlite.Db
local Db = {}

---@class cseng.sqlite.Stmt
local Stmt = {}

---Open a database (not through a symbolic link; an untrusted, defensive schema).
---@param path string
---@param opts? {readonly?: boolean, create?: boolean, busy_timeout?: number}
---@return cseng.sqlite.Db? db
---@return string? message
---@return cseng.Code? code
function sqlite.open(path, opts) end

---@return string version
function sqlite.version() end

---SQL without parameters (one or more statements).
---@param sql string
---@return true? ok
---@return string? message
---@return cseng.Code? code
function Db:exec(sql) end

---One statement with ? parameters.
---@param sql string
---@return cseng.sqlite.Stmt? stmt
---@return string? message
---@return cseng.Code? code
function Db:prepare(sql) end

---@return integer
function Db:changes() end
---@return integer
function Db:last_insert_rowid() end
---@return boolean
function Db:autocommit() end
---@param seconds number
function Db:busy_timeout(seconds) end
function Db:close() end

---Bind exactly the statement's values, run it to the end.
---@return integer? changes
---@return string? message
---@return cseng.Code? code
function Stmt:run(...) end
---@return table? row
---@return string? message
---@return cseng.Code? code
function Stmt:one(...) end
---@return table[]? rows
---@return string? message
---@return cseng.Code? code
function Stmt:all(...) end
---@param fn fun(row: table)
---@return integer? rows
---@return string? message
---@return cseng.Code? code
function Stmt:each(fn, ...) end
---Every row as one array per column; a NULL is `null`.
---@param null any
---@return table<string, any[]>? columns
---@return integer|string? rows_or_message
---@return cseng.Code? code
function Stmt:arrays(null, ...) end
---@return string[]
function Stmt:columns() end
function Stmt:close() end

-- ---------------------------------------------------------------------------------------
-- cseng.bootstrap
-- ---------------------------------------------------------------------------------------

---The percentile bootstrap CI of a quantile in C (engine/lbootstrap.c), as stats.bootstrap_ci.
---@class cseng.bootstrap
local bootstrap = {}

---@param xs number[]
---@param q number the quantile (type 7)
---@param reps integer
---@param seed integer
---@param level number
---@return number? lo
---@return number? hi
function bootstrap.quantile_ci(xs, q, reps, seed, level) end

error('lua/meta/cseng.lua holds LuaLS definitions only; require the cseng.* modules instead', 2)
