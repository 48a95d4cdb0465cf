/*
 * store.c: shared memory, the table registry, lookups, fills, fences and eviction.
 *
 * Lock order: the registry lock may be held while partition locks are taken (invalidation
 * sweeps), never the reverse; at most one partition lock is held at a time; a buffer content
 * lock is never held together with a partition lock.
 */
#include "postgres.h"

#include "store.h"
#include "memopt.h"
#include "key.h"

#include "access/transam.h"
#include "access/xact.h"
#include "utils/relcache.h"

#include "common/hashfn.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/memutils.h"

const char *const memopt_miss_names[MISS_COUNT] = {
	"not_cached", "fenced", "invisible", "isolation",
	"own_write", "disabled", "recovery", "uncacheable"
};

typedef struct Bucket
{
	int32		head;			/* first entry of the chain, -1 if none */
	uint32		fence;
	uint64		gen;
} Bucket;

/*
 * One row.  Every field but usage is written only by the owner of a free entry or under the
 * exclusive lock of the partition whose chain holds it; table < 0 means the entry is free or
 * in transit between the free list and a chain.
 */
typedef struct Entry
{
	int32		next;
	uint32		hash;
	Oid			dbid;
	Oid			relid;
	uint64		gen;
	TransactionId xmin;
	uint16		keylen;
	int16		table;
	uint32		tuplen;
	pg_atomic_uint32 usage;		/* clock second chance; set by readers */
} Entry;

#define ENTRY_HEADER MAXALIGN(sizeof(Entry))
StaticAssertDecl(MAXALIGN(sizeof(Entry)) + MEMOPT_MIN_PAYLOAD <= MEMOPT_MIN_ENTRY_SIZE,
				 "memopt.entry_size's minimum leaves no room for a row");

typedef struct StoreShared
{
	slock_t		free_lock;
	int32		free_head;
	pg_atomic_uint32 clock;
	pg_atomic_uint64 next_gen;
	pg_atomic_uint64 unregistered_misses;	/* lookups of tables without a slot */
	uint32		nentries;
	uint32		nbuckets;
	uint32		entry_size;
	MemoptTable tables[MEMOPT_MAX_TABLES];
} StoreShared;

static StoreShared *shared;
static Bucket *buckets;
static char *entries;
static LWLockPadded *locks;
static char *fill_buffer;

#define ENTRY(i) ((Entry *) (entries + (Size) (i) * shared->entry_size))
#define ENTRY_KEY(e) ((char *) (e) + ENTRY_HEADER)
#define ENTRY_TUPLE(e) (ENTRY_KEY(e) + MAXALIGN((e)->keylen))
#define PARTITION_LOCK(b) (&locks[(b) & (MEMOPT_PARTITIONS - 1)].lock)
#define REGISTRY_LOCK (&locks[MEMOPT_PARTITIONS].lock)

typedef struct Geometry
{
	uint32		entry_size;
	uint32		nentries;
	uint32		nbuckets;
} Geometry;

static Geometry
geometry(void)
{
	Geometry	g;
	uint64		n;

	g.entry_size = MAXALIGN(memopt_entry_size);
	n = (uint64) memopt_pool_size_kb * 1024 / g.entry_size;
	g.nentries = (uint32) Min(n, (uint64) PG_INT32_MAX / 2);
	g.nbuckets = MEMOPT_PARTITIONS;
	while (g.nbuckets < g.nentries)
		g.nbuckets <<= 1;
	return g;
}

Size
memopt_shmem_size(void)
{
	Geometry	g = geometry();
	Size		size = MAXALIGN(sizeof(StoreShared));

	size = add_size(size, MAXALIGN(mul_size(g.nbuckets, sizeof(Bucket))));
	size = add_size(size, mul_size(g.nentries, g.entry_size));
	return size;
}

