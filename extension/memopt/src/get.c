/*
 * get.c: memopt.get and memopt.get_many, primary-key lookups without parse, plan or portal.
 *
 * Made to be reached through the protocol's FunctionCall message (tcop/fastpath.c), which
 * runs one C function in its own implicit transaction (or the open transaction block) with
 * the transaction snapshot pushed as the active snapshot; they work the same called from
 * SQL, under the statement's snapshot.  Reached by FunctionCall under READ COMMITTED, they
 * read under a snapshot taken once they hold the table's lock, as a lone SELECT does (see
 * open_context).  Each lookup follows the scan's rules to the letter
 * (lookup.h): a hit is served only where the MemoptLookup scan would serve it, and a miss
 * reads the primary-key index under the same snapshot, as the scan's child does, counting
 * the same pg_stat index and heap-fetch statistics.
 *
 * What the SQL layer would check and these functions check themselves: USAGE on the table's
 * schema (SQL reaches a table only by a name in it), SELECT on the table or on every column
 * they return (the whole row), no row-level security (refused outright:
 * the policies would need the executor), no inheritance children (whose rows SELECT would
 * return too), the relation is a table enabled for memoptimized reads with a one-column
 * primary key of the key's type family (text under a deterministic collation).  The functions resolve no
 * names, so the search_path does not matter to them and they carry no SET clause (which
 * would cost a GUC save and restore per call).
 *
 * The result is the table's row as a composite datum of the table's row type (NULL when no
 * row matches), sent by record_send with each column's type OID, so a client can decode it
 * without a Describe; get_many returns an array of them in the order of the keys.  The names
 * come from memopt.columns, read once; the three-argument forms check that the caller's copy
 * still describes the table (check_columns).
 */
#include "postgres.h"

#include "memopt.h"
#include "key.h"
#include "lookup.h"
#include "store.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/relscan.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_class.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_type.h"
#include "executor/tuptable.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

/* One call's open table and what every lookup of the call shares. */
typedef struct GetContext
{
	Relation	rel;
	Relation	index;			/* opened on the first miss */
	MemoptTable *table;			/* NULL: no registry slot, every lookup a counted miss */
	PkLayout	pk;
	Snapshot	snapshot;
	TupleTableSlot *slot;		/* a buffer heap slot: a miss's row stays pinned for the fill */
	StringInfoData key;

	/*
	 * memopt_hit_gate for the call: everything it reads (the setting, recovery, the snapshot,
	 * this transaction's writes, the relcache's triggers) is fixed while the call runs, since
	 * the call writes nothing and processes no invalidation after opening the table.
	 */
	MemoptMiss	gate;
	bool		pushed;			/* snapshot was pushed by open_context: pop it */
} GetContext;

/* A hit's copy of the stored row; one entry long, allocated once per backend. */
static char *tuple_buf;

static void missing_relation(Oid relid, const char *function) pg_attribute_noreturn();
static void check_privileges(Oid relid, Oid nsp);

static const char *
type_family_name(Oid value_type)
{
	switch (value_type)
	{
		case INT8OID:
			return "an integer";
		case TEXTOID:
			return "a text or varchar";
		default:
			return "a uuid";
	}
}

static bool
column_takes(Oid column, Oid value_type)
{
	switch (value_type)
	{
		case INT8OID:
			return column == INT2OID || column == INT4OID || column == INT8OID;
		case TEXTOID:
			return column == TEXTOID || column == VARCHAROID;
		case UUIDOID:
			return column == UUIDOID;
		default:
			return false;
	}
}

/* No relation has the OID: never created, or dropped since the caller resolved its name. */
static void
missing_relation(Oid relid, const char *function)
{
	ereport(ERROR,
			(errcode(ERRCODE_UNDEFINED_TABLE),
			 errmsg("memopt.%s: relation with OID %u does not exist", function, relid),
			 errhint("The table may have been dropped; resolve its name to an OID again.")));
}

/* USAGE on the table's schema and SELECT on the table or on every column, as SQL asks. */
static void
check_privileges(Oid relid, Oid nsp)
{
	AclResult	acl;

	acl = pg_namespace_aclcheck(nsp, GetUserId(), ACL_USAGE);
	if (acl != ACLCHECK_OK)
		aclcheck_error(acl, OBJECT_SCHEMA, get_namespace_name(nsp));
	acl = pg_class_aclcheck(relid, GetUserId(), ACL_SELECT);
	if (acl != ACLCHECK_OK &&
		pg_attribute_aclcheck_all(relid, GetUserId(), ACL_SELECT, ACLMASK_ALL) != ACLCHECK_OK)
		aclcheck_error(acl, OBJECT_TABLE, get_rel_name(relid));
}

