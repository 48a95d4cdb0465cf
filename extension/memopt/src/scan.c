/*
 * scan.c: the MemoptLookup custom scan.
 *
 * Offered for a SELECT (no row locks) on a table whose sync triggers fire ALWAYS, when the
 * only restrictions are one equality per primary-key column against a constant or an
 * external parameter and the query needs only user columns.  Its child is a plain index scan
 * of the primary key with a physical target list: on a miss the node returns exactly what
 * that scan returns, and on the first row of a miss it tries to fill the store from the
 * child's pinned heap tuple.  What a cursor can do with the index scan it can do with the
 * node: scan backwards (a hit's one row is kept as a one-row index scan keeps it), and
 * UPDATE or DELETE WHERE CURRENT OF it (every row carries its heap TID).
 *
 * A hit is served only when all of these hold (otherwise a miss with the first failing
 * reason): memopt.enabled; not in recovery; a READ COMMITTED MVCC snapshot; this transaction
 * has not written the table and holds no RowExclusiveLock on it, and is not a parallel
 * worker of a transaction with an xid (memopt_wrote); the key is not NULL and fits an entry;
 * the key and table are not fenced; the entry's generation is current; its xmin is visible
 * to the snapshot.  A table without a registry slot (all taken) is a counted miss.
 */
#include "postgres.h"

#include "memopt.h"
#include "key.h"
#include "lookup.h"
#include "store.h"

#include "access/table.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_class.h"
#include "catalog/pg_opfamily.h"
#include "access/stratnum.h"
#include "commands/explain.h"
#include "executor/executor.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "nodes/extensible.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/optimizer.h"
#include "optimizer/pathnode.h"
#include "optimizer/paths.h"
#include "optimizer/plancat.h"
#include "parser/parsetree.h"
#include "optimizer/restrictinfo.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/typcache.h"

#define NODE_NAME "MemoptLookup"

/*
 * Where a scan that hit stands relative to its one row, as an index scan stands relative to
 * its rows: a cursor may fetch backwards (PRIOR, ABSOLUTE ...) when its plan can scan
 * backwards, as the primary key's index scan can, so the node must too.
 */
typedef enum HitPosition
{
	HIT_BEFORE,					/* before the row: forwards returns it */
	HIT_ON,						/* on it: either way moves off it and returns nothing */
	HIT_AFTER					/* after it: backwards returns it */
} HitPosition;

typedef struct LookupState
{
	CustomScanState css;
	PlanState  *child;
	List	   *key_exprs;		/* ExprState per primary-key column, in index order */
	Oid			value_types[INDEX_MAX_KEYS];	/* the type of each key value */
	MemoptTable *table;
	bool		usable;			/* the relation still has a key layout we serve */
	PkLayout	pk;
	StringInfoData key;
	char	   *tuple_buf;

	/* per lookup */
	bool		decided;
	bool		hit;
	HitPosition position;		/* a hit's one row, for scans in either direction */
	bool		fill_pending;
	uint32		hash;
	uint32		tuple_len;
	FillTicket	ticket;

	bool		claimable;		/* the store is there: count lookups even without a slot */

	/* for EXPLAIN ANALYZE */
	uint64		hits;
	uint64		misses;
	MemoptMiss	last_miss;
	bool		last_unregistered;	/* the last miss found no registry slot */
} LookupState;

static set_rel_pathlist_hook_type prev_pathlist_hook;

static Plan *plan_path(PlannerInfo *root, RelOptInfo *rel, CustomPath *best_path,
					   List *tlist, List *clauses, List *custom_plans);
static Node *create_state(CustomScan *cscan);
static void begin_scan(CustomScanState *node, EState *estate, int eflags);
static TupleTableSlot *exec_scan(CustomScanState *node);
static void end_scan(CustomScanState *node);
static void rescan(CustomScanState *node);
static void explain_scan(CustomScanState *node, List *ancestors, ExplainState *es);

static const CustomPathMethods path_methods = {
	.CustomName = NODE_NAME,
	.PlanCustomPath = plan_path,
};

static const CustomScanMethods scan_methods = {
	.CustomName = NODE_NAME,
	.CreateCustomScanState = create_state,
};