void
memopt_shmem_request(void)
{
	Geometry	g = geometry();

	if (g.entry_size < ENTRY_HEADER + MEMOPT_MIN_PAYLOAD)
		ereport(FATAL,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("memopt.entry_size = %d bytes leaves no room for a row",
						memopt_entry_size),
				 errhint("Set memopt.entry_size to at least %d.", (int) ENTRY_HEADER + MEMOPT_MIN_PAYLOAD)));
	if (g.nentries < MEMOPT_MIN_ENTRIES)
		ereport(FATAL,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("memopt.pool_size = %d kB holds only %u rows of memopt.entry_size = %u bytes",
						memopt_pool_size_kb, g.nentries, g.entry_size),
				 errhint("Set memopt.pool_size to at least %u kB (room for %d rows) and restart.",
						 (g.entry_size * MEMOPT_MIN_ENTRIES + 1023) / 1024, MEMOPT_MIN_ENTRIES)));
	RequestAddinShmemSpace(memopt_shmem_size());
	RequestNamedLWLockTranche("memopt", MEMOPT_PARTITIONS + 1);
}

/*
 * Puts a registry slot in its initial state: `first` at server start, when the atomics must be
 * initialised rather than written (they may be emulated with spinlocks), else on registration,
 * when the slot takes a fresh generation range so that no entry of a previous owner matches.
 */
static void
init_table(MemoptTable *t, Oid dbid, Oid relid, bool first)
{
#define SET32(field, v) (first ? pg_atomic_init_u32(&t->field, (v)) : pg_atomic_write_u32(&t->field, (v)))
#define SET64(field, v) (first ? pg_atomic_init_u64(&t->field, (v)) : pg_atomic_write_u64(&t->field, (v)))
	SET64(gen, first ? 0 : pg_atomic_fetch_add_u64(&shared->next_gen, UINT64CONST(1) << 32));
	SET32(fence, 0);
	SET64(fingerprint, 0);
	SET64(lookups, 0);
	SET64(hits, 0);
	for (int i = 0; i < MISS_COUNT; i++)
		SET64(misses[i], 0);
	SET64(populated, 0);
	SET64(populate_accepted, 0);
	SET64(populate_rejected, 0);
	SET64(invalidations, 0);
	SET64(evictions, 0);
	SET64(entries, 0);
	SET32(populate_state, POPULATE_IDLE);
	SET64(populate_scanned, 0);
	SET64(populate_total, 0);
	SET64(populate_started, 0);
	SET64(populate_finished, 0);
#undef SET32
#undef SET64
	t->dbid = dbid;
	t->relid = relid;
}

void
memopt_shmem_startup(void)
{
	Geometry	g = geometry();
	bool		found;
	char	   *base;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	base = ShmemInitStruct("memopt", memopt_shmem_size(), &found);
	shared = (StoreShared *) base;
	buckets = (Bucket *) (base + MAXALIGN(sizeof(StoreShared)));
	entries = (char *) buckets + MAXALIGN(mul_size(g.nbuckets, sizeof(Bucket)));
	if (!found)
	{
		SpinLockInit(&shared->free_lock);
		pg_atomic_init_u32(&shared->clock, 0);
		pg_atomic_init_u64(&shared->next_gen, 1);
		pg_atomic_init_u64(&shared->unregistered_misses, 0);
		shared->nentries = g.nentries;
		shared->nbuckets = g.nbuckets;
		shared->entry_size = g.entry_size;
		for (int i = 0; i < MEMOPT_MAX_TABLES; i++)
			init_table(&shared->tables[i], InvalidOid, InvalidOid, true);
		for (uint32 b = 0; b < g.nbuckets; b++)
		{
			buckets[b].head = -1;
			buckets[b].fence = 0;
			buckets[b].gen = 0;
		}
		for (uint32 i = 0; i < g.nentries; i++)
		{
			Entry	   *e = ENTRY(i);

			e->next = (i + 1 < g.nentries) ? (int32) (i + 1) : -1;
			e->table = -1;
			pg_atomic_init_u32(&e->usage, 0);
		}
		shared->free_head = 0;
	}
	LWLockRelease(AddinShmemInitLock);
	locks = GetNamedLWLockTranche("memopt");
}

bool
memopt_store_attached(void)
{
	return shared != NULL;
}

void
memopt_require_store(void)
{
	if (shared == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("memopt is not loaded"),
				 errhint("Add memopt to shared_preload_libraries in postgresql.conf and restart the server.")));
}

int
memopt_entry_payload(void)
{
	return (int) (shared->entry_size - ENTRY_HEADER);
}

uint64
memopt_capacity_entries(void)
{
	return shared ? shared->nentries : 0;
}