/*
 * The three-argument forms (memopt 1.1) take the caller's view of the table's columns: the
 * layout memopt.columns returned with them.  A reply carries each column's type but not its
 * name or number, so a client decoding rows under names it read earlier could not tell a
 * rename, or a column dropped and one of the same type added, from the table it resolved; it
 * would hand one column's value out under another's name.  Checked under the table's lock,
 * whose wait processed the invalidations of every change committed before it.
 */
static void
check_columns(Relation rel, int64 layout, const char *function)
{
	if (layout != memopt_row_layout(rel))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("memopt.%s: the columns of table \"%s\" changed since the caller read them: resolve it again",
						function, RelationGetRelationName(rel)),
				 errhint("Read the columns again with memopt.columns (Client::memopt_table) and "
						 "pass their layout.")));
}

static void
open_context(GetContext *c, FunctionCallInfo fcinfo, Oid value_type, const char *function)
{
	Oid			relid = PG_GETARG_OID(0);
	const PkLayout *pk;
	char		relkind;
	Oid			nsp;

	memopt_require_store();
	relkind = get_rel_relkind(relid);
	if (relkind == '\0')
		missing_relation(relid, function);
	if (relkind != RELKIND_RELATION)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("memopt.%s: \"%s\" is not a table", function, get_rel_name(relid)),
				 errhint("memopt.%s reads tables enabled with memopt.enable_read.", function)));

	/*
	 * Privileges first, as SQL checks them before it reads anything.  SQL reaches a table
	 * only through its schema's name, which takes USAGE on the schema: an OID must not reach
	 * a table its name cannot.  (So a caller without them does not queue for the lock.)
	 */
	nsp = get_rel_namespace(relid);
	if (!OidIsValid(nsp))
		missing_relation(relid, function);
	check_privileges(relid, nsp);

	/*
	 * The checks above read the catalog before the table is locked: a DROP that committed
	 * while this call queued for the lock leaves no relation to open, which table_open would
	 * report as an internal error.
	 */
	c->rel = try_table_open(relid, AccessShareLock);
	if (c->rel == NULL)
		missing_relation(relid, function);

	/*
	 * And again under the lock, whose wait processed the invalidations of what committed
	 * meanwhile: SQL checks SELECT only once it holds the lock (and looks the name up again,
	 * USAGE included, after the wait), so a REVOKE committed by the transaction that held the
	 * table locked refuses a SELECT that waited for it.  It must refuse this call too.
	 */
	check_privileges(relid, c->rel->rd_rel->relnamespace);
	if (PG_NARGS() == 3)
		check_columns(c->rel, PG_GETARG_INT64(2), function);
	if (c->rel->rd_rel->relrowsecurity)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("memopt.%s: table \"%s\" has row-level security enabled", function,
						RelationGetRelationName(c->rel)),
				 errhint("Its policies apply only through SQL: query the table with SELECT.")));
	if (!memopt_relation_synced(c->rel))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("memopt.%s: table \"%s\" is not enabled for memoptimized reads", function,
						RelationGetRelationName(c->rel)),
				 errhint("Call memopt.enable_read('%s') first.", RelationGetRelationName(c->rel))));
	/*
	 * SELECT * FROM t reads t's inheritance children too; a lookup in t's store and primary
	 * key cannot (enable_read refuses such tables, but a child can be added later).
	 */
	if (c->rel->rd_rel->relhassubclass && find_inheritance_children(relid, NoLock) != NIL)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("memopt.%s: table \"%s\" has inheritance children", function,
						RelationGetRelationName(c->rel)),
				 errhint("SELECT from the table also returns its children's rows; query it with SELECT.")));
	pk = memopt_pk_layout(c->rel);
	if (pk == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("memopt.%s: table \"%s\" has no primary key memopt can serve", function,
						RelationGetRelationName(c->rel)),
				 errhint("memopt serves primary keys of smallint, integer, bigint, uuid, text or "
						 "varchar columns, text under a deterministic collation; query the table "
						 "with SELECT.")));
	if (pk->nkeys != 1)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("memopt.%s: table \"%s\" has a primary key of %d columns", function,
						RelationGetRelationName(c->rel), pk->nkeys),
				 errhint("memopt.%s takes one-column keys; look composite keys up with SELECT "
						 "(the MemoptLookup scan serves them).", function)));
	if (!column_takes(pk->types[0], value_type))
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("memopt.%s: the primary key of \"%s\" is %s, not %s key", function,
						RelationGetRelationName(c->rel), format_type_be(pk->types[0]),
						type_family_name(value_type)),
				 errhint("Pass the key as %s.",
						 pk->types[0] == UUIDOID ? "uuid" :
						 (pk->types[0] == TEXTOID || pk->types[0] == VARCHAROID) ? "text" :
						 "bigint")));
	c->pk = *pk;
	c->index = NULL;
	c->slot = NULL;

	/*
	 * The snapshot.  Called from SQL (an expression: fn_expr set), the statement's, as every
	 * function reading a table in a statement.  Called by FunctionCall (fastpath.c passes no
	 * expression), the call is the statement: the snapshot fastpath pushed was taken before
	 * this call queued for the table's lock, whereas a lone SELECT locks the table while it
	 * is parsed and takes its snapshot only then.  A TRUNCATE and reload, or an ALTER TABLE
	 * rewrite, committed while the call waited writes the table's rows under its own xid:
	 * the earlier snapshot sees an empty table where the SELECT returns the row.  So under
	 * READ COMMITTED, take the statement's snapshot now, as the SELECT would.  (Under
	 * REPEATABLE READ or SERIALIZABLE the transaction's snapshot is the one to read under.)
	 */
	c->pushed = false;
	if ((fcinfo->flinfo == NULL || fcinfo->flinfo->fn_expr == NULL) &&
		!IsolationUsesXactSnapshot())
	{
		PushActiveSnapshot(GetTransactionSnapshot());
		c->pushed = true;
	}
	c->snapshot = ActiveSnapshotSet() ? GetActiveSnapshot() : GetTransactionSnapshot();
	initStringInfo(&c->key);
	if (tuple_buf == NULL)
		tuple_buf = MemoryContextAlloc(TopMemoryContext, memopt_entry_bytes());
	c->table = memopt_table(MyDatabaseId, relid, MEMOPT_CLAIM);
	if (c->table != NULL)
		memopt_check_layout(c->table, c->rel);
	c->gate = memopt_hit_gate(c->rel, c->snapshot, true);
}

