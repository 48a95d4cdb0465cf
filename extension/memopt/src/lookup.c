/*
 * lookup.c: the rules of one store lookup, shared by the scan and the fast lookup functions
 * (see lookup.h for the order a caller follows).
 */
#include "postgres.h"

#include "memopt.h"
#include "lookup.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "miscadmin.h"
#include "utils/inval.h"
#include "utils/snapmgr.h"

bool
memopt_slot_current(const MemoptTable *t, Relation rel)
{
	return t != NULL && t->relid == RelationGetRelid(rel) && t->dbid == MyDatabaseId;
}

MemoptMiss
memopt_hit_gate(Relation rel, Snapshot snapshot, bool usable)
{
	if (!memopt_enabled)
		return MISS_DISABLED;
	if (RecoveryInProgress())
		return MISS_RECOVERY;
	if (IsolationUsesXactSnapshot() || snapshot == NULL || !IsMVCCSnapshot(snapshot))
		return MISS_ISOLATION;
	if (memopt_wrote(rel))
		return MISS_OWN_WRITE;

	/*
	 * The triggers must be read as they are now, not as when this transaction first locked
	 * the table.  ALTER TABLE ... DISABLE TRIGGER takes only ShareRowExclusiveLock, which
	 * does not wait for readers, and a transaction that already holds its AccessShareLock
	 * processes no invalidation when it locks the table again: without this, a reader inside
	 * an open transaction kept seeing the trigger fire ALWAYS after the ALTER committed, and
	 * served (and refilled) rows that writes made with the trigger off had changed.  Cheap
	 * when nothing is pending (one unlocked read of the queue's flag).
	 */
	AcceptInvalidationMessages();
	if (!usable || !memopt_relation_synced(rel))
		return MISS_DISABLED;
	return MISS_COUNT;
}

MemoptMiss
memopt_probe(MemoptTable *t, Relation rel, Snapshot snapshot, const StringInfo key,
			 char *tuple_buf, MemoptProbe *probe)
{
	TransactionId xmin;

	probe->hit = false;
	probe->fill_pending = false;
	if (MAXALIGN(key->len) >= (Size) memopt_entry_payload())
		return MISS_UNCACHEABLE;

	probe->hash = memopt_hash(MyDatabaseId, RelationGetRelid(rel), key->data, key->len);
	switch (memopt_lookup(t, probe->hash, key->data, key->len,
						  tuple_buf, &probe->tuple_len, &xmin, &probe->ticket))
	{
		case LOOKUP_FENCED:
			return MISS_FENCED;
		case LOOKUP_ABSENT:
			probe->fill_pending = true;
			return MISS_NOT_CACHED;
		case LOOKUP_FOUND:
			if (XidInMVCCSnapshot(xmin, snapshot))
				return MISS_INVISIBLE;
			probe->hit = true;
			return MISS_COUNT;
	}
	return MISS_NOT_CACHED;
}

void
memopt_account(MemoptTable *t, bool hit, MemoptMiss why)
{
	if (hit)
		memopt_count_hit(t);
	else
		memopt_count_miss(t, why);
}