uint64
memopt_entry_bytes(void)
{
	return shared ? shared->entry_size : 0;
}

/* ---- free list and eviction ---- */

static void
put_free(int32 idx)
{
	Entry	   *e = ENTRY(idx);

	e->table = -1;
	SpinLockAcquire(&shared->free_lock);
	e->next = shared->free_head;
	shared->free_head = idx;
	SpinLockRelease(&shared->free_lock);
}

/* Unlinks entry idx from bucket b's chain; the caller holds b's partition lock exclusively. */
static void
unlink_entry(uint32 b, int32 idx)
{
	int32	   *link = &buckets[b].head;

	while (*link >= 0)
	{
		if (*link == idx)
		{
			*link = ENTRY(idx)->next;
			return;
		}
		link = &ENTRY(*link)->next;
	}
	elog(PANIC, "memopt: entry %d is not in bucket %u", idx, b);
}

/*
 * A free entry, from the free list or by a clock sweep that gives each live entry a second
 * chance and takes dead ones (their table's generation moved on) at once.  -1 when the sweep
 * found nothing to take: the fill is then skipped, never an error.
 */
static int32
take_entry(void)
{
	int32		idx;
	uint64		steps = (uint64) shared->nentries * 2 + 1;

	SpinLockAcquire(&shared->free_lock);
	idx = shared->free_head;
	if (idx >= 0)
		shared->free_head = ENTRY(idx)->next;
	SpinLockRelease(&shared->free_lock);
	if (idx >= 0)
		return idx;

	for (uint64 n = 0; n < steps; n++)
	{
		uint32		i = pg_atomic_fetch_add_u32(&shared->clock, 1) % shared->nentries;
		Entry	   *e = ENTRY(i);
		int16		tb = ((volatile Entry *) e)->table;
		uint32		h = ((volatile Entry *) e)->hash;
		uint32		b;
		bool		dead;
		bool		taken = false;

		if (tb < 0)
			continue;
		dead = pg_atomic_read_u64(&shared->tables[tb].gen) != e->gen;
		if (!dead && pg_atomic_exchange_u32(&e->usage, 0) != 0)
			continue;
		b = h & (shared->nbuckets - 1);
		LWLockAcquire(PARTITION_LOCK(b), LW_EXCLUSIVE);
		if (e->table == tb && e->hash == h)
		{
			unlink_entry(b, (int32) i);
			e->table = -1;
			taken = true;
		}
		LWLockRelease(PARTITION_LOCK(b));
		if (taken)
		{
			pg_atomic_fetch_sub_u64(&shared->tables[tb].entries, 1);
			if (!dead)
				pg_atomic_fetch_add_u64(&shared->tables[tb].evictions, 1);
			return (int32) i;
		}
	}
	return -1;
}

/* ---- registry ---- */

/*
 * The registry slot of a table.  MEMOPT_FIND never creates one.  MEMOPT_CLAIM (the scan: the
 * first lookup of an enabled table after a restart) takes a free slot if there is one and
 * otherwise returns NULL, never raising: the caller counts a miss.  MEMOPT_CREATE (enable_read,
 * populate) raises a clear error when all slots are taken.  The commit path only finds.
 */
MemoptTable *
memopt_table(Oid dbid, Oid relid, MemoptSlotMode mode)
{
	MemoptTable *found = NULL;
	MemoptTable *free_slot = NULL;

	memopt_require_store();
	LWLockAcquire(REGISTRY_LOCK, LW_SHARED);
	for (int i = 0; i < MEMOPT_MAX_TABLES; i++)
	{
		MemoptTable *t = &shared->tables[i];

		if (t->dbid == dbid && t->relid == relid)
		{
			found = t;
			break;
		}
	}
	LWLockRelease(REGISTRY_LOCK);
	if (found != NULL || mode == MEMOPT_FIND)
		return found;

	LWLockAcquire(REGISTRY_LOCK, LW_EXCLUSIVE);
	for (int i = 0; i < MEMOPT_MAX_TABLES; i++)
	{
		MemoptTable *t = &shared->tables[i];

		if (t->dbid == dbid && t->relid == relid)
		{
			found = t;
			break;
		}
		if (free_slot == NULL && t->relid == InvalidOid)
			free_slot = t;
	}
	if (found == NULL)
	{
		if (free_slot == NULL)
		{
			LWLockRelease(REGISTRY_LOCK);
			if (mode == MEMOPT_CLAIM)
				return NULL;
			ereport(ERROR,
					(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
					 errmsg("memopt can track at most %d tables, and all are in use", MEMOPT_MAX_TABLES),
					 errhint("Call memopt.disable_read() on a table that no longer needs it; see tables_registered in memopt.pool().")));
		}
		init_table(free_slot, dbid, relid, false);
		found = free_slot;
	}
	LWLockRelease(REGISTRY_LOCK);
	return found;
}

