/*
 * sync.c: keeping the store consistent with writes.
 *
 * The ENABLE ALWAYS triggers record, for the whole top-level transaction, the hash of every
 * key written (old and new key of an UPDATE) and every table truncated.  At PRE_COMMIT the
 * keys are fenced; at the end of the transaction (after it is visible as committed, or after
 * it aborted) each fence is dropped, its bucket's generation bumped and the key's entries
 * removed.  A reader whose snapshot sees the commit was taken after the fence went up, so it
 * finds the fence or no entry.  Writers never install rows: readers refill lazily.
 *
 * Reads of a table this transaction wrote, or is writing, are not served at all
 * (MISS_OWN_WRITE, see memopt_wrote), so the writer always sees its own changes through the
 * normal plan.  On abort the keys that were never fenced are purged as well.
 */
#include "postgres.h"

#include "memopt.h"
#include "key.h"
#include "store.h"

#include "access/parallel.h"
#include "access/xact.h"
#include "storage/lmgr.h"
#include "catalog/objectaccess.h"
#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/pg_class.h"
#include "catalog/pg_database.h"
#include "catalog/pg_trigger.h"
#include "utils/fmgroids.h"
#include "commands/trigger.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"

typedef struct DirtyKey
{
	Oid			relid;
	uint32		hash;
} DirtyKey;

static DirtyKey *dirty;
static int	ndirty;
static int	maxdirty;
static int	nfenced;			/* dirty[0..nfenced) are fenced in shared memory */

static Oid *written;			/* tables with a row write or a TRUNCATE */
static bool *truncated;
static MemoptTable **table_fenced;	/* the slot fenced at PRE_COMMIT, or NULL */
static int *nkeys;				/* keys recorded per written table */
static bool *keys_only;			/* no slot for a table fence: stay key by key */
static int	nwritten;
static int	maxwritten;

/*
 * Tables and databases dropped by this transaction: their slots are released when it commits
 * (a rolled-back DROP keeps the table, its triggers and its slot).  relid = InvalidOid stands
 * for a whole database.  level is the subtransaction that dropped it.  trigger: only a sync
 * trigger of the table was dropped (DROP EXTENSION memopt CASCADE, DROP SCHEMA memopt
 * CASCADE, by hand); the slot goes only if the table lacks one at PRE_COMMIT, since
 * enable_read drops and creates them in one transaction.  Else a database whose memopt was
 * dropped kept one of the cluster's slots until a restart, with nothing left to release it.
 */
typedef struct PendingDrop
{
	Oid			dbid;
	Oid			relid;
	int			level;
	bool		trigger;
} PendingDrop;

static PendingDrop *drops;
static int	ndrops;
static int	maxdrops;

static StringInfoData keybuf;
static object_access_hook_type prev_object_access;

static int
note_written(Oid relid)
{
	for (int i = 0; i < nwritten; i++)
		if (written[i] == relid)
			return i;
	if (nwritten == maxwritten)
	{
		/*
		 * The capacity is raised only once all three arrays have their new size: an
		 * out-of-memory error part way leaves the old capacity, which the arrays still have.
		 */
		int			n = maxwritten ? maxwritten * 2 : 8;

		if (written == NULL)
		{
			written = MemoryContextAlloc(TopMemoryContext, n * sizeof(Oid));
			truncated = MemoryContextAlloc(TopMemoryContext, n * sizeof(bool));
			table_fenced = MemoryContextAlloc(TopMemoryContext, n * sizeof(MemoptTable *));
			nkeys = MemoryContextAlloc(TopMemoryContext, n * sizeof(int));
			keys_only = MemoryContextAlloc(TopMemoryContext, n * sizeof(bool));
		}
		else
		{
			written = repalloc(written, n * sizeof(Oid));
			truncated = repalloc(truncated, n * sizeof(bool));
			table_fenced = repalloc(table_fenced, n * sizeof(MemoptTable *));
			nkeys = repalloc(nkeys, n * sizeof(int));
			keys_only = repalloc(keys_only, n * sizeof(bool));
		}
		maxwritten = n;
	}
	written[nwritten] = relid;
	truncated[nwritten] = false;
	table_fenced[nwritten] = NULL;
	nkeys[nwritten] = 0;
	keys_only[nwritten] = false;
	return nwritten++;
}

/*
 * Whether this transaction may have written rel, so that its reads must go through the normal
 * plan (issue 18).  The sync triggers fire AFTER ROW, at the end of the statement: a read
 * inside the writing statement (RETURNING, a volatile function, a BEFORE trigger) comes
 * before them.  Every writer holds RowExclusiveLock (or stronger) on the table from the
 * moment its statement is parsed or its cached plan is locked, until the end of the
 * transaction, so holding one is the earliest sign of a write; it errs only towards misses
 * (LOCK TABLE, DDL).  A parallel worker holds only the locks it took itself, so a worker of
 * a transaction that has an xid (that may have written anything) never serves.  A read in a
 * BEFORE trigger of the statement's first row, before any xid, sees what the normal plan
 * sees: nothing has been written yet.
 */