static const CustomExecMethods exec_methods = {
	.CustomName = NODE_NAME,
	.BeginCustomScan = begin_scan,
	.ExecCustomScan = exec_scan,
	.EndCustomScan = end_scan,
	.ReScanCustomScan = rescan,
	.ExplainCustomScan = explain_scan,
};

/* ---- planning ---- */

static Node *
strip_relabel(Node *n)
{
	while (n && IsA(n, RelabelType))
		n = (Node *) ((RelabelType *) n)->arg;
	return n;
}

/*
 * A value the key can be computed from once per scan, as the index scan computes its runtime
 * keys: constants and external parameters combined by non-volatile functions, operators and
 * casts (PL/pgSQL's `WHERE k = i + 1` is `k = $1 + 1`).  No Vars, no PARAM_EXEC (set by outer
 * plans or initplans, whose order the node would have to respect) and no subplans.
 */
static bool
key_value_walker(Node *n, void *context)
{
	if (n == NULL)
		return false;
	switch (nodeTag(n))
	{
		case T_Const:
			return false;
		case T_Param:
			return ((Param *) n)->paramkind != PARAM_EXTERN;
		case T_FuncExpr:
		case T_OpExpr:
		case T_RelabelType:
		case T_CoerceViaIO:
		case T_List:
			return expression_tree_walker(n, key_value_walker, context);
		default:
			return true;
	}
}

static bool
is_key_value(Node *n)
{
	return !key_value_walker(n, NULL) && !contain_volatile_functions(n);
}

static bool
is_integer(Oid type)
{
	return type == INT2OID || type == INT4OID || type == INT8OID;
}

/*
 * Whether `column op value` (or `value op column`) is the key equality we can serve.  Text and
 * varchar share a byte form and texteq; the integer types all widen to the same int64 bytes,
 * so the cross-type equalities of the integer btree family (int84eq for `bigint_pk = 42`, ...)
 * are served too: equal values have equal bytes whichever type the value comes in.  Other
 * types must match the column exactly.
 */
static bool
key_operator_fits(Oid opno, bool column_left, Oid column, Oid value)
{
	if (column == value ||
		((column == TEXTOID || column == VARCHAROID) && (value == TEXTOID || value == VARCHAROID)))
		return opno == lookup_type_cache(column, TYPECACHE_EQ_OPR)->eq_opr;
	if (is_integer(column) && is_integer(value))
		return opno == get_opfamily_member(INTEGER_BTREE_FAM_OID,
										   column_left ? column : value,
										   column_left ? value : column,
										   BTEqualStrategyNumber);
	return false;
}

/*
 * The key expressions in index column order when the restrictions are exactly one equality
 * per key column, else NIL.
 */
static List *
match_key(RelOptInfo *rel, const PkLayout *pk)
{
	Node	   *by_column[INDEX_MAX_KEYS] = {0};
	ListCell   *lc;
	List	   *exprs = NIL;

	if (list_length(rel->baserestrictinfo) != pk->nkeys)
		return NIL;
	foreach(lc, rel->baserestrictinfo)
	{
		RestrictInfo *ri = lfirst_node(RestrictInfo, lc);
		OpExpr	   *op;
		Node	   *left;
		Node	   *right;
		Var		   *var;
		Node	   *value;
		int			col = -1;
		bool		column_left;

		if (ri->pseudoconstant || ri->security_level > 0 || !IsA(ri->clause, OpExpr))
			return NIL;
		op = (OpExpr *) ri->clause;
		if (list_length(op->args) != 2)
			return NIL;
		left = strip_relabel(linitial(op->args));
		right = strip_relabel(lsecond(op->args));
		if (IsA(left, Var) && is_key_value(right))
			var = (Var *) left, value = right, column_left = true;
		else if (IsA(right, Var) && is_key_value(left))
			var = (Var *) right, value = left, column_left = false;
		else
			return NIL;
		if ((Index) var->varno != rel->relid || var->varlevelsup != 0)
			return NIL;
		for (int i = 0; i < pk->nkeys; i++)
			if (pk->attnums[i] == var->varattno)
				col = i;
		if (col < 0 || by_column[col] != NULL)
			return NIL;
		if (!key_operator_fits(op->opno, column_left, pk->types[col], exprType(value)))
			return NIL;
		/*
		 * The comparison's collation must be the index's, as the planner requires of an index
		 * clause: the child scan would otherwise descend a tree sorted under one collation
		 * with comparisons under another (`k = 'x' COLLATE "C"` on an ICU column) and miss
		 * rows the sequential scan finds.  (The layout has only deterministic collations.)
		 */
		if (op->inputcollid != pk->collations[col])
			return NIL;
		by_column[col] = value;
	}
	for (int i = 0; i < pk->nkeys; i++)
		exprs = lappend(exprs, copyObject(by_column[i]));
	return exprs;
}

