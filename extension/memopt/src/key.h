/*
 * key.h: primary-key layouts and the byte form of a key.
 *
 * The same key gets the same bytes whether it comes from a heap tuple (triggers, populate)
 * or from the constants and parameters of a query (the scan), so equal bytes mean equal keys
 * for the supported types: integers widened to int64, uuid as its 16 bytes, text and varchar
 * as length and bytes (equality under a deterministic collation is byte equality).
 */
#ifndef MEMOPT_KEY_H
#define MEMOPT_KEY_H

#include "postgres.h"

#include "access/htup.h"
#include "access/tupdesc.h"
#include "lib/stringinfo.h"
#include "utils/relcache.h"

typedef struct PkLayout
{
	Oid			relid;
	Oid			index;
	int			nkeys;
	AttrNumber	attnums[INDEX_MAX_KEYS];	/* in index column order */
	Oid			types[INDEX_MAX_KEYS];
	Oid			collations[INDEX_MAX_KEYS]; /* the column's (and its index's); 0 for integers */
} PkLayout;

extern bool memopt_key_type_supported(Oid type);
/*
 * The table's primary key, or NULL when it has none, a column of an unsupported type, or a
 * text column under a nondeterministic collation (equal keys with different bytes).
 */
extern const PkLayout *memopt_pk_layout(Relation rel);

/*
 * A hash of the relation's live columns (number, name, type, typmod): memopt.columns returns
 * it and the three-argument memopt.get and get_many refuse a call that passes another.
 */
extern int64 memopt_row_layout(Relation rel);
extern void memopt_key_append(StringInfo buf, Oid type, Datum value);

/*
 * The bytes memopt_key_append would add for the value, read from its header without
 * detoasting it: a key too long for an entry is never built (a text key can be as long as
 * 1 GB, whose bytes with their length word do not fit a StringInfo).
 */
extern Size memopt_key_size(Oid type, Datum value);
extern void memopt_key_from_tuple(const PkLayout *pk, HeapTuple tuple, TupleDesc desc,
								  StringInfo buf);
extern void memopt_key_init(void);

#endif