MemoptTable *
memopt_table_at(int index)
{
	if (shared == NULL || index < 0 || index >= MEMOPT_MAX_TABLES)
		return NULL;
	return &shared->tables[index];
}

static int16
table_index(MemoptTable *t)
{
	return (int16) (t - shared->tables);
}

/* Frees every entry of t; the caller has already made them dead by bumping t->gen. */
static void
sweep(MemoptTable *t)
{
	int16		tb = table_index(t);

	for (uint32 p = 0; p < MEMOPT_PARTITIONS; p++)
	{
		int32		freed = -1;

		LWLockAcquire(&locks[p].lock, LW_EXCLUSIVE);
		for (uint32 b = p; b < shared->nbuckets; b += MEMOPT_PARTITIONS)
		{
			int32	   *link = &buckets[b].head;

			while (*link >= 0)
			{
				Entry	   *e = ENTRY(*link);
				int32		idx = *link;

				if (e->table == tb)
				{
					*link = e->next;
					e->table = -1;
					e->next = freed;
					freed = idx;
				}
				else
					link = &e->next;
			}
		}
		LWLockRelease(&locks[p].lock);
		while (freed >= 0)
		{
			int32		next = ENTRY(freed)->next;

			put_free(freed);
			pg_atomic_fetch_sub_u64(&t->entries, 1);
			freed = next;
		}
	}
}

void
memopt_invalidate(MemoptTable *t)
{
	pg_atomic_fetch_add_u64(&t->gen, 1);
	pg_atomic_fetch_add_u64(&t->invalidations, 1);
	sweep(t);
}

void
memopt_table_release(MemoptTable *t)
{
	memopt_table_release_if(t, t->dbid, t->relid);
}

/* Releases t only if it still belongs to (dbid, relid): it may have been reused meanwhile. */
void
memopt_table_release_if(MemoptTable *t, Oid dbid, Oid relid)
{
	LWLockAcquire(REGISTRY_LOCK, LW_EXCLUSIVE);
	if (t->relid != InvalidOid && t->relid == relid && t->dbid == dbid)
	{
		pg_atomic_fetch_add_u64(&t->gen, 1);
		sweep(t);
		t->relid = InvalidOid;
		t->dbid = InvalidOid;
	}
	LWLockRelease(REGISTRY_LOCK);
}

/*
 * Entries hold heap tuples in the layout of the relation when they were filled.  A new
 * relfilenode (TRUNCATE, VACUUM FULL, CLUSTER, rewriting ALTER TABLE) or any change of the
 * attributes (ALTER TABLE ADD/DROP/ALTER COLUMN) makes them all dead before anyone reads or
 * fills with the new layout.  So does a new primary key (its index and columns).
 */
static uint64
layout_fingerprint(Relation rel)
{
	TupleDesc	desc = RelationGetDescr(rel);
	uint64		fp = hash_bytes_uint32_extended(rel->rd_node.relNode, desc->natts);
	const PkLayout *pk;

	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute a = TupleDescAttr(desc, i);
		uint32		parts[5] = {a->atttypid, (uint32) a->atttypmod, a->attisdropped,
		(uint32) a->attlen, a->atthasmissing};

		fp = hash_combine64(fp, hash_bytes_extended((const unsigned char *) parts,
													sizeof(parts), i));
	}

	/*
	 * Entries are keyed by the bytes of the primary-key columns: a primary key moved to other
	 * columns (or rebuilt through another index) gives the same bytes to another row.
	 */
	fp = hash_combine64(fp, hash_bytes_uint32_extended(RelationGetPrimaryKeyIndex(rel), 0));
	if ((pk = memopt_pk_layout(rel)) != NULL)
		fp = hash_combine64(fp, hash_bytes_extended((const unsigned char *) pk->attnums,
													pk->nkeys * sizeof(AttrNumber), pk->nkeys));
	return fp | 1;
}