bool
memopt_wrote(Relation rel)
{
	Oid			relid = RelationGetRelid(rel);

	/*
	 * No xid, no write: a transaction (and its workers) gets one before it changes any tuple.
	 * This keeps the lock-table probe below off the path of read-only transactions.
	 */
	if (!TransactionIdIsValid(GetTopTransactionIdIfAny()))
		return false;
	if (IsParallelWorker())
		return true;
	if (CheckRelationLockedByMe(rel, RowExclusiveLock, true))
		return true;
	for (int i = 0; i < nwritten; i++)
		if (written[i] == relid)
			return true;
	return false;
}

static void
note_key(Relation rel, const PkLayout *pk, HeapTuple tuple)
{
	if (keybuf.data == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

		initStringInfo(&keybuf);
		MemoryContextSwitchTo(old);
	}
	memopt_key_from_tuple(pk, tuple, RelationGetDescr(rel), &keybuf);
	if (ndirty == maxdirty)
	{
		/* As in note_written: the capacity follows a successful allocation, never leads. */
		int			n = maxdirty ? maxdirty * 2 : 64;

		dirty = dirty ? repalloc_huge(dirty, n * sizeof(DirtyKey))
			: MemoryContextAllocHuge(TopMemoryContext, n * sizeof(DirtyKey));
		maxdirty = n;
	}
	dirty[ndirty].relid = RelationGetRelid(rel);
	dirty[ndirty].hash = memopt_hash(MyDatabaseId, RelationGetRelid(rel), keybuf.data, keybuf.len);
	ndirty++;
}

/*
 * From now on the table written[at] is fenced as a whole at commit (and all its entries go
 * when the commit ends), as for a TRUNCATE: a transaction writing more than
 * memopt.table_fence_threshold keys would otherwise hold that many key fences, take as many
 * partition locks at commit and keep a list that grows with every row (duplicates included).
 * The keys recorded so far are dropped from the list; the table fence covers them.
 *
 * A table fence needs the table's registry slot, and PRE_COMMIT will not create one.  Under
 * a TRUNCATE (AccessExclusiveLock until the end) no reader can claim one meanwhile, so a
 * table without a slot has nothing stored and needs no fence.  A row writer holds only
 * RowExclusiveLock: a reader could claim a slot and store a row we then never fence, so the
 * slot is claimed here, before the switch; if none is free the table stays fenced key by key
 * (returns false; not retried for this table in this transaction).
 */
static bool
switch_to_table_fence(int at, bool row_writer)
{
	Oid			relid = written[at];
	int			kept = nfenced;

	if (row_writer && memopt_store_attached() &&
		memopt_table(MyDatabaseId, relid, MEMOPT_CLAIM) == NULL)
	{
		keys_only[at] = true;
		return false;
	}
	truncated[at] = true;
	for (int i = nfenced; i < ndirty; i++)
		if (dirty[i].relid != relid)
			dirty[kept++] = dirty[i];
	ndirty = kept;
	return true;
}

