/*
 * populate.c: memopt.populate(regclass) and the background worker that fills the store.
 *
 * One populate per table at a time: a second request while one is queued or running is
 * rejected (counted, with a warning), as is one for which no worker slot is free.  However
 * the worker ends (done, an error, SIGTERM, FATAL) its exit callback leaves the state done
 * or failed, never queued or running.  Only the table's owner (or a superuser) may populate.  Progress
 * (rows scanned of the estimate, start and finish time) is in memopt.stats.
 */
#include "postgres.h"

#include "memopt.h"
#include "key.h"
#include "store.h"

#include "access/heapam.h"
#include "access/relscan.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "storage/ipc.h"
#include "tcop/tcopprot.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

typedef struct PopulateArgs
{
	Oid			dbid;
	Oid			relid;
	Oid			userid;
} PopulateArgs;

PGDLLEXPORT void memopt_populate_main(Datum arg);

static void
reject(MemoptTable *t, const char *why, const char *hint, Oid relid)
{
	pg_atomic_fetch_add_u64(&t->populate_rejected, 1);
	ereport(WARNING,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("memopt.populate(%s) was not started: %s", get_rel_name(relid), why),
			 errhint("%s", hint)));
}

PG_FUNCTION_INFO_V1(memopt_populate);
Datum
memopt_populate(PG_FUNCTION_ARGS)
{
	Oid			relid = PG_GETARG_OID(0);
	Relation	rel;
	MemoptTable *t;
	uint32		state;
	BackgroundWorker worker = {0};
	BackgroundWorkerHandle *handle;
	PopulateArgs args = {MyDatabaseId, relid, GetUserId()};

	memopt_require_owner(relid, "populate");
	memopt_require_store();
	rel = table_open(relid, AccessShareLock);
	if (!memopt_relation_synced(rel))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("table \"%s\" is not enabled for memoptimized reads",
						RelationGetRelationName(rel)),
				 errhint("Call memopt.enable_read('%s') first.", RelationGetRelationName(rel))));
	table_close(rel, AccessShareLock);
	t = memopt_table(MyDatabaseId, relid, MEMOPT_CREATE);

	state = pg_atomic_read_u32(&t->populate_state);
	if (state == POPULATE_QUEUED || state == POPULATE_RUNNING ||
		!pg_atomic_compare_exchange_u32(&t->populate_state, &state, POPULATE_QUEUED))
	{
		reject(t, "a populate of this table is already in progress",
			   "Watch populate_state in memopt.stats; it ends in done or failed.", relid);
		PG_RETURN_BOOL(false);
	}

	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "memopt");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "memopt_populate_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "memopt populate %u", relid);
	snprintf(worker.bgw_type, BGW_MAXLEN, "memopt populate");
	worker.bgw_main_arg = Int32GetDatum((int32) (t - memopt_table_at(0)));
	memcpy(worker.bgw_extra, &args, sizeof(args));
	worker.bgw_notify_pid = 0;
	if (!RegisterDynamicBackgroundWorker(&worker, &handle))
	{
		pg_atomic_write_u32(&t->populate_state, POPULATE_IDLE);
		reject(t, "no background worker slot is free",
			   "Raise max_worker_processes, or try again when other workers have finished.",
			   relid);
		PG_RETURN_BOOL(false);
	}
	pg_atomic_fetch_add_u64(&t->populate_accepted, 1);
	PG_RETURN_BOOL(true);
}