static bool
needs_only_user_columns(RelOptInfo *rel)
{
	ListCell   *lc;

	foreach(lc, rel->reltarget->exprs)
	{
		Node	   *n = lfirst(lc);

		if (!IsA(n, Var) || ((Var *) n)->varattno <= 0)
			return false;
	}
	return true;
}

/*
 * Index clauses for the primary key built from the restrictions, for when the planner kept
 * no index path of its own (a seq scan looked cheaper, e.g. on a freshly rewritten table).
 * Only the indexkey-op-value orientation is built here; the planner commutes the others.
 */
static List *
key_index_clauses(RelOptInfo *rel, const PkLayout *pk)
{
	List	   *clauses = NIL;

	for (int col = 0; col < pk->nkeys; col++)
	{
		ListCell   *lc;
		IndexClause *ic = NULL;

		foreach(lc, rel->baserestrictinfo)
		{
			RestrictInfo *ri = lfirst_node(RestrictInfo, lc);
			Node	   *left = strip_relabel(linitial(((OpExpr *) ri->clause)->args));

			if (IsA(left, Var) && ((Var *) left)->varattno == pk->attnums[col])
			{
				ic = makeNode(IndexClause);
				ic->rinfo = ri;
				ic->indexquals = list_make1(ri);
				ic->lossy = false;
				ic->indexcol = col;
				ic->indexcols = NIL;
			}
		}
		if (ic == NULL)
			return NIL;
		clauses = lappend(clauses, ic);
	}
	return clauses;
}

/* A fresh plain (not index-only) scan of the primary key with the key's index clauses. */
static IndexPath *
primary_key_scan(PlannerInfo *root, RelOptInfo *rel, const PkLayout *pk)
{
	ListCell   *lc;
	IndexOptInfo *index = NULL;
	List	   *clauses;

	foreach(lc, rel->pathlist)
	{
		IndexPath  *ip = (IndexPath *) lfirst(lc);

		if (!IsA(ip, IndexPath) || ip->path.param_info != NULL ||
			ip->indexinfo->indexoid != pk->index || ip->indexclauses == NIL)
			continue;
		return create_index_path(root, ip->indexinfo, ip->indexclauses, NIL, NIL, NIL,
								 ForwardScanDirection, false, NULL, 1.0, false);
	}
	foreach(lc, rel->indexlist)
		if (((IndexOptInfo *) lfirst(lc))->indexoid == pk->index)
			index = lfirst(lc);
	if (index == NULL || (clauses = key_index_clauses(rel, pk)) == NIL)
		return NULL;
	return create_index_path(root, index, clauses, NIL, NIL, NIL,
							 ForwardScanDirection, false, NULL, 1.0, false);
}

