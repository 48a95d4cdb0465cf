/*
 * lookup.h: the decision whether one primary-key lookup may be served from the store.
 *
 * Shared by the MemoptLookup scan (scan.c) and the fast lookup functions (get.c) so that a
 * hit through either is served under exactly the same rules; neither may add a shortcut of
 * its own.  A caller:
 *
 *   1. checks memopt_slot_current (else: memopt_count_unregistered, serve from the index);
 *   2. asks memopt_hit_gate whether the transaction and table allow a hit at all;
 *   3. builds the key's bytes with memopt_key_append (a NULL key is MISS_UNCACHEABLE);
 *   4. calls memopt_probe, then memopt_account;
 *   5. on a miss reads the primary-key index under the same snapshot and, when the probe
 *      left fill_pending, offers the row it found (still pinned) to memopt_fill with the
 *      probe's ticket.
 */
#ifndef MEMOPT_LOOKUP_H
#define MEMOPT_LOOKUP_H

#include "postgres.h"

#include "store.h"

#include "lib/stringinfo.h"
#include "utils/rel.h"
#include "utils/snapshot.h"

typedef struct MemoptProbe
{
	uint32		hash;
	uint32		tuple_len;
	FillTicket	ticket;
	bool		hit;			/* tuple_buf holds a row version visible to the snapshot */
	bool		fill_pending;	/* no entry: the row the index finds may be installed */
} MemoptProbe;

/* The table's registry slot is still the one for rel (not released or reused). */
extern bool memopt_slot_current(const MemoptTable *t, Relation rel);

/*
 * MISS_COUNT when a hit may be served for rel under snapshot, else the reason it may not.
 * usable: the caller's key matches the relation's current primary-key layout.
 */
extern MemoptMiss memopt_hit_gate(Relation rel, Snapshot snapshot, bool usable);

/*
 * Looks the key up; on a visible entry copies the row into tuple_buf (memopt_entry_bytes())
 * and sets probe->hit.  Returns MISS_COUNT on a hit, else the reason for the miss.
 */
extern MemoptMiss memopt_probe(MemoptTable *t, Relation rel, Snapshot snapshot,
							   const StringInfo key, char *tuple_buf, MemoptProbe *probe);

/* The statistics of one decided lookup. */
extern void memopt_account(MemoptTable *t, bool hit, MemoptMiss why);

#endif
