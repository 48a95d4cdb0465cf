/*
 * pipeline_flush: the server flushes its replies once per pipelined burst, not once per Sync.
 *
 * PostgreSQL flushes its output at every ReadyForQuery, so a client that pipelines its
 * statements with a Sync each (continue on error: each statement its own transaction) gets
 * one send() per statement from the server, one small packet per reply, and wakes once per
 * packet. With this module loaded, the flush that follows a ReadyForQuery is skipped while
 * more of the client's input is already in the server's receive buffer: the server goes on
 * with that input at once, and the replies leave together when the buffer runs dry, when
 * the 8 kB send buffer fills, or at any other flush (an explicit Flush message, an error, a
 * notice, a COPY). A client that sends one statement and waits sees no difference: its
 * buffer is empty at every ReadyForQuery.
 *
 * What changes for a pipelining client: the reply to a statement it has sent more input
 * after may wait until the server has processed that input (at most the receive buffer's
 * 8 kB of messages already read). A statement there that blocks (a lock held by a session
 * waiting for this reply) holds the earlier replies back; send a Flush message after the
 * Sync whose replies must not wait, or SET pipeline_flush.enabled = off for the session.
 *
 * Load it per session (LOAD 'pipeline_flush', or session_preload_libraries); it applies only
 * to client backends (not walsenders or parallel workers), which keep their own methods.
 */
#include "postgres.h"

#include "fmgr.h"
#include "libpq/libpq.h"
#include "miscadmin.h"
#include "replication/walsender.h"
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

static int
pf_putmessage(char msgtype, const char *s, size_t len)
{
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
	bool		skip = after_ready && enabled && pq_buffer_has_data();

	after_ready = false;
	/*
	 * Skipped only while more input is buffered: the server reads no further before it has
	 * processed that input, so it reaches another flush (the next ReadyForQuery with the
	 * buffer empty, or any other) without waiting on the client.
	 */
	if (skip)
		return 0;
	return inner->flush();
}

static int
pf_flush_if_writable(void)
{
	after_ready = false;
	return inner->flush_if_writable();
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

	/* Client backends only, once: walsenders and parallel workers keep their own methods. */
	if (inner != NULL || MyProcPort == NULL || am_walsender)
		return;
	inner = PqCommMethods;
	methods = *inner;
	methods.putmessage = pf_putmessage;
	methods.putmessage_noblock = pf_putmessage_noblock;
	methods.flush = pf_flush;
	methods.flush_if_writable = pf_flush_if_writable;
	PqCommMethods = &methods;
}