static void
close_context(GetContext *c)
{
	if (c->slot != NULL)
		ExecDropSingleTupleTableSlot(c->slot);
	if (c->index != NULL)
		index_close(c->index, NoLock);
	table_close(c->rel, NoLock);
	if (c->pushed)
		PopActiveSnapshot();
}

/* The slot's row as a composite datum of the table's row type, every column present. */
static Datum
row_datum(GetContext *c, TupleTableSlot *slot)
{
	TupleDesc	desc = RelationGetDescr(c->rel);
	HeapTuple	tuple;

	slot_getallattrs(slot);
	tuple = heap_form_tuple(desc, slot->tts_values, slot->tts_isnull);
	/* Flattens any toasted column, as a whole-row reference in a query does. */
	return heap_copy_tuple_as_datum(tuple, desc);
}

/*
 * The column's equality and the value in the column's type; false when no value of the
 * column's type equals it (a bigint beyond an integer column's range), where the normal
 * plan finds no row.
 */
static bool
scan_key(GetContext *c, Datum value, Oid value_type, ScanKey sk)
{
	Oid			column = c->pk.types[0];
	RegProcedure eq;
	Datum		v = value;

	if (value_type == INT8OID)
	{
		int64		i = DatumGetInt64(value);

		if (column == INT2OID)
		{
			if (i < PG_INT16_MIN || i > PG_INT16_MAX)
				return false;
			eq = F_INT2EQ, v = Int16GetDatum((int16) i);
		}
		else if (column == INT4OID)
		{
			if (i < PG_INT32_MIN || i > PG_INT32_MAX)
				return false;
			eq = F_INT4EQ, v = Int32GetDatum((int32) i);
		}
		else
			eq = F_INT8EQ;
	}
	else if (value_type == TEXTOID)
		eq = F_TEXTEQ;			/* varchar's btree opclass is text's */
	else
		eq = F_UUID_EQ;
	ScanKeyInit(sk, 1, BTEqualStrategyNumber, eq, v);
	sk->sk_collation = c->index->rd_indcollation[0];
	return true;
}

