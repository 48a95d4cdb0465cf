/*
 * memopt.c: module entry point and settings.
 *
 * Loaded through shared_preload_libraries the module owns a shared-memory store and offers
 * the MemoptLookup scan.  Loaded any other way (CREATE EXTENSION in a server that did not
 * preload it) the sync triggers still record writes, and every function that needs the store
 * says how to preload it.
 */
#include "postgres.h"

#include "memopt.h"
#include "key.h"
#include "store.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "utils/guc.h"

PG_MODULE_MAGIC;

int			memopt_pool_size_kb = 64 * 1024;
int			memopt_entry_size = 256;
bool		memopt_enabled = true;
int			memopt_test_cleanup_delay_ms = 0;
int			memopt_table_fence_threshold = 10000;

static shmem_request_hook_type prev_shmem_request;
static shmem_startup_hook_type prev_shmem_startup;

void		_PG_init(void);

static void
shmem_request(void)
{
	if (prev_shmem_request)
		prev_shmem_request();
	memopt_shmem_request();
}

static void
shmem_startup(void)
{
	if (prev_shmem_startup)
		prev_shmem_startup();
	memopt_shmem_startup();
}

void
_PG_init(void)
{
	DefineCustomBoolVariable("memopt.enabled",
							 "Serves primary-key lookups of memoptimized tables from the store.",
							 "Off: every lookup runs the normal index plan (a miss, reason disabled).",
							 &memopt_enabled, true, PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("memopt.table_fence_threshold",
							"Keys a transaction may write to one table before it fences the whole table.",
							"Past it the commit fences and empties the table's part of the store at once, "
							"as a TRUNCATE does, instead of fencing key by key. -1: never.",
							&memopt_table_fence_threshold, 10000, -1, INT_MAX,
							PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("memopt.test_cleanup_delay",
							"Testing only: sleep between a commit and the end of its fences.",
							"Widens the window in which readers must be held off by the fences.",
							&memopt_test_cleanup_delay_ms, 0, 0, 10000,
							PGC_SUSET, GUC_UNIT_MS | GUC_NOT_IN_SAMPLE, NULL, NULL, NULL);

	/*
	 * Startup-only settings can be defined only while the postmaster loads us: a backend
	 * loading the library later (CREATE EXTENSION without preloading) would die with FATAL.
	 * They must be defined before the prefix is reserved, which drops unknown placeholders.
	 */
	if (process_shared_preload_libraries_in_progress)
	{
		DefineCustomIntVariable("memopt.pool_size",
								"Shared memory for memoptimized rows.",
								"Read at server start; the store keeps pool_size / entry_size rows.",
								&memopt_pool_size_kb, 64 * 1024, 64, INT_MAX / 2,
								PGC_POSTMASTER, GUC_UNIT_KB, NULL, NULL, NULL);
		DefineCustomIntVariable("memopt.entry_size",
								"Bytes per stored row: key, heap tuple and a 40-byte header.",
								"Rows that do not fit are never stored (misses, reason uncacheable).",
								&memopt_entry_size, 256, MEMOPT_MIN_ENTRY_SIZE, 32768,
								PGC_POSTMASTER, GUC_UNIT_BYTE, NULL, NULL, NULL);
	}
	MarkGUCPrefixReserved("memopt");

	memopt_key_init();
	memopt_triggers_init();
	memopt_sync_init();
	if (!process_shared_preload_libraries_in_progress)
		return;
	prev_shmem_request = shmem_request_hook;
	shmem_request_hook = shmem_request;
	prev_shmem_startup = shmem_startup_hook;
	shmem_startup_hook = shmem_startup;
	memopt_scan_init();
}
