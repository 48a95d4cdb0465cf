/*
 * store.h: the shared-memory row store of memoptimized tables.
 *
 * A fixed array of equal-sized entries, each holding one row (its primary-key bytes, a copy
 * of the heap tuple and the tuple's xmin), reached through a power-of-two bucket directory
 * whose buckets are spread over MEMOPT_PARTITIONS LWLocks.  A bucket also carries the two
 * numbers the consistency protocol needs for every key that hashes to it:
 *
 *   fence  how many committing writers of such a key are between PRE_COMMIT and the end of
 *          their commit.  While non-zero no entry in the bucket is served or installed.
 *   gen    bumped whenever such a writer finishes.  A filler reads it before it checks the
 *          tuple and installs only if it is unchanged, so a row read before a write
 *          committed can never be installed after that write's cleanup ran.
 *
 * Tables have a registry slot with the same pair at table level (TRUNCATE), a generation
 * that every entry must match to be served (invalidation is one atomic bump), a fingerprint
 * of the physical layout (relfilenode, attributes, primary-key index and columns) and the
 * statistics counters.  Slots are created only by enable_read and populate (MEMOPT_CREATE)
 * or claimed by a lookup when one is free (MEMOPT_CLAIM, never raising); commit and abort
 * only find them.  Entries hold only row versions whose inserter committed (memopt_fill).
 */
#ifndef MEMOPT_STORE_H
#define MEMOPT_STORE_H

#include "postgres.h"

#include "access/htup_details.h"
#include "port/atomics.h"
#include "storage/bufmgr.h"
#include "utils/rel.h"

#define MEMOPT_PARTITIONS 128
#define MEMOPT_MAX_TABLES 256
/* The smallest pool that is worth starting: fewer entries would be evicted constantly. */
#define MEMOPT_MIN_ENTRIES 1024
/*
 * The smallest memopt.entry_size: a 40-byte entry header and 32 bytes of key and tuple.  The
 * setting's own minimum, so that a smaller value is refused as out of range (store.c checks
 * that the header still fits).
 */
#define MEMOPT_MIN_PAYLOAD 32
#define MEMOPT_MIN_ENTRY_SIZE 72

/* Why a lookup was not served from the store; one counter each in the statistics. */
typedef enum MemoptMiss
{
	MISS_NOT_CACHED,			/* no entry for the key */
	MISS_FENCED,				/* a writer of the key (or table) is committing */
	MISS_INVISIBLE,				/* the entry's row version is not in our snapshot */
	MISS_ISOLATION,				/* REPEATABLE READ / SERIALIZABLE, or no MVCC snapshot */
	MISS_OWN_WRITE,				/* this transaction wrote the table */
	MISS_DISABLED,				/* memopt.enabled = off, or the sync trigger is disabled */
	MISS_RECOVERY,				/* hot standby: writes on the primary fire no trigger here */
	MISS_UNCACHEABLE,			/* a NULL key, or key and row too large for an entry */
	MISS_COUNT
} MemoptMiss;

extern const char *const memopt_miss_names[MISS_COUNT];

typedef enum PopulateState
{
	POPULATE_IDLE,
	POPULATE_QUEUED,
	POPULATE_RUNNING,
	POPULATE_DONE,
	POPULATE_FAILED
} PopulateState;

typedef struct MemoptTable
{
	/* dbid/relid change only under the registry lock; 0 means the slot is free. */
	Oid			dbid;
	Oid			relid;
	pg_atomic_uint64 gen;		/* entries with another gen are dead */
	pg_atomic_uint32 fence;		/* committing TRUNCATEs of the table */
	pg_atomic_uint64 fingerprint;	/* physical layout the entries were made with */

	pg_atomic_uint64 lookups;
	pg_atomic_uint64 hits;
	pg_atomic_uint64 misses[MISS_COUNT];
	pg_atomic_uint64 populated;
	pg_atomic_uint64 populate_accepted;
	pg_atomic_uint64 populate_rejected;
	pg_atomic_uint64 invalidations;
	pg_atomic_uint64 evictions;
	pg_atomic_uint64 entries;

	pg_atomic_uint32 populate_state;
	pg_atomic_uint64 populate_scanned;
	pg_atomic_uint64 populate_total;
	pg_atomic_uint64 populate_started;	/* TimestampTz */
	pg_atomic_uint64 populate_finished; /* TimestampTz */
} MemoptTable;

/* What a filler read before it looked at the tuple; see the header comment. */
typedef struct FillTicket
{
	uint64		bucket_gen;
	uint64		table_gen;
} FillTicket;

typedef enum LookupResult
{
	LOOKUP_FOUND,
	LOOKUP_ABSENT,
	LOOKUP_FENCED
} LookupResult;

/* Startup */
extern Size memopt_shmem_size(void);
extern void memopt_shmem_request(void);
extern void memopt_shmem_startup(void);
extern bool memopt_store_attached(void);
extern void memopt_require_store(void);
extern int	memopt_entry_payload(void);
extern uint64 memopt_capacity_entries(void);
extern uint64 memopt_entry_bytes(void);

/* Registry */
typedef enum MemoptSlotMode
{
	MEMOPT_FIND,				/* never creates (commit and abort paths, drop hooks) */
	MEMOPT_CLAIM,				/* creates if a slot is free, else NULL (the scan) */
	MEMOPT_CREATE				/* creates or raises (enable_read, populate) */
} MemoptSlotMode;

extern MemoptTable *memopt_table(Oid dbid, Oid relid, MemoptSlotMode mode);
extern void memopt_table_release_if(MemoptTable *t, Oid dbid, Oid relid);
extern void memopt_release_database(Oid dbid);
extern void memopt_count_unregistered(void);
extern uint64 memopt_unregistered_misses(void);
extern int	memopt_tables_registered(void);
extern MemoptTable *memopt_table_at(int index);
extern void memopt_table_release(MemoptTable *t);
extern void memopt_check_layout(MemoptTable *t, Relation rel);
extern void memopt_invalidate(MemoptTable *t);
extern void memopt_count_miss(MemoptTable *t, MemoptMiss why);
extern void memopt_count_hit(MemoptTable *t);

/* Keys and entries */
extern uint32 memopt_hash(Oid dbid, Oid relid, const char *key, int keylen);
extern LookupResult memopt_lookup(MemoptTable *t, uint32 hash, const char *key, int keylen,
								  char *tuple_out, uint32 *tuple_len, TransactionId *xmin,
								  FillTicket *ticket);
extern bool memopt_ticket(MemoptTable *t, uint32 hash, FillTicket *ticket);
extern bool memopt_fill(MemoptTable *t, uint32 hash, const char *key, int keylen,
						Buffer buffer, HeapTuple tuple, const FillTicket *ticket);

/* Writers */
extern void memopt_fence_key(uint32 hash);
extern void memopt_unfence_key(Oid dbid, Oid relid, uint32 hash);
extern void memopt_purge_key(Oid dbid, Oid relid, uint32 hash);
extern void memopt_fence_table(MemoptTable *t);
extern void memopt_unfence_table(MemoptTable *t);

#endif
