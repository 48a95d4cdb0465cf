/*
 * key.c: primary-key layouts and row layouts (cached per backend, dropped on relcache
 * invalidation) and the byte form of keys.
 */
#include "postgres.h"

#include "key.h"

#include "access/detoast.h"
#include "access/htup_details.h"
#include "catalog/pg_index.h"
#include "common/hashfn.h"
#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/syscache.h"
#include "utils/uuid.h"

typedef struct LayoutCacheEntry
{
	Oid			relid;			/* hash key */
	bool		usable;
	PkLayout	layout;
	int64		row_layout;
} LayoutCacheEntry;

static HTAB *layouts;

static void
forget_layout(Datum arg, Oid relid)
{
	if (layouts == NULL)
		return;
	if (relid == InvalidOid)
	{
		HASH_SEQ_STATUS seq;
		LayoutCacheEntry *e;

		hash_seq_init(&seq, layouts);
		while ((e = hash_seq_search(&seq)) != NULL)
			hash_search(layouts, &e->relid, HASH_REMOVE, NULL);
	}
	else
		hash_search(layouts, &relid, HASH_REMOVE, NULL);
}

void
memopt_key_init(void)
{
	CacheRegisterRelcacheCallback(forget_layout, (Datum) 0);
}

bool
memopt_key_type_supported(Oid type)
{
	switch (type)
	{
		case INT2OID:
		case INT4OID:
		case INT8OID:
		case UUIDOID:
		case TEXTOID:
		case VARCHAROID:
			return true;
		default:
			return false;
	}
}

static bool
read_layout(Relation rel, PkLayout *pk)
{
	Oid			index = RelationGetPrimaryKeyIndex(rel);
	HeapTuple	tup;
	Form_pg_index form;
	TupleDesc	desc = RelationGetDescr(rel);

	if (!OidIsValid(index))
		return false;
	tup = SearchSysCache1(INDEXRELID, ObjectIdGetDatum(index));
	if (!HeapTupleIsValid(tup))
		return false;
	form = (Form_pg_index) GETSTRUCT(tup);
	pk->relid = RelationGetRelid(rel);
	pk->index = index;
	pk->nkeys = form->indnkeyatts;
	for (int i = 0; i < pk->nkeys; i++)
	{
		AttrNumber	att = form->indkey.values[i];

		pk->attnums[i] = att;
		pk->types[i] = att > 0 ? TupleDescAttr(desc, att - 1)->atttypid : InvalidOid;
		pk->collations[i] = att > 0 ? TupleDescAttr(desc, att - 1)->attcollation : InvalidOid;
	}
	ReleaseSysCache(tup);

	/*
	 * enable_read refuses a nondeterministic collation, but ALTER COLUMN TYPE ... COLLATE (or
	 * a primary key moved to such a column) brings one to an enabled table.  Under it the
	 * index finds 'abc' for 'ABC': a fill would store the row under bytes that no write of
	 * the row fences, and the entry would outlive its row's updates and its delete.
	 */
	for (int i = 0; i < pk->nkeys; i++)
		if (pk->attnums[i] <= 0 || !memopt_key_type_supported(pk->types[i]) ||
			(OidIsValid(pk->collations[i]) &&
			 !get_collation_isdeterministic(pk->collations[i])))
			return false;
	return true;
}

/*
 * Every live column's number, name, type and typmod, hashed in column order: what a client
 * decoding a row by names it read earlier relies on.  Dropped columns are left out (a row
 * has no value for them), so dropping a column and adding one changes the numbers.
 */
static int64
read_row_layout(Relation rel)
{
	TupleDesc	desc = RelationGetDescr(rel);
	uint64		h = 0;

	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute a = TupleDescAttr(desc, i);
		uint32		parts[3] = {(uint32) a->attnum, a->atttypid, (uint32) a->atttypmod};
		const char *name = NameStr(a->attname);

		if (a->attisdropped)
			continue;
		h = hash_combine64(h, hash_bytes_extended((const unsigned char *) parts,
												  sizeof(parts), 0));
		h = hash_combine64(h, hash_bytes_extended((const unsigned char *) name,
												  strlen(name), 0));
	}
	return (int64) h;
}

