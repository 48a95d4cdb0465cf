/*
 * pipeline_flush: the server flushes its replies once per pipelined burst, not once per Sync.
 *
 * PostgreSQL flushes its output at every ReadyForQuery, so a client that pipelines its
 * statements with a Sync each (continue on error: each statement its own transaction) gets
 * one send() per statement from the server, one small packet per reply, and wakes once per
 * packet. With this module loaded, the flush that follows a ReadyForQuery is skipped while the
 * next message in the server's receive buffer is one that makes it put a reply (Parse, Bind,
 * Execute, Describe, Close, Sync, Query, FunctionCall) or a Flush: the server goes on with that
 * input at once, and the held replies leave before it could wait on the client (when its
 * buffer runs dry, or the next message puts nothing: Terminate, stray COPY data), when its
 * 8 kB send buffer fills, or at any other flush (a Flush message, an error, a notice, a COPY).
 * A client that sends one statement and waits sees no difference: its buffer is empty at
 * every ReadyForQuery.
 *
 * What changes for a pipelining client: the reply to a statement it has sent more input
 * after may wait until the server has processed that input (at most the receive buffer's
 * 8 kB of messages already read). A statement there that blocks (a lock held by a session
 * waiting for this reply) holds the earlier replies back; send a Flush message after the
 * Sync whose replies must not wait, or SET pipeline_flush.enabled = off for the session.
 *
 * Load it per session (LOAD 'pipeline_flush', session_preload_libraries) or for the server
 * (shared_preload_libraries); it applies only to client backends (not walsenders or parallel
 * workers), which keep their own methods.
 */
#include "postgres.h"

#include "fmgr.h"
#include "libpq/auth.h"
#include "libpq/libpq.h"
#include "miscadmin.h"
#include "replication/walsender.h"
#include "storage/ipc.h"
#include "utils/guc.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

/* The methods this module wraps (the socket's), and the wrapped set it installs. */
static const PQcommMethods *inner = NULL;
static PQcommMethods methods;

/* pipeline_flush.enabled: on by default once loaded; a session may turn it off. */
static bool enabled = true;

/*
 * The last message put was a ReadyForQuery and nothing has been flushed since: the next
 * flush is ReadyForQuery's own (it flushes right after putting the message). Any other flush
 * or put clears it, so an explicit Flush message, an error or a notice always flushes.
 */
static bool after_ready = false;

/* A flush after a ReadyForQuery was skipped, and nothing has flushed since. */
static bool held = false;

/*
 * Whether what the server holds must leave now: true unless the next buffered message is
 * whole-message input that will make the server put a message (and so call back here) before
 * it could wait on the client. The server reads from the socket only once its buffer is
 * empty, and some messages put nothing: Terminate (the backend exits without flushing),
 * CopyData / CopyDone / CopyFail outside a COPY (skipped silently). So the held replies leave
 * before the buffer runs dry or such a message is reached; a statement that leaves its own
 * replies unflushed (no Sync or Flush after it) keeps PostgreSQL's behaviour.
 *
 * Not covered: a message whose first bytes are buffered and the rest not yet sent. The server
 * waits for the rest holding the replies, so a client must not wait for replies with part of
 * a message unsent (libpq requires PQflush in nonblocking mode for the same reason).
 */
static bool
must_flush(void)
{
	int			next;

	/* Mid-read (an error while reading a message): the buffer is not at a boundary. */
	if (pq_is_reading_msg() || !pq_buffer_has_data())
		return true;
	/* Between messages: the buffer starts with the next one's type byte. */
	pq_startmsgread();
	next = pq_peekbyte();
	pq_endmsgread();
	switch (next)
	{
		case 'P':				/* Parse: ParseComplete or an error */
		case 'B':				/* Bind: BindComplete or an error */
		case 'E':				/* Execute: rows, CommandComplete, ... or an error */
		case 'D':				/* Describe */
		case 'C':				/* Close: CloseComplete */
		case 'S':				/* Sync: ReadyForQuery */
		case 'Q':				/* Query: at least ReadyForQuery */
		case 'F':				/* FunctionCall: its result and ReadyForQuery */
		case 'H':				/* Flush: flushes */
			return false;
		default:
			return true;
	}
}

static int
pf_putmessage(char msgtype, const char *s, size_t len)
{
	/* The last message of a burst put something: release what is held before it. */
	if (held && must_flush())
	{
		held = false;
		if (inner->flush())
			return EOF;
	}
	after_ready = (msgtype == 'Z');
	return inner->putmessage(msgtype, s, len);
}

static void
pf_putmessage_noblock(char msgtype, const char *s, size_t len)
{
	after_ready = false;
	inner->putmessage_noblock(msgtype, s, len);
}

static int
pf_flush(void)
{
	bool		skip = after_ready && enabled && !must_flush();

	after_ready = false;
	if (skip)
	{
		held = true;
		return 0;
	}
	held = false;
	return inner->flush();
}

static int
pf_flush_if_writable(void)
{
	after_ready = false;
	return inner->flush_if_writable();
}

/*
 * Exit with replies held: by the rules above it cannot happen (every message that may follow
 * a skipped flush puts a reply or flushes, and an error flushes), so this is a second line:
 * PostgreSQL's exit path does not flush, and the socket's own exit callback, registered
 * before this one and so run after it, only closes. A backend killed outright (SIGKILL, a
 * crash) runs no callback and loses what it holds, replies of committed statements included.
 */
static void
pf_at_exit(int code, Datum arg)
{
	if (held)
	{
		held = false;
		(void) inner->flush();
	}
}

/* Wraps this backend's socket methods, once; client backends only. */
static void
wrap(void)
{
	if (inner != NULL || MyProcPort == NULL || am_walsender)
		return;
	inner = PqCommMethods;
	methods = *inner;
	methods.putmessage = pf_putmessage;
	methods.putmessage_noblock = pf_putmessage_noblock;
	methods.flush = pf_flush;
	methods.flush_if_writable = pf_flush_if_writable;
	PqCommMethods = &methods;
	on_proc_exit(pf_at_exit, (Datum) 0);
}

static ClientAuthentication_hook_type prev_client_auth = NULL;

/* Preloaded by the postmaster: each backend wraps its socket once its client is known. */
static void
pf_client_auth(Port *port, int status)
{
	if (prev_client_auth)
		prev_client_auth(port, status);
	wrap();
}

void
_PG_init(void)
{
	/*
	 * The setting exists in every process that loads the module (parallel workers restore the
	 * leader's settings after its libraries), even where nothing is wrapped.
	 */
	DefineCustomBoolVariable("pipeline_flush.enabled",
							 "Skips the flush after a ReadyForQuery while more client input is buffered.",
							 "Off: the server flushes at every ReadyForQuery, as PostgreSQL does.",
							 &enabled,
							 true,
							 PGC_USERSET,
							 0,
							 NULL, NULL, NULL);
	MarkGUCPrefixReserved("pipeline_flush");

	/*
	 * shared_preload_libraries: loaded once in the postmaster, before any backend has a
	 * socket, and inherited by every backend without running this again; so each backend
	 * wraps its socket from the authentication hook. Otherwise (LOAD,
	 * session_preload_libraries) this backend wraps now. Walsenders and parallel workers keep
	 * their own methods.
	 */
	if (process_shared_preload_libraries_in_progress)
	{
		prev_client_auth = ClientAuthentication_hook;
		ClientAuthentication_hook = pf_client_auth;
		return;
	}
	wrap();
}