PG_FUNCTION_INFO_V1(memopt_sync_row);
Datum
memopt_sync_row(PG_FUNCTION_ARGS)
{
	TriggerData *td = (TriggerData *) fcinfo->context;
	const PkLayout *pk;
	int			written_at;

	if (!CALLED_AS_TRIGGER(fcinfo) || !TRIGGER_FIRED_AFTER(td->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(td->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("memopt.sync_row() must be an AFTER ... FOR EACH ROW trigger"),
				 errhint("Use memopt.enable_read() to install it.")));
	pk = memopt_pk_layout(td->tg_relation);
	written_at = note_written(RelationGetRelid(td->tg_relation));
	if (truncated[written_at])
		return PointerGetDatum(NULL);	/* the whole table is fenced already */
	if (pk == NULL)
	{
		/*
		 * The key changed to something we cannot serve: fence the whole table instead.  (No
		 * slot to claim means no lookup can be served either: the layout has no usable key.)
		 */
		switch_to_table_fence(written_at, false);
		return PointerGetDatum(NULL);
	}
	if (memopt_table_fence_threshold >= 0 && !keys_only[written_at] &&
		nkeys[written_at] + 2 > memopt_table_fence_threshold &&
		switch_to_table_fence(written_at, true))
		return PointerGetDatum(NULL);
	note_key(td->tg_relation, pk, td->tg_trigtuple);
	nkeys[written_at]++;
	if (TRIGGER_FIRED_BY_UPDATE(td->tg_event))
	{
		note_key(td->tg_relation, pk, td->tg_newtuple);
		nkeys[written_at]++;
	}
	return PointerGetDatum(NULL);
}

PG_FUNCTION_INFO_V1(memopt_sync_truncate);
Datum
memopt_sync_truncate(PG_FUNCTION_ARGS)
{
	TriggerData *td = (TriggerData *) fcinfo->context;
	int			written_at;

	if (!CALLED_AS_TRIGGER(fcinfo) || !TRIGGER_FIRED_BY_TRUNCATE(td->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("memopt.sync_truncate() must be an AFTER TRUNCATE trigger"),
				 errhint("Use memopt.enable_read() to install it.")));
	written_at = note_written(RelationGetRelid(td->tg_relation));
	switch_to_table_fence(written_at, false);
	return PointerGetDatum(NULL);
}

/*
 * PRE_COMMIT.  A table with no registry slot has nothing stored to fence; none is created
 * here (the commit path must not fail for want of a slot), and none can appear before our
 * commit ends: creating one needs a lock that conflicts with our writes' locks... except a
 * lookup's claim, which starts from an empty store with a fresh generation.
 */
static void
publish_fences(void)
{
	if (!memopt_store_attached())
		return;
	for (int i = 0; i < nwritten; i++)
		if (truncated[i])
		{
			MemoptTable *t = memopt_table(MyDatabaseId, written[i], MEMOPT_FIND);

			if (t != NULL)
				memopt_fence_table(t);
			table_fenced[i] = t;
		}
	for (; nfenced < ndirty; nfenced++)
		memopt_fence_key(dirty[nfenced].hash);
}

static void
release_fences(bool aborted)
{
	if (memopt_store_attached())
	{
		for (int i = 0; i < nfenced; i++)
			memopt_unfence_key(MyDatabaseId, dirty[i].relid, dirty[i].hash);
		/* Keys written but never fenced: the transaction aborted before PRE_COMMIT. */
		if (aborted)
			for (int i = nfenced; i < ndirty; i++)
				memopt_purge_key(MyDatabaseId, dirty[i].relid, dirty[i].hash);
		for (int i = 0; i < nwritten; i++)
		{
			if (table_fenced[i] != NULL)
				memopt_unfence_table(table_fenced[i]);
			else if (aborted && truncated[i])
			{
				MemoptTable *t = memopt_table(MyDatabaseId, written[i], MEMOPT_FIND);

				if (t != NULL)
					memopt_invalidate(t);
			}
		}
	}
	ndirty = 0;
	nfenced = 0;
	nwritten = 0;
	if (maxdirty > 4096)
	{
		pfree(dirty);
		dirty = NULL;
		maxdirty = 0;
	}
}

/*
 * At commit (or prepare): the slots of what this transaction dropped.  Takes locks, never
 * raises.
 */
static void
release_dropped(void)
{
	if (memopt_store_attached())
		for (int i = 0; i < ndrops; i++)
		{
			MemoptTable *t;

			if (!OidIsValid(drops[i].relid))
				memopt_release_database(drops[i].dbid);
			else if ((t = memopt_table(drops[i].dbid, drops[i].relid, MEMOPT_FIND)) != NULL)
				memopt_table_release_if(t, drops[i].dbid, drops[i].relid);
		}
	ndrops = 0;
}

static void
note_drop(Oid dbid, Oid relid, bool trigger)
{
	if (ndrops == maxdrops)
	{
		int			n = maxdrops ? maxdrops * 2 : 16;

		drops = drops ? repalloc(drops, n * sizeof(PendingDrop))
			: MemoryContextAlloc(TopMemoryContext, n * sizeof(PendingDrop));
		maxdrops = n;
	}
	drops[ndrops].dbid = dbid;
	drops[ndrops].relid = relid;
	drops[ndrops].level = GetCurrentTransactionNestLevel();
	drops[ndrops].trigger = trigger;
	ndrops++;
}

/*
 * PRE_COMMIT and PRE_PREPARE (catalog reads are still allowed): a table that lost a sync
 * trigger keeps its slot only if it has both again, by name.  A table with only one is not
 * served, and a lookup claims a fresh slot once it has both.
 */
static void
keep_resynced(void)
{
	int			kept = 0;

	for (int i = 0; i < ndrops; i++)
	{
		if (drops[i].trigger &&
			OidIsValid(get_trigger_oid(drops[i].relid, MEMOPT_ROW_TRIGGER, true)) &&
			OidIsValid(get_trigger_oid(drops[i].relid, MEMOPT_TRUNCATE_TRIGGER, true)))
			continue;
		drops[kept++] = drops[i];
	}
	ndrops = kept;
}

/* A rolled-back savepoint un-drops what it dropped; a released one hands it to its parent. */
static void
subxact_callback(SubXactEvent event, SubTransactionId mySubid, SubTransactionId parentSubid,
				 void *arg)
{
	int			level = GetCurrentTransactionNestLevel();
	int			kept = 0;

	if (event != SUBXACT_EVENT_ABORT_SUB && event != SUBXACT_EVENT_COMMIT_SUB)
		return;
	for (int i = 0; i < ndrops; i++)
	{
		if (drops[i].level >= level)
		{
			if (event == SUBXACT_EVENT_ABORT_SUB)
				continue;
			drops[i].level = level - 1;
		}
		drops[kept++] = drops[i];
	}
	ndrops = kept;
}

static void
xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
		case XACT_EVENT_PARALLEL_PRE_COMMIT:
			if (ndrops > 0)
				keep_resynced();
			if (nwritten > 0)
				publish_fences();
			break;
		case XACT_EVENT_PRE_PREPARE:
			if (ndrops > 0)
				keep_resynced();
			if (nwritten > 0)
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("cannot PREPARE a transaction that has written memoptimized table \"%s\" or altered its sync triggers",
								get_rel_name(written[0]) ? get_rel_name(written[0]) : "?"),
						 errdetail("The store could not be kept consistent until COMMIT PREPARED."),
						 errhint("Commit the transaction directly, or call memopt.disable_read() on the table first.")));
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			if (nfenced > 0 && memopt_test_cleanup_delay_ms > 0)
				pg_usleep(memopt_test_cleanup_delay_ms * 1000L);
			release_fences(false);
			release_dropped();
			break;
		case XACT_EVENT_PREPARE:

			/*
			 * COMMIT PREPARED may run in any backend, and none knows what this transaction
			 * dropped: the slots go now.  The prepared transaction keeps the tables locked
			 * until it ends, so no one can claim them meanwhile; if it rolls back, the
			 * first lookup claims a fresh slot, as after a restart.
			 */
			release_fences(false);
			release_dropped();
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			release_fences(true);
			ndrops = 0;
			break;
	}
}

