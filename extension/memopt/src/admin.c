/*
 * admin.c: the SQL-callable functions behind enable_read, disable_read, drop_object and the
 * statistics views.
 */
#include "postgres.h"

#include "memopt.h"
#include "store.h"

#include "access/htup_details.h"
#include "access/table.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(memopt_register);
Datum
memopt_register(PG_FUNCTION_ARGS)
{
	Oid			relid = PG_GETARG_OID(0);
	Relation	rel;
	MemoptTable *t;

	memopt_require_owner(relid, "enable_read");
	memopt_require_store();
	rel = table_open(relid, AccessShareLock);
	/* Writes before the triggers existed were not seen: start from an empty store. */
	t = memopt_table(MyDatabaseId, relid, MEMOPT_CREATE);
	memopt_invalidate(t);
	memopt_check_layout(t, rel);
	table_close(rel, AccessShareLock);
	PG_RETURN_VOID();
}

/* drop_object: empties the table's part of the store; it stays enabled and refills. */
PG_FUNCTION_INFO_V1(memopt_invalidate_table);
Datum
memopt_invalidate_table(PG_FUNCTION_ARGS)
{
	MemoptTable *t;

	memopt_require_owner(PG_GETARG_OID(0), "drop_object");
	memopt_require_store();
	t = memopt_table(MyDatabaseId, PG_GETARG_OID(0), MEMOPT_FIND);
	if (t != NULL)
		memopt_invalidate(t);
	PG_RETURN_VOID();
}

PG_FUNCTION_INFO_V1(memopt_unregister);
Datum
memopt_unregister(PG_FUNCTION_ARGS)
{
	MemoptTable *t;

	memopt_require_owner(PG_GETARG_OID(0), "disable_read");
	memopt_require_store();
	t = memopt_table(MyDatabaseId, PG_GETARG_OID(0), MEMOPT_FIND);
	if (t != NULL)
		memopt_table_release(t);
	PG_RETURN_VOID();
}

static const char *const populate_states[] = {"idle", "queued", "running", "done", "failed"};

#define STATS_COLS (16 + MISS_COUNT)

PG_FUNCTION_INFO_V1(memopt_table_stats);
Datum
memopt_table_stats(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	memopt_require_store();
	InitMaterializedSRF(fcinfo, 0);
	for (int i = 0; i < MEMOPT_MAX_TABLES; i++)
	{
		MemoptTable *t = memopt_table_at(i);
		Datum		values[STATS_COLS];
		bool		nulls[STATS_COLS] = {0};
		int			c = 0;
		uint64		misses = 0;
		uint64		started;
		uint64		finished;
		uint32		state;

		if (t->relid == InvalidOid || t->dbid != MyDatabaseId)
			continue;
		for (int m = 0; m < MISS_COUNT; m++)
			misses += pg_atomic_read_u64(&t->misses[m]);
		values[c++] = ObjectIdGetDatum(t->relid);
		values[c++] = Int64GetDatum(pg_atomic_read_u64(&t->lookups));
		values[c++] = Int64GetDatum(pg_atomic_read_u64(&t->hits));
		values[c++] = Int64GetDatum(misses);
		for (int m = 0; m < MISS_COUNT; m++)
			values[c++] = Int64GetDatum(pg_atomic_read_u64(&t->misses[m]));
		values[c++] = Int64GetDatum(pg_atomic_read_u64(&t->populated));
		values[c++] = Int64GetDatum(pg_atomic_read_u64(&t->populate_accepted));
		values[c++] = Int64GetDatum(pg_atomic_read_u64(&t->populate_rejected));
		values[c++] = Int64GetDatum(pg_atomic_read_u64(&t->invalidations));
		values[c++] = Int64GetDatum(pg_atomic_read_u64(&t->evictions));
		values[c++] = Int64GetDatum(pg_atomic_read_u64(&t->entries));
		values[c++] = Int64GetDatum(pg_atomic_read_u64(&t->entries) * memopt_entry_bytes());
		state = pg_atomic_read_u32(&t->populate_state);
		values[c++] = CStringGetTextDatum(populate_states[state]);
		values[c++] = Int64GetDatum(pg_atomic_read_u64(&t->populate_scanned));
		values[c++] = Int64GetDatum(pg_atomic_read_u64(&t->populate_total));
		started = pg_atomic_read_u64(&t->populate_started);
		finished = pg_atomic_read_u64(&t->populate_finished);
		nulls[c] = started == 0;
		values[c++] = TimestampTzGetDatum((TimestampTz) started);
		nulls[c] = finished == 0;
		values[c++] = TimestampTzGetDatum((TimestampTz) finished);
		Assert(c == STATS_COLS);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

PG_FUNCTION_INFO_V1(memopt_pool);
Datum
memopt_pool(PG_FUNCTION_ARGS)
{
	TupleDesc	desc;
	Datum		values[6];
	bool		nulls[6] = {0};

	memopt_require_store();
	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "memopt_pool must return a record");
	values[0] = Int64GetDatum(memopt_capacity_entries());
	values[1] = Int64GetDatum(memopt_entry_bytes());
	values[2] = Int64GetDatum(memopt_capacity_entries() * memopt_entry_bytes());
	values[3] = Int32GetDatum(memopt_tables_registered());
	values[4] = Int32GetDatum(MEMOPT_MAX_TABLES);
	values[5] = Int64GetDatum(memopt_unregistered_misses());
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc), values, nulls)));
}
