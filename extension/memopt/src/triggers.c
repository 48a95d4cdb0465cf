/*
 * triggers.c: installing the sync triggers, and recognising them.
 *
 * A table is served only while every write to it is seen, that is while both sync triggers
 * exist exactly as enable_read made them: the row trigger AFTER INSERT OR UPDATE OR DELETE
 * FOR EACH ROW and the truncate trigger AFTER TRUNCATE FOR EACH STATEMENT, both calling the
 * extension's own C functions (recognised by OID, which no one else can make: C functions
 * need a superuser), firing ALWAYS, with no WHEN clause, no column list, no arguments and no
 * constraint.  A hand-made trigger with the right name and anything else wrong (issue 18)
 * would leave writes unseen, so it does not count.
 *
 * The trigger functions are not executable by PUBLIC, so that no one can attach them to
 * tables of their own in shapes we would then have to distrust.  enable_read and disable_read
 * therefore create and drop the triggers here, after checking in C that the caller owns the
 * table, under the identity of the extension's owner (the superuser who created it).
 */
#include "postgres.h"

#include "memopt.h"

#include "access/htup_details.h"
#include "access/relation.h"
#include "access/table.h"
#include "catalog/namespace.h"
#include "catalog/pg_language.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_trigger.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/syscache.h"

#define ROW_EVENTS (TRIGGER_TYPE_ROW | TRIGGER_TYPE_INSERT | TRIGGER_TYPE_UPDATE | TRIGGER_TYPE_DELETE)
#define TRUNCATE_EVENTS TRIGGER_TYPE_TRUNCATE

/* OIDs of memopt.sync_row and memopt.sync_truncate; dropped on any pg_proc change. */
static Oid	sync_row_oid;
static Oid	sync_truncate_oid;
static bool oids_valid;

static void
forget_oids(Datum arg, int cacheid, uint32 hashvalue)
{
	oids_valid = false;
}

/* memopt.<name>() if it is the C function `symbol` of this library, else InvalidOid. */
static Oid
sync_function(Oid nsp, const char *name, const char *symbol)
{
	oidvector  *noargs = buildoidvector(NULL, 0);
	Oid			oid;
	HeapTuple	tup;
	bool		ours = false;

	oid = GetSysCacheOid3(PROCNAMEARGSNSP, Anum_pg_proc_oid, CStringGetDatum(name),
						  PointerGetDatum(noargs), ObjectIdGetDatum(nsp));
	pfree(noargs);
	if (!OidIsValid(oid))
		return InvalidOid;
	tup = SearchSysCache1(PROCOID, ObjectIdGetDatum(oid));
	if (HeapTupleIsValid(tup))
	{
		bool		isnull;
		Datum		src = SysCacheGetAttr(PROCOID, tup, Anum_pg_proc_prosrc, &isnull);

		ours = ((Form_pg_proc) GETSTRUCT(tup))->prolang == ClanguageId && !isnull &&
			strcmp(TextDatumGetCString(src), symbol) == 0;
		ReleaseSysCache(tup);
	}
	return ours ? oid : InvalidOid;
}

static void
load_oids(void)
{
	Oid			nsp;

	if (oids_valid)
		return;
	nsp = get_namespace_oid("memopt", true);
	sync_row_oid = OidIsValid(nsp) ? sync_function(nsp, "sync_row", "memopt_sync_row") : InvalidOid;
	sync_truncate_oid = OidIsValid(nsp) ?
		sync_function(nsp, "sync_truncate", "memopt_sync_truncate") : InvalidOid;
	oids_valid = true;
}

static bool
is_sync_trigger(Trigger *t, const char *name, Oid function, int16 events)
{
	return OidIsValid(function) && t->tgfoid == function && t->tgtype == events &&
		t->tgenabled == TRIGGER_FIRES_ALWAYS && t->tgqual == NULL && t->tgnattr == 0 &&
		t->tgnargs == 0 && !OidIsValid(t->tgconstraint) && strcmp(t->tgname, name) == 0;
}

bool
memopt_relation_synced(Relation rel)
{
	TriggerDesc *td = rel->trigdesc;
	bool		row = false;
	bool		truncate = false;

	if (td == NULL)
		return false;
	load_oids();
	for (int i = 0; i < td->numtriggers; i++)
	{
		Trigger    *t = &td->triggers[i];

		row |= is_sync_trigger(t, MEMOPT_ROW_TRIGGER, sync_row_oid, ROW_EVENTS);
		truncate |= is_sync_trigger(t, MEMOPT_TRUNCATE_TRIGGER, sync_truncate_oid,
									TRUNCATE_EVENTS);
	}
	return row && truncate;
}