void
memopt_check_layout(MemoptTable *t, Relation rel)
{
	uint64		fp = layout_fingerprint(rel);

	if (pg_atomic_read_u64(&t->fingerprint) == fp)
		return;
	LWLockAcquire(REGISTRY_LOCK, LW_EXCLUSIVE);
	if (pg_atomic_read_u64(&t->fingerprint) != fp)
	{
		if (pg_atomic_read_u64(&t->fingerprint) != 0)
			memopt_invalidate(t);
		/* Readers that see the new fingerprint must also see the new generation. */
		pg_write_barrier();
		pg_atomic_write_u64(&t->fingerprint, fp);
	}
	LWLockRelease(REGISTRY_LOCK);
}

/* A lookup of an enabled table that has no registry slot (all taken): a miss all the same. */
void
memopt_count_unregistered(void)
{
	pg_atomic_fetch_add_u64(&shared->unregistered_misses, 1);
}

uint64
memopt_unregistered_misses(void)
{
	return shared ? pg_atomic_read_u64(&shared->unregistered_misses) : 0;
}

int
memopt_tables_registered(void)
{
	int			n = 0;

	if (shared == NULL)
		return 0;
	LWLockAcquire(REGISTRY_LOCK, LW_SHARED);
	for (int i = 0; i < MEMOPT_MAX_TABLES; i++)
		n += shared->tables[i].relid != InvalidOid;
	LWLockRelease(REGISTRY_LOCK);
	return n;
}

/* Releases every slot of a database (DROP DATABASE): its OIDs may come back in a new one. */
void
memopt_release_database(Oid dbid)
{
	for (int i = 0; i < MEMOPT_MAX_TABLES; i++)
	{
		MemoptTable *t = &shared->tables[i];

		if (((volatile MemoptTable *) t)->dbid == dbid)
			memopt_table_release_if(t, dbid, t->relid);
	}
}

void
memopt_count_miss(MemoptTable *t, MemoptMiss why)
{
	pg_atomic_fetch_add_u64(&t->lookups, 1);
	pg_atomic_fetch_add_u64(&t->misses[why], 1);
}

void
memopt_count_hit(MemoptTable *t)
{
	pg_atomic_fetch_add_u64(&t->lookups, 1);
	pg_atomic_fetch_add_u64(&t->hits, 1);
}

/* ---- keys ---- */

uint32
memopt_hash(Oid dbid, Oid relid, const char *key, int keylen)
{
	return hash_combine(hash_combine(hash_bytes_uint32(dbid), hash_bytes_uint32(relid)),
						hash_bytes((const unsigned char *) key, keylen));
}

static bool
entry_matches(Entry *e, MemoptTable *t, uint32 hash, const char *key, int keylen)
{
	return e->hash == hash && e->relid == t->relid && e->dbid == t->dbid &&
		e->keylen == keylen && memcmp(ENTRY_KEY(e), key, keylen) == 0;
}

static bool
fenced(Bucket *bk, MemoptTable *t)
{
	return bk->fence > 0 || pg_atomic_read_u32(&t->fence) > 0;
}

LookupResult
memopt_lookup(MemoptTable *t, uint32 hash, const char *key, int keylen,
			  char *tuple_out, uint32 *tuple_len, TransactionId *xmin, FillTicket *ticket)
{
	uint32		b = hash & (shared->nbuckets - 1);
	Bucket	   *bk = &buckets[b];
	LookupResult result = LOOKUP_ABSENT;

	LWLockAcquire(PARTITION_LOCK(b), LW_SHARED);
	if (fenced(bk, t))
		result = LOOKUP_FENCED;
	else
	{
		uint64		gen = pg_atomic_read_u64(&t->gen);

		ticket->bucket_gen = bk->gen;
		ticket->table_gen = gen;
		for (int32 i = bk->head; i >= 0; i = ENTRY(i)->next)
		{
			Entry	   *e = ENTRY(i);

			if (!entry_matches(e, t, hash, key, keylen))
				continue;
			if (e->gen == gen)
			{
				memcpy(tuple_out, ENTRY_TUPLE(e), e->tuplen);
				*tuple_len = e->tuplen;
				*xmin = e->xmin;
				pg_atomic_write_u32(&e->usage, 1);
				result = LOOKUP_FOUND;
			}
			break;
		}
	}
	LWLockRelease(PARTITION_LOCK(b));
	return result;
}