static void
populate(MemoptTable *t, Oid relid)
{
	Relation	rel = try_table_open(relid, AccessShareLock);
	const PkLayout *pk;
	Snapshot	snapshot;
	TableScanDesc scan;
	HeapTuple	tuple;
	StringInfoData key;
	uint64		scanned = 0;

	if (rel == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("memopt populate: table %u no longer exists", relid)));
	pk = memopt_pk_layout(rel);
	if (pk == NULL || !memopt_relation_synced(rel))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("memopt populate: table \"%s\" is no longer enabled for memoptimized reads",
						RelationGetRelationName(rel))));
	memopt_check_layout(t, rel);
	pg_atomic_write_u64(&t->populate_total, (uint64) Max(rel->rd_rel->reltuples, 0));
	initStringInfo(&key);
	snapshot = RegisterSnapshot(GetLatestSnapshot());
	scan = table_beginscan(rel, snapshot, 0, NULL);
	while ((tuple = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		uint32		hash;
		FillTicket	ticket;

		CHECK_FOR_INTERRUPTS();
		memopt_key_from_tuple(pk, tuple, RelationGetDescr(rel), &key);
		hash = memopt_hash(MyDatabaseId, relid, key.data, key.len);
		if (memopt_ticket(t, hash, &ticket) &&
			memopt_fill(t, hash, key.data, key.len, ((HeapScanDesc) scan)->rs_cbuf, tuple,
						&ticket))
			pg_atomic_fetch_add_u64(&t->populated, 1);
		if ((++scanned & 1023) == 0)
			pg_atomic_write_u64(&t->populate_scanned, scanned);
	}
	pg_atomic_write_u64(&t->populate_scanned, scanned);
	table_endscan(scan);
	UnregisterSnapshot(snapshot);
	table_close(rel, AccessShareLock);
}

/* The slot this worker fills, so that its exit can close the populate whatever ended it. */
static MemoptTable *populating;
static PopulateArgs populating_args;

/*
 * before_shmem_exit: a populate still queued or running when the worker exits (an ERROR,
 * which a background worker turns into FATAL; a FATAL; SIGTERM) is marked failed, so that
 * the next memopt.populate() is accepted.  Only if the slot still belongs to the table.
 */
static void
populate_exit(int code, Datum arg)
{
	MemoptTable *t = populating;
	uint32		state;

	if (t == NULL || t->relid != populating_args.relid || t->dbid != populating_args.dbid)
		return;
	state = pg_atomic_read_u32(&t->populate_state);
	if (state == POPULATE_QUEUED || state == POPULATE_RUNNING)
	{
		pg_atomic_write_u64(&t->populate_finished, (uint64) GetCurrentTimestamp());
		pg_atomic_write_u32(&t->populate_state, POPULATE_FAILED);
	}
}

void
memopt_populate_main(Datum arg)
{
	MemoptTable *t = memopt_table_at(DatumGetInt32(arg));

	/*
	 * PostgreSQL's standard handler: SIGTERM sets a flag that CHECK_FOR_INTERRUPTS acts on.
	 * The bgworker default raises FATAL inside the signal handler, wherever the worker was,
	 * e.g. holding the free-list spinlock.
	 */
	pqsignal(SIGTERM, die);
	memcpy(&populating_args, MyBgworkerEntry->bgw_extra, sizeof(populating_args));
	populating = t;
	before_shmem_exit(populate_exit, (Datum) 0);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnectionByOid(populating_args.dbid, populating_args.userid, 0);
	if (t == NULL || t->relid != populating_args.relid || t->dbid != populating_args.dbid)
		proc_exit(0);				/* the table was dropped meanwhile */

	pg_atomic_write_u64(&t->populate_scanned, 0);
	pg_atomic_write_u64(&t->populate_started, (uint64) GetCurrentTimestamp());
	pg_atomic_write_u64(&t->populate_finished, 0);
	pg_atomic_write_u32(&t->populate_state, POPULATE_RUNNING);
	pgstat_report_activity(STATE_RUNNING, "memopt populate");
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	populate(t, populating_args.relid);
	PopActiveSnapshot();
	CommitTransactionCommand();
	pg_atomic_write_u64(&t->populate_finished, (uint64) GetCurrentTimestamp());
	pg_atomic_write_u32(&t->populate_state, POPULATE_DONE);
	pgstat_report_activity(STATE_IDLE, NULL);
	proc_exit(0);
}