void
memopt_require_owner(Oid relid, const char *function)
{
	char	   *name = get_rel_name(relid);

	if (name == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("memopt.%s(): relation with OID %u does not exist", function, relid)));
	if (!pg_class_ownercheck(relid, GetUserId()))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("must be owner of table %s to call memopt.%s()", name, function),
				 errhint("Ask the table's owner or a superuser to call memopt.%s('%s').",
						 function, name)));
}

/* memopt.is_enabled(regclass): both sync triggers exist exactly as enable_read made them. */
PG_FUNCTION_INFO_V1(memopt_is_enabled);
Datum
memopt_is_enabled(PG_FUNCTION_ARGS)
{
	Relation	rel = try_relation_open(PG_GETARG_OID(0), AccessShareLock);
	bool		synced;

	if (rel == NULL)
		PG_RETURN_BOOL(false);
	synced = memopt_relation_synced(rel);
	relation_close(rel, AccessShareLock);
	PG_RETURN_BOOL(synced);
}

static void
run(const char *sql)
{
	if (SPI_execute(sql, false, 0) < 0)
		elog(ERROR, "memopt: could not run \"%s\"", sql);
}

static Oid
function_owner(Oid fn)
{
	HeapTuple	tup = SearchSysCache1(PROCOID, ObjectIdGetDatum(fn));
	Oid			owner;

	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for function %u", fn);
	owner = ((Form_pg_proc) GETSTRUCT(tup))->proowner;
	ReleaseSysCache(tup);
	return owner;
}

/*
 * memopt._set_triggers(regclass, install boolean): drops whichever sync triggers (or
 * triggers by their names) exist, then, when installing, creates both and makes them fire
 * ALWAYS.  The caller must own the table; the statements run as the extension's owner, who
 * alone may use the trigger functions, in a restricted security context.
 */
PG_FUNCTION_INFO_V1(memopt_set_triggers);
Datum
memopt_set_triggers(PG_FUNCTION_ARGS)
{
	Oid			relid = PG_GETARG_OID(0);
	bool		install = PG_GETARG_BOOL(1);
	const char *caller = install ? "enable_read" : "disable_read";
	char	   *table;
	Oid			save_userid;
	int			save_sec;

	memopt_require_owner(relid, caller);
	table = quote_qualified_identifier(get_namespace_name(get_rel_namespace(relid)),
									   get_rel_name(relid));
	GetUserIdAndSecContext(&save_userid, &save_sec);
	SetUserIdAndSecContext(function_owner(fcinfo->flinfo->fn_oid),
						   save_sec | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "memopt: SPI_connect failed");
	if (OidIsValid(get_trigger_oid(relid, MEMOPT_ROW_TRIGGER, true)))
		run(psprintf("DROP TRIGGER %s ON %s", MEMOPT_ROW_TRIGGER, table));
	if (OidIsValid(get_trigger_oid(relid, MEMOPT_TRUNCATE_TRIGGER, true)))
		run(psprintf("DROP TRIGGER %s ON %s", MEMOPT_TRUNCATE_TRIGGER, table));
	if (install)
	{
		run(psprintf("CREATE TRIGGER %s AFTER INSERT OR UPDATE OR DELETE ON %s"
					 " FOR EACH ROW EXECUTE FUNCTION memopt.sync_row()",
					 MEMOPT_ROW_TRIGGER, table));
		run(psprintf("CREATE TRIGGER %s AFTER TRUNCATE ON %s"
					 " FOR EACH STATEMENT EXECUTE FUNCTION memopt.sync_truncate()",
					 MEMOPT_TRUNCATE_TRIGGER, table));
		run(psprintf("ALTER TABLE %s ENABLE ALWAYS TRIGGER %s", table, MEMOPT_ROW_TRIGGER));
		run(psprintf("ALTER TABLE %s ENABLE ALWAYS TRIGGER %s", table, MEMOPT_TRUNCATE_TRIGGER));
	}
	SPI_finish();
	/* On error the transaction's abort restores the caller's identity. */
	SetUserIdAndSecContext(save_userid, save_sec);
	PG_RETURN_VOID();
}

void
memopt_triggers_init(void)
{
	CacheRegisterSyscacheCallback(PROCOID, forget_oids, (Datum) 0);
}

/* memopt._require_owner(regclass, function name): the check, for the PL/pgSQL wrappers. */
PG_FUNCTION_INFO_V1(memopt_require_owner_sql);
Datum
memopt_require_owner_sql(PG_FUNCTION_ARGS)
{
	memopt_require_owner(PG_GETARG_OID(0), text_to_cstring(PG_GETARG_TEXT_PP(1)));
	PG_RETURN_VOID();
}