bool
memopt_ticket(MemoptTable *t, uint32 hash, FillTicket *ticket)
{
	uint32		b = hash & (shared->nbuckets - 1);
	bool		ok;

	LWLockAcquire(PARTITION_LOCK(b), LW_SHARED);
	ok = !fenced(&buckets[b], t);
	ticket->bucket_gen = buckets[b].gen;
	ticket->table_gen = pg_atomic_read_u64(&t->gen);
	LWLockRelease(PARTITION_LOCK(b));
	return ok;
}

/*
 * Whether the inserting transaction of a row version has committed.  Only such versions may
 * be stored: an entry's xmin is later judged by XidInMVCCSnapshot alone, which takes any xid
 * that is no longer running for committed, so an entry made from an aborted (or still
 * running, later aborting) insert would be served to everyone as if it existed (issue 18).
 * Our own transaction is refused first.  A commit recorded in the clog is final even while
 * the committer is still in the proc array (snapshots taken meanwhile then find the entry's
 * xmin invisible and miss), so no TransactionIdIsInProgress probe is needed.
 */
static bool
xmin_committed_now(TransactionId xmin)
{
	if (TransactionIdIsCurrentTransactionId(xmin))
		return false;
	return TransactionIdDidCommit(xmin);
}

/*
 * Installs the row version `tuple`, read through a pin on `buffer`, if it is still the live
 * version and no writer of its key finished or started committing since `ticket` was taken.
 *
 * Why that suffices: a writer W that updates or deletes the version sets its xmax (under the
 * buffer lock) before it fences the key, commits, and finally unfences and bumps the bucket's
 * generation.  If W set xmax before we look under the buffer lock we see it and skip.  If
 * after, W's cleanup comes after our ticket was taken: either it already ran (the generation
 * moved: skip), or W's fence is up (skip), or W has yet to fence, and then its cleanup will
 * remove what we install.  Lock-only xmax (SELECT FOR SHARE/UPDATE) changes no data.
 * The version's inserter must have committed (see xmin_committed_now), so what is installed
 * is never a row that may yet roll back, nor one only its writer can see.
 */