static Oid
trigger_relation(Oid trigger)
{
	Relation	rel = table_open(TriggerRelationId, AccessShareLock);
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tup;
	Oid			relid = InvalidOid;

	ScanKeyInit(&key, Anum_pg_trigger_oid, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(trigger));
	scan = systable_beginscan(rel, TriggerOidIndexId, true, NULL, 1, &key);
	if (HeapTupleIsValid(tup = systable_getnext(scan)))
		relid = ((Form_pg_trigger) GETSTRUCT(tup))->tgrelid;
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return relid;
}

/*
 * A dropped table's (or database's) entries and registry slot go when the DROP commits: its
 * OID may be reused by a table that has not asked for memoptimized reads.  Until then the
 * table is locked against every reader.  A DROP that rolls back keeps its slot.
 */
static void
object_access(ObjectAccessType access, Oid classId, Oid objectId, int subId, void *arg)
{
	if (prev_object_access)
		prev_object_access(access, classId, objectId, subId, arg);
	if (!memopt_store_attached())
		return;
	if (access == OAT_DROP && classId == RelationRelationId && subId == 0)
	{
		if (memopt_table(MyDatabaseId, objectId, MEMOPT_FIND) != NULL)
			note_drop(MyDatabaseId, objectId, false);
	}
	else if (access == OAT_DROP && classId == DatabaseRelationId)
		note_drop(objectId, InvalidOid, false);
	else if ((access == OAT_DROP || access == OAT_POST_ALTER) && classId == TriggerRelationId)
	{
		/*
		 * A sync trigger disabled, re-enabled or dropped: writes may have gone unseen, so
		 * nothing stored before can be trusted.
		 *
		 * ALTER TABLE ... ENABLE/DISABLE TRIGGER takes only ShareRowExclusiveLock, so readers
		 * run beside it, and this transaction may go on to write the table with the trigger
		 * off.  Its commit is visible to snapshots before its invalidation reaches other
		 * backends (PostgreSQL sends it after the commit callbacks): a reader in that window
		 * still sees the trigger and would be served what those writes changed.  So the table
		 * is fenced through our commit, as for a TRUNCATE: from PRE_COMMIT until the entries
		 * are gone.  (DROP TRIGGER holds AccessExclusiveLock until the invalidation is sent:
		 * no reader runs in the window.)
		 */
		Oid			relid = trigger_relation(objectId);
		MemoptTable *t = OidIsValid(relid) ? memopt_table(MyDatabaseId, relid, MEMOPT_FIND) : NULL;

		if (t != NULL)
		{
			memopt_invalidate(t);
			if (access == OAT_POST_ALTER)
				switch_to_table_fence(note_written(relid), false);
			else
				note_drop(MyDatabaseId, relid, true);
		}
	}
}

void
memopt_sync_init(void)
{
	RegisterXactCallback(xact_callback, NULL);
	RegisterSubXactCallback(subxact_callback, NULL);
	prev_object_access = object_access_hook;
	object_access_hook = object_access;
}