/*
 * One key: a hit from the store, else the primary-key index (and a fill when allowed).  A
 * NULL key (get_many's element) matches no row but is a lookup all the same, counted as the
 * scan counts it (MISS_UNCACHEABLE, after the gate), so that memopt.stats counts every key.
 */
static Datum
get_one(GetContext *c, Datum value, bool key_null, Oid value_type, bool *isnull)
{
	MemoptProbe probe = {0};
	MemoptMiss	why = MISS_NOT_CACHED;
	ScanKeyData sk;
	IndexScanDesc scan;
	Datum		result = (Datum) 0;

	*isnull = true;
	CHECK_FOR_INTERRUPTS();
	if (!memopt_slot_current(c->table, c->rel))
		memopt_count_unregistered();
	else
	{
		if ((why = c->gate) == MISS_COUNT && key_null)
			why = MISS_UNCACHEABLE;
		else if (why == MISS_COUNT &&
				 MAXALIGN(memopt_key_size(value_type, value)) >= (Size) memopt_entry_payload())
			why = MISS_UNCACHEABLE; /* too long for an entry: not built, as the scan */
		else if (why == MISS_COUNT)
		{
			resetStringInfo(&c->key);
			memopt_key_append(&c->key, value_type, value);
			why = memopt_probe(c->table, c->rel, c->snapshot, &c->key, tuple_buf, &probe);
		}
		memopt_account(c->table, probe.hit, why);
	}
	if (key_null)
		return (Datum) 0;

	if (probe.hit)
	{
		HeapTupleData tuple;

		tuple.t_len = probe.tuple_len;
		tuple.t_data = (HeapTupleHeader) tuple_buf;
		ItemPointerSetInvalid(&tuple.t_self);
		tuple.t_tableOid = RelationGetRelid(c->rel);
		*isnull = false;
		/* A row with every column present is the datum as it is (one copy). */
		if (HeapTupleHeaderGetNatts(tuple.t_data) == RelationGetDescr(c->rel)->natts)
			return heap_copy_tuple_as_datum(&tuple, RelationGetDescr(c->rel));
		if (c->slot == NULL)
			c->slot = table_slot_create(c->rel, NULL);
		ExecForceStoreHeapTuple(&tuple, c->slot, false);
		*isnull = false;
		result = row_datum(c, c->slot);
		ExecClearTuple(c->slot);
		return result;
	}

	if (c->slot == NULL)
		c->slot = table_slot_create(c->rel, NULL);
	if (c->index == NULL)
		c->index = index_open(c->pk.index, AccessShareLock);
	if (!scan_key(c, value, value_type, &sk))
		return (Datum) 0;
	scan = index_beginscan(c->rel, c->index, c->snapshot, 1, 0);
	index_rescan(scan, &sk, 1, NULL, 0);
	if (index_getnext_slot(scan, ForwardScanDirection, c->slot))
	{
		BufferHeapTupleTableSlot *bslot = (BufferHeapTupleTableSlot *) c->slot;

		/* As the scan's fill_from_child: the row is the one the normal plan returns. */
		if (probe.fill_pending && TTS_IS_BUFFERTUPLE(c->slot) &&
			BufferIsValid(bslot->buffer) && bslot->base.tuple != NULL)
			memopt_fill(c->table, probe.hash, c->key.data, c->key.len, bslot->buffer,
						bslot->base.tuple, &probe.ticket);
		*isnull = false;
		result = row_datum(c, c->slot);
	}
	ExecClearTuple(c->slot);
	index_endscan(scan);
	return result;
}

static Datum
get_single(FunctionCallInfo fcinfo, Oid value_type, const char *function)
{
	GetContext	c;
	Datum		result;
	bool		isnull;

	open_context(&c, fcinfo, value_type, function);
	result = get_one(&c, PG_GETARG_DATUM(1), false, value_type, &isnull);
	close_context(&c);
	if (isnull)
		PG_RETURN_NULL();
	return result;
}