/*
 * The relation's cache entry.  Valid until the next relcache invalidation of the relation
 * is processed, which every change of its columns or primary key sends and which taking a
 * lock on it processes: under the caller's lock, the entry is the relation's current one.
 */
static LayoutCacheEntry *
cache_entry(Relation rel)
{
	Oid			relid = RelationGetRelid(rel);
	LayoutCacheEntry *e;
	bool		found;

	if (layouts == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(Oid);
		ctl.entrysize = sizeof(LayoutCacheEntry);
		ctl.hcxt = CacheMemoryContext;
		layouts = hash_create("memopt key layouts", 64, &ctl,
							  HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	e = hash_search(layouts, &relid, HASH_ENTER, &found);
	if (!found)
	{
		/*
		 * Entered before it is filled, so that an invalidation of the relation processed
		 * while the catalogs are read (read_layout may lock pg_index) removes it.  An error
		 * while reading must remove it too: an entry found is taken as filled, and the
		 * element is often the one the relation's invalidation just freed, still holding the
		 * layouts from before the change (a handle resolved before a rename would pass
		 * check_columns for the rest of the backend's life).
		 */
		PG_TRY();
		{
			e->usable = read_layout(rel, &e->layout);
			e->row_layout = read_row_layout(rel);
		}
		PG_CATCH();
		{
			hash_search(layouts, &relid, HASH_REMOVE, NULL);
			PG_RE_THROW();
		}
		PG_END_TRY();
	}
	return e;
}

const PkLayout *
memopt_pk_layout(Relation rel)
{
	LayoutCacheEntry *e = cache_entry(rel);

	return e->usable ? &e->layout : NULL;
}

int64
memopt_row_layout(Relation rel)
{
	return cache_entry(rel)->row_layout;
}

Size
memopt_key_size(Oid type, Datum value)
{
	switch (type)
	{
		case INT2OID:
		case INT4OID:
		case INT8OID:
			return sizeof(int64);
		case UUIDOID:
			return UUID_LEN;
		case TEXTOID:
		case VARCHAROID:
			return sizeof(uint32) + toast_raw_datum_size(value) - VARHDRSZ;
		default:
			elog(ERROR, "memopt: key type %u is not supported", type);
	}
	return 0;					/* keep the compiler quiet */
}

void
memopt_key_append(StringInfo buf, Oid type, Datum value)
{
	switch (type)
	{
		case INT2OID:
			{
				int64		v = DatumGetInt16(value);

				appendBinaryStringInfo(buf, (char *) &v, sizeof(v));
				break;
			}
		case INT4OID:
			{
				int64		v = DatumGetInt32(value);

				appendBinaryStringInfo(buf, (char *) &v, sizeof(v));
				break;
			}
		case INT8OID:
			{
				int64		v = DatumGetInt64(value);

				appendBinaryStringInfo(buf, (char *) &v, sizeof(v));
				break;
			}
		case UUIDOID:
			appendBinaryStringInfo(buf, (char *) DatumGetUUIDP(value)->data, UUID_LEN);
			break;
		case TEXTOID:
		case VARCHAROID:
			{
				text	   *t = DatumGetTextPP(value);
				uint32		len = VARSIZE_ANY_EXHDR(t);

				appendBinaryStringInfo(buf, (char *) &len, sizeof(len));
				appendBinaryStringInfo(buf, VARDATA_ANY(t), len);
				break;
			}
		default:
			elog(ERROR, "memopt: key type %u is not supported", type);
	}
}

void
memopt_key_from_tuple(const PkLayout *pk, HeapTuple tuple, TupleDesc desc, StringInfo buf)
{
	resetStringInfo(buf);
	for (int i = 0; i < pk->nkeys; i++)
	{
		bool		isnull;
		Datum		v = heap_getattr(tuple, pk->attnums[i], desc, &isnull);

		/* Primary-key columns are NOT NULL. */
		if (isnull)
			elog(ERROR, "memopt: primary key column %d of relation %u is null",
				 pk->attnums[i], pk->relid);
		memopt_key_append(buf, pk->types[i], v);
	}
}