bool
memopt_fill(MemoptTable *t, uint32 hash, const char *key, int keylen,
			Buffer buffer, HeapTuple tuple, const FillTicket *ticket)
{
	uint32		b = hash & (shared->nbuckets - 1);
	Bucket	   *bk = &buckets[b];
	HeapTupleHeader h;
	uint32		len = tuple->t_len;
	TransactionId xmin = InvalidTransactionId;
	bool		xmin_committed = false;
	bool		live;
	int32		idx;
	Entry	   *e;
	bool		installed = false;
	int32		replaced = -1;

	if (MAXALIGN(keylen) + len > (Size) memopt_entry_payload())
		return false;
	if (fill_buffer == NULL)
		fill_buffer = MemoryContextAlloc(TopMemoryContext, shared->entry_size);

	LockBuffer(buffer, BUFFER_LOCK_SHARE);
	h = tuple->t_data;
	live = (h->t_infomask & HEAP_XMAX_INVALID) != 0 ||
		!TransactionIdIsValid(HeapTupleHeaderGetRawXmax(h)) ||
		HEAP_XMAX_IS_LOCKED_ONLY(h->t_infomask);
	if (live)
	{
		memcpy(fill_buffer, h, len);

		/*
		 * The copy's t_ctid holds the version's own TID, which a hit hands to WHERE CURRENT
		 * OF as the index scan would.  (The heap's t_ctid need not: an update that aborted
		 * leaves it pointing at the aborted version.)  The version does not move while its
		 * entry is current: an update or delete removes the entry, and only a rewrite
		 * (VACUUM FULL, CLUSTER), which changes the layout fingerprint, moves live rows.
		 */
		((HeapTupleHeader) fill_buffer)->t_ctid = tuple->t_self;
		xmin = HeapTupleHeaderGetXmin(h);
		xmin_committed = HeapTupleHeaderXminCommitted(h) || HeapTupleHeaderXminFrozen(h);
	}
	LockBuffer(buffer, BUFFER_LOCK_UNLOCK);
	if (!live || !(xmin_committed || xmin_committed_now(xmin)))
		return false;

	idx = take_entry();
	if (idx < 0)
		return false;
	e = ENTRY(idx);
	e->hash = hash;
	e->dbid = t->dbid;
	e->relid = t->relid;
	e->gen = ticket->table_gen;
	e->xmin = xmin;
	e->keylen = (uint16) keylen;
	e->tuplen = len;
	memcpy(ENTRY_KEY(e), key, keylen);
	memcpy(ENTRY_TUPLE(e), fill_buffer, len);
	pg_atomic_write_u32(&e->usage, 1);

	LWLockAcquire(PARTITION_LOCK(b), LW_EXCLUSIVE);
	if (!fenced(bk, t) && bk->gen == ticket->bucket_gen &&
		pg_atomic_read_u64(&t->gen) == ticket->table_gen)
	{
		int32	   *link = &bk->head;

		installed = true;
		while (*link >= 0)
		{
			Entry	   *old = ENTRY(*link);

			if (entry_matches(old, t, hash, key, keylen))
			{
				if (old->gen == ticket->table_gen)
					installed = false;	/* someone filled it first */
				else
				{
					replaced = *link;
					*link = old->next;
					old->table = -1;
				}
				break;
			}
			link = &old->next;
		}
		if (installed)
		{
			e->table = table_index(t);
			e->next = bk->head;
			bk->head = idx;
		}
	}
	LWLockRelease(PARTITION_LOCK(b));

	if (replaced >= 0)
	{
		put_free(replaced);
		pg_atomic_fetch_sub_u64(&t->entries, 1);
	}
	if (installed)
		pg_atomic_fetch_add_u64(&t->entries, 1);
	else
		put_free(idx);
	return installed;
}

/* ---- writers ---- */

void
memopt_fence_key(uint32 hash)
{
	uint32		b = hash & (shared->nbuckets - 1);

	LWLockAcquire(PARTITION_LOCK(b), LW_EXCLUSIVE);
	buckets[b].fence++;
	LWLockRelease(PARTITION_LOCK(b));
}

/* Ends a fence: bumps the bucket's generation and removes the key's entries, all at once. */
void
memopt_unfence_key(Oid dbid, Oid relid, uint32 hash)
{
	uint32		b = hash & (shared->nbuckets - 1);
	Bucket	   *bk = &buckets[b];
	int32		freed = -1;
	int16		tb = -1;
	int32	   *link;

	LWLockAcquire(PARTITION_LOCK(b), LW_EXCLUSIVE);
	Assert(bk->fence > 0);
	bk->fence--;
	bk->gen++;
	link = &bk->head;
	while (*link >= 0)
	{
		Entry	   *e = ENTRY(*link);
		int32		idx = *link;

		if (e->hash == hash && e->relid == relid && e->dbid == dbid)
		{
			*link = e->next;
			/* Free while we hold the lock, so that the clock never picks it up. */
			tb = e->table;
			e->table = -1;
			e->next = freed;
			freed = idx;
		}
		else
			link = &e->next;
	}
	LWLockRelease(PARTITION_LOCK(b));
	while (freed >= 0)
	{
		int32		next = ENTRY(freed)->next;

		pg_atomic_fetch_sub_u64(&shared->tables[tb].entries, 1);
		put_free(freed);
		freed = next;
	}
}

/*
 * Removes the key's entries and bumps its bucket's generation without a fence: the abort of a
 * transaction that wrote the key.  Nothing it wrote can have been stored (fills take only
 * committed versions), so this is a second line of defence, and it never raises.
 */
void
memopt_purge_key(Oid dbid, Oid relid, uint32 hash)
{
	memopt_fence_key(hash);
	memopt_unfence_key(dbid, relid, hash);
}

void
memopt_fence_table(MemoptTable *t)
{
	pg_atomic_fetch_add_u32(&t->fence, 1);
}

void
memopt_unfence_table(MemoptTable *t)
{
	memopt_invalidate(t);
	pg_atomic_fetch_sub_u32(&t->fence, 1);
}
