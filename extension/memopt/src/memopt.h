/*
 * memopt.h: settings and the pieces the files of the extension share.
 */
#ifndef MEMOPT_H
#define MEMOPT_H

#include "postgres.h"

#include "utils/relcache.h"

/* Settings (memopt.c) */
extern int	memopt_pool_size_kb;
extern int	memopt_entry_size;
extern bool memopt_enabled;
extern int	memopt_test_cleanup_delay_ms;
extern int	memopt_table_fence_threshold;

/* Names of the triggers enable_read installs (memopt--1.0.sql must agree). */
#define MEMOPT_ROW_TRIGGER "memopt_sync"
#define MEMOPT_TRUNCATE_TRIGGER "memopt_truncate"

/* triggers.c */
/* True when both sync triggers exist as enable_read made them: only then is every write seen. */
extern bool memopt_relation_synced(Relation rel);
/* Raises unless the current user owns the table (or is a superuser). */
extern void memopt_require_owner(Oid relid, const char *function);
extern void memopt_triggers_init(void);

/* sync.c */
extern void memopt_sync_init(void);
extern bool memopt_wrote(Relation rel);

/* scan.c */
extern void memopt_scan_init(void);

#endif