/* The rows of the keys in the keys' order; a NULL element for a key with no row (or NULL). */
static Datum
get_many(FunctionCallInfo fcinfo, Oid value_type, const char *function)
{
	ArrayType  *keys = PG_GETARG_ARRAYTYPE_P(1);
	GetContext	c;
	Datum	   *values;
	bool	   *nulls;
	int			n;
	int16		typlen;
	bool		typbyval;
	char		typalign;
	Datum	   *rows;
	bool	   *row_nulls;
	int			dims[1];
	int			lbs[1] = {1};

	if (ARR_NDIM(keys) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("memopt.%s: the keys must be a one-dimensional array", function)));
	if (ARR_ELEMTYPE(keys) != value_type)
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("memopt.%s: keys of type %s where %s[] was expected", function,
						format_type_be(ARR_ELEMTYPE(keys)), format_type_be(value_type))));
	get_typlenbyvalalign(value_type, &typlen, &typbyval, &typalign);
	deconstruct_array(keys, value_type, typlen, typbyval, typalign, &values, &nulls, &n);

	open_context(&c, fcinfo, value_type, function);
	rows = palloc(sizeof(Datum) * Max(n, 1));
	row_nulls = palloc(sizeof(bool) * Max(n, 1));
	for (int i = 0; i < n; i++)
		rows[i] = get_one(&c, values[i], nulls[i], value_type, &row_nulls[i]);
	dims[0] = n;
	{
		Oid			rowtype = RelationGetDescr(c.rel)->tdtypeid;

		close_context(&c);
		if (n == 0)
			PG_RETURN_ARRAYTYPE_P(construct_empty_array(rowtype));
		PG_RETURN_ARRAYTYPE_P(construct_md_array(rows, row_nulls, 1, dims, lbs, rowtype,
												 -1, false, TYPALIGN_DOUBLE));
	}
}

PG_FUNCTION_INFO_V1(memopt_get_int8);
Datum
memopt_get_int8(PG_FUNCTION_ARGS)
{
	return get_single(fcinfo, INT8OID, "get");
}

PG_FUNCTION_INFO_V1(memopt_get_text);
Datum
memopt_get_text(PG_FUNCTION_ARGS)
{
	return get_single(fcinfo, TEXTOID, "get");
}

PG_FUNCTION_INFO_V1(memopt_get_uuid);
Datum
memopt_get_uuid(PG_FUNCTION_ARGS)
{
	return get_single(fcinfo, UUIDOID, "get");
}

PG_FUNCTION_INFO_V1(memopt_get_many_int8);
Datum
memopt_get_many_int8(PG_FUNCTION_ARGS)
{
	return get_many(fcinfo, INT8OID, "get_many");
}

PG_FUNCTION_INFO_V1(memopt_get_many_text);
Datum
memopt_get_many_text(PG_FUNCTION_ARGS)
{
	return get_many(fcinfo, TEXTOID, "get_many");
}

PG_FUNCTION_INFO_V1(memopt_get_many_uuid);
Datum
memopt_get_many_uuid(PG_FUNCTION_ARGS)
{
	return get_many(fcinfo, UUIDOID, "get_many");
}

/*
 * memopt.columns(regclass): the table's live columns (number, name, type, typmod) and their
 * layout, all read from one relation descriptor under the table's lock, so the layout is
 * that of exactly these columns.  Refused as memopt.get refuses: no privilege, not a table.
 */
PG_FUNCTION_INFO_V1(memopt_columns);
Datum
memopt_columns(PG_FUNCTION_ARGS)
{
	Oid			relid = PG_GETARG_OID(0);
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Relation	rel;
	TupleDesc	desc;
	Oid			nsp;
	int64		layout;

	InitMaterializedSRF(fcinfo, 0);
	nsp = get_rel_namespace(relid);
	if (!OidIsValid(nsp))
		missing_relation(relid, "columns");
	check_privileges(relid, nsp);
	rel = try_table_open(relid, AccessShareLock);
	if (rel == NULL)
		missing_relation(relid, "columns");
	check_privileges(relid, rel->rd_rel->relnamespace);
	if (rel->rd_rel->relkind != RELKIND_RELATION)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("memopt.columns: \"%s\" is not a table", RelationGetRelationName(rel)),
				 errhint("memopt.get reads tables enabled with memopt.enable_read.")));
	desc = RelationGetDescr(rel);
	layout = memopt_row_layout(rel);
	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute a = TupleDescAttr(desc, i);
		Datum		values[5];
		bool		nulls[5] = {0};

		if (a->attisdropped)
			continue;
		values[0] = Int16GetDatum(a->attnum);
		values[1] = CStringGetTextDatum(NameStr(a->attname));
		values[2] = ObjectIdGetDatum(a->atttypid);
		values[3] = Int32GetDatum(a->atttypmod);
		values[4] = Int64GetDatum(layout);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	table_close(rel, NoLock);
	return (Datum) 0;
}