static void
pathlist_hook(PlannerInfo *root, RelOptInfo *rel, Index rti, RangeTblEntry *rte)
{
	Relation	relation;
	const PkLayout *pk;
	List	   *exprs = NIL;
	IndexPath  *child = NULL;

	if (prev_pathlist_hook)
		prev_pathlist_hook(root, rel, rti, rte);
	if (!memopt_enabled || !memopt_store_attached())
		return;
	if (rel->reloptkind != RELOPT_BASEREL || rte->rtekind != RTE_RELATION ||
		rte->relkind != RELKIND_RELATION || rte->inh || rte->tablesample != NULL)
		return;
	if (root->parse->commandType != CMD_SELECT || root->parse->rowMarks != NIL ||
		root->rowMarks != NIL || rel->baserestrictinfo == NIL)
		return;

	relation = table_open(rte->relid, NoLock);
	if (memopt_relation_synced(relation) && !relation->rd_rel->relrowsecurity &&
		(pk = memopt_pk_layout(relation)) != NULL &&
		needs_only_user_columns(rel) &&
		(exprs = match_key(rel, pk)) != NIL)
		child = primary_key_scan(root, rel, pk);
	table_close(relation, NoLock);

	if (child != NULL)
	{
		CustomPath *cp = makeNode(CustomPath);
		Cost		cheapest = child->path.total_cost;
		ListCell   *lc;

		foreach(lc, rel->pathlist)
			cheapest = Min(cheapest, ((Path *) lfirst(lc))->total_cost);

		cp->path.pathtype = T_CustomScan;
		cp->path.parent = rel;
		cp->path.pathtarget = rel->reltarget;
		cp->path.param_info = NULL;
		cp->path.parallel_aware = false;
		cp->path.parallel_safe = false;
		cp->path.parallel_workers = 0;
		cp->path.rows = child->path.rows;
		/*
		 * A hit reads no page.  Priced under every other path, since on a miss it costs no
		 * more than the primary-key scan the other paths are variants of.
		 */
		cp->path.startup_cost = 0;
		cp->path.total_cost = cheapest / 2;
		cp->path.pathkeys = NIL;
		/* Backwards too, as the child can: a cursor's scrollability must not change. */
		cp->flags = CUSTOMPATH_SUPPORT_BACKWARD_SCAN;
		cp->custom_paths = list_make1(child);
		cp->custom_private = exprs;
		cp->methods = &path_methods;
		add_path(rel, &cp->path);
	}
}

/*
 * Every attribute of the relation in order, dropped ones as NULLs: the relation's own row
 * layout.  (The planner's build_physical_tlist gives up on dropped and missing columns.)
 */
static List *
whole_row_tlist(PlannerInfo *root, RelOptInfo *rel)
{
	RangeTblEntry *rte = planner_rt_fetch(rel->relid, root);
	Relation	relation = table_open(rte->relid, NoLock);
	TupleDesc	desc = RelationGetDescr(relation);
	List	   *tlist = NIL;

	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);
		Expr	   *e;

		if (att->attisdropped)
			e = (Expr *) makeNullConst(INT4OID, -1, InvalidOid);
		else
			e = (Expr *) makeVar(rel->relid, att->attnum, att->atttypid, att->atttypmod,
								 att->attcollation, 0);
		tlist = lappend(tlist, makeTargetEntry(e, i + 1, NULL, false));
	}
	table_close(relation, NoLock);
	return tlist;
}

static Plan *
plan_path(PlannerInfo *root, RelOptInfo *rel, CustomPath *best_path,
		  List *tlist, List *clauses, List *custom_plans)
{
	CustomScan *cs = makeNode(CustomScan);
	Plan	   *child = linitial(custom_plans);

	/*
	 * The child returns whole rows in the relation's layout, as a hit does, so the node's
	 * scan tuple is the relation's row either way.  The restriction clauses are all key
	 * equalities: the lookup itself and the child's index quals apply them.
	 */
	child->targetlist = whole_row_tlist(root, rel);
	cs->scan.plan.targetlist = tlist;
	cs->scan.plan.qual = NIL;
	cs->scan.scanrelid = rel->relid;
	cs->flags = best_path->flags;
	cs->custom_plans = custom_plans;
	cs->custom_exprs = copyObject(best_path->custom_private);
	cs->custom_private = NIL;
	cs->custom_scan_tlist = NIL;
	cs->methods = &scan_methods;
	return &cs->scan.plan;
}

/* ---- execution ---- */

static Node *
create_state(CustomScan *cscan)
{
	LookupState *s = palloc0(sizeof(LookupState));

	NodeSetTag(s, T_CustomScanState);
	s->css.methods = &exec_methods;
	return (Node *) s;
}

