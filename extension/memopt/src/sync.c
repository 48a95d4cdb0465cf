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
static bool *table_fenced;
static int	nwritten;
static int	maxwritten;

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
		maxwritten = maxwritten ? maxwritten * 2 : 8;
		if (written == NULL)
		{
			written = MemoryContextAlloc(TopMemoryContext, maxwritten * sizeof(Oid));
			truncated = MemoryContextAlloc(TopMemoryContext, maxwritten * sizeof(bool));
			table_fenced = MemoryContextAlloc(TopMemoryContext, maxwritten * sizeof(bool));
		}
		else
		{
			written = repalloc(written, maxwritten * sizeof(Oid));
			truncated = repalloc(truncated, maxwritten * sizeof(bool));
			table_fenced = repalloc(table_fenced, maxwritten * sizeof(bool));
		}
	}
	written[nwritten] = relid;
	truncated[nwritten] = false;
	table_fenced[nwritten] = false;
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
 * a transaction that has an xid (that may have written anything) never serves.
 */
bool
memopt_wrote(Relation rel)
{
	Oid			relid = RelationGetRelid(rel);

	if (IsParallelWorker() && TransactionIdIsValid(GetTopTransactionIdIfAny()))
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
		maxdirty = maxdirty ? maxdirty * 2 : 64;
		dirty = dirty ? repalloc_huge(dirty, maxdirty * sizeof(DirtyKey))
			: MemoryContextAllocHuge(TopMemoryContext, maxdirty * sizeof(DirtyKey));
	}
	dirty[ndirty].relid = RelationGetRelid(rel);
	dirty[ndirty].hash = memopt_hash(MyDatabaseId, RelationGetRelid(rel), keybuf.data, keybuf.len);
	ndirty++;
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
	if (pk == NULL)
	{
		/* The key changed to something we cannot serve: fence the whole table instead. */
		truncated[written_at] = true;
		return PointerGetDatum(NULL);
	}
	note_key(td->tg_relation, pk, td->tg_trigtuple);
	if (TRIGGER_FIRED_BY_UPDATE(td->tg_event))
		note_key(td->tg_relation, pk, td->tg_newtuple);
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
	truncated[written_at] = true;
	return PointerGetDatum(NULL);
}

static void
publish_fences(void)
{
	if (!memopt_store_attached())
		return;
	for (int i = 0; i < nwritten; i++)
		if (truncated[i])
		{
			memopt_fence_table(memopt_table(MyDatabaseId, written[i], true));
			table_fenced[i] = true;
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
			if (table_fenced[i])
				memopt_unfence_table(memopt_table(MyDatabaseId, written[i], true));
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

static void
xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
		case XACT_EVENT_PARALLEL_PRE_COMMIT:
			if (nwritten > 0)
				publish_fences();
			break;
		case XACT_EVENT_PRE_PREPARE:
			if (nwritten > 0)
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("cannot PREPARE a transaction that has written memoptimized table \"%s\"",
								get_rel_name(written[0]) ? get_rel_name(written[0]) : "?"),
						 errdetail("The store could not be kept consistent until COMMIT PREPARED."),
						 errhint("Commit the transaction directly, or call memopt.disable_read() on the table first.")));
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			if (nfenced > 0 && memopt_test_cleanup_delay_ms > 0)
				pg_usleep(memopt_test_cleanup_delay_ms * 1000L);
			release_fences(false);
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			release_fences(event != XACT_EVENT_PREPARE);
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
 * A dropped table's entries and registry slot go at once: its OID may be reused by a table
 * that has not asked for memoptimized reads.  If the DROP rolls back the slot is made anew on
 * first use and the store refills.
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
		MemoptTable *t = memopt_table(MyDatabaseId, objectId, false);

		if (t != NULL)
			memopt_table_release(t);
	}
	else if ((access == OAT_DROP || access == OAT_POST_ALTER) && classId == TriggerRelationId)
	{
		/*
		 * A sync trigger disabled, re-enabled or dropped: writes may have gone unseen, so
		 * nothing stored before can be trusted.
		 */
		Oid			relid = trigger_relation(objectId);
		MemoptTable *t = OidIsValid(relid) ? memopt_table(MyDatabaseId, relid, false) : NULL;

		if (t != NULL)
			memopt_invalidate(t);
	}
}

void
memopt_sync_init(void)
{
	RegisterXactCallback(xact_callback, NULL);
	prev_object_access = object_access_hook;
	object_access_hook = object_access;
}