static void
begin_scan(CustomScanState *node, EState *estate, int eflags)
{
	LookupState *s = (LookupState *) node;
	CustomScan *cs = (CustomScan *) node->ss.ps.plan;
	Relation	rel = node->ss.ss_currentRelation;
	const PkLayout *pk;

	s->child = ExecInitNode(linitial(cs->custom_plans), estate, eflags);
	node->custom_ps = list_make1(s->child);
	s->key_exprs = ExecInitExprList(cs->custom_exprs, &node->ss.ps);
	{
		int			i = 0;
		ListCell   *lc;

		foreach(lc, cs->custom_exprs)
			if (i < INDEX_MAX_KEYS)
				s->value_types[i++] = exprType(lfirst(lc));
	}
	initStringInfo(&s->key);
	pk = memopt_pk_layout(rel);
	s->usable = pk != NULL && pk->nkeys == list_length(s->key_exprs);
	if (s->usable)
		s->pk = *pk;
	if (memopt_store_attached() && !(eflags & EXEC_FLAG_EXPLAIN_ONLY))
	{
		/* NULL when every slot is taken: each lookup is then a counted miss, not an error. */
		s->table = memopt_table(MyDatabaseId, RelationGetRelid(rel), MEMOPT_CLAIM);
		if (s->table != NULL)
			memopt_check_layout(s->table, rel);
		s->claimable = true;
		s->tuple_buf = palloc(memopt_entry_bytes());
	}
}

static MemoptMiss
try_hit(LookupState *s, EState *estate)
{
	Relation	rel = s->css.ss.ss_currentRelation;
	ExprContext *econtext = s->css.ss.ps.ps_ExprContext;
	Snapshot	snapshot = estate->es_snapshot;
	ListCell   *lc;
	int			i = 0;
	MemoptMiss	why;
	MemoptProbe probe;

	if ((why = memopt_hit_gate(rel, snapshot, s->usable)) != MISS_COUNT)
		return why;

	ResetExprContext(econtext);
	resetStringInfo(&s->key);
	foreach(lc, s->key_exprs)
	{
		bool		isnull;
		Datum		v = ExecEvalExpr((ExprState *) lfirst(lc), econtext, &isnull);

		if (isnull)
			return MISS_UNCACHEABLE;
		/* Too long for an entry: not built (the child evaluates every value again). */
		if (MAXALIGN(s->key.len + memopt_key_size(s->value_types[i], v)) >=
			(Size) memopt_entry_payload())
			return MISS_UNCACHEABLE;
		/* By the value's type: an int4 42 gives the bytes of the int8 column's 42. */
		memopt_key_append(&s->key, s->value_types[i++], v);
	}
	why = memopt_probe(s->table, rel, snapshot, &s->key, s->tuple_buf, &probe);
	s->hash = probe.hash;
	s->tuple_len = probe.tuple_len;
	s->ticket = probe.ticket;
	s->fill_pending = probe.fill_pending;
	s->hit = probe.hit;
	return why;
}

static void
decide(LookupState *s, EState *estate)
{
	MemoptMiss	why;

	s->decided = true;
	s->hit = false;
	s->position = HIT_BEFORE;
	s->fill_pending = false;
	if (!memopt_slot_current(s->table, s->css.ss.ss_currentRelation))
	{
		/* No slot, or it was released (the table disabled) since the scan began. */
		if (s->claimable)
		{
			s->misses++;
			s->last_unregistered = true;
			memopt_count_unregistered();
		}
		return;
	}
	s->last_unregistered = false;
	why = try_hit(s, estate);
	memopt_account(s->table, s->hit, why);
	if (s->hit)
		s->hits++;
	else
	{
		s->misses++;
		s->last_miss = why;
	}
}

/* After a miss on a key nobody has cached: install the row the child scan has pinned. */
static void
fill_from_child(LookupState *s)
{
	ScanState  *child = (ScanState *) s->child;
	TupleTableSlot *slot;
	BufferHeapTupleTableSlot *bslot;

	s->fill_pending = false;
	if (!IsA(child, IndexScanState))
		return;
	slot = child->ss_ScanTupleSlot;
	if (slot == NULL || TupIsNull(slot) || !TTS_IS_BUFFERTUPLE(slot))
		return;
	bslot = (BufferHeapTupleTableSlot *) slot;
	if (!BufferIsValid(bslot->buffer) || bslot->base.tuple == NULL)
		return;
	memopt_fill(s->table, s->hash, s->key.data, s->key.len, bslot->buffer,
				bslot->base.tuple, &s->ticket);
}

static TupleTableSlot *
project(LookupState *s, TupleTableSlot *scan)
{
	ProjectionInfo *proj = s->css.ss.ps.ps_ProjInfo;
	ExprContext *econtext = s->css.ss.ps.ps_ExprContext;

	if (proj == NULL)
		return scan;
	ResetExprContext(econtext);
	econtext->ecxt_scantuple = scan;
	return ExecProject(proj);
}

/*
 * The scan slot (virtual) keeps no TID of its own: WHERE CURRENT OF reads the row's TID from
 * it, as from an index scan's slot, to write the row the cursor is on.
 */
static TupleTableSlot *
with_tid(TupleTableSlot *scan, const ItemPointerData *tid, Oid table)
{
	scan->tts_tid = *tid;
	scan->tts_tableOid = table;
	return scan;
}

static TupleTableSlot *
exec_scan(CustomScanState *node)
{
	LookupState *s = (LookupState *) node;
	TupleTableSlot *scan = node->ss.ss_ScanTupleSlot;
	TupleTableSlot *row;
	TupleTableSlot *child_scan;

	CHECK_FOR_INTERRUPTS();
	if (!s->decided)
		decide(s, node->ss.ps.state);
	if (s->hit)
	{
		HeapTupleData tuple;
		bool		forward = ScanDirectionIsForward(node->ss.ps.state->es_direction);

		if (s->position != (forward ? HIT_BEFORE : HIT_AFTER))
		{
			s->position = forward ? HIT_AFTER : HIT_BEFORE;
			return ExecClearTuple(scan);
		}
		s->position = HIT_ON;
		tuple.t_len = s->tuple_len;
		tuple.t_data = (HeapTupleHeader) s->tuple_buf;
		tuple.t_self = tuple.t_data->t_ctid;	/* the version's TID (memopt_fill) */
		tuple.t_tableOid = RelationGetRelid(node->ss.ss_currentRelation);
		ExecForceStoreHeapTuple(&tuple, scan, false);
		return project(s, with_tid(scan, &tuple.t_self, tuple.t_tableOid));
	}
	row = ExecProcNode(s->child);
	if (TupIsNull(row))
		return ExecClearTuple(scan);
	if (row->tts_tupleDescriptor->natts != scan->tts_tupleDescriptor->natts)
		elog(ERROR, "memopt: index scan returned %d columns where the table has %d",
			 row->tts_tupleDescriptor->natts, scan->tts_tupleDescriptor->natts);
	if (s->fill_pending)
		fill_from_child(s);
	ExecCopySlot(scan, row);
	child_scan = ((ScanState *) s->child)->ss_ScanTupleSlot;
	return project(s, with_tid(scan, &child_scan->tts_tid, child_scan->tts_tableOid));
}

static void
end_scan(CustomScanState *node)
{
	ExecEndNode(((LookupState *) node)->child);
}

static void
rescan(CustomScanState *node)
{
	LookupState *s = (LookupState *) node;

	s->decided = false;
	ExecReScan(s->child);
}

static void
explain_scan(CustomScanState *node, List *ancestors, ExplainState *es)
{
	LookupState *s = (LookupState *) node;

	if (s->usable)
	{
		StringInfoData cols;

		initStringInfo(&cols);
		for (int i = 0; i < s->pk.nkeys; i++)
			appendStringInfo(&cols, "%s%s", i ? ", " : "",
							 get_attname(s->pk.relid, s->pk.attnums[i], false));
		ExplainPropertyText("Memopt Key", cols.data, es);
	}
	if (es->analyze)
	{
		ExplainPropertyUInteger("Memopt Hits", NULL, s->hits, es);
		ExplainPropertyUInteger("Memopt Misses", NULL, s->misses, es);
		if (s->misses > 0)
			ExplainPropertyText("Memopt Last Miss", s->last_unregistered ? "unregistered" :
								memopt_miss_names[s->last_miss], es);
	}
}

void
memopt_scan_init(void)
{
	RegisterCustomScanMethods(&scan_methods);
	prev_pathlist_hook = set_rel_pathlist_hook;
	set_rel_pathlist_hook = pathlist_hook;
}
