-- memopt.get returns what SELECT * FROM t WHERE pk = key returns, and that reads t's
-- inheritance children too.  enable_read refuses a table with children, but one can be
-- added to an enabled table.
CREATE TABLE inh_parent (id int PRIMARY KEY, v text);
INSERT INTO inh_parent VALUES (1, 'parent');
SELECT memopt.enable_read('inh_parent');
SELECT memopt.get('inh_parent', 1);
CREATE TABLE inh_child () INHERITS (inh_parent);
INSERT INTO inh_child VALUES (1, 'child one'), (2, 'child two');
SELECT * FROM inh_parent WHERE id = 2;
SELECT memopt.get('inh_parent', 2);
SELECT memopt.get_many('inh_parent', '{1,2}'::bigint[]);
-- ONLY is served by the scan; the child alone is not enabled.
SELECT * FROM ONLY inh_parent WHERE id = 1;
SELECT line FROM explain_node('SELECT * FROM ONLY inh_parent WHERE id = 1') line
 WHERE line LIKE '%Memopt%';
SELECT line FROM explain_node('SELECT * FROM inh_parent WHERE id = 1') line
 WHERE line LIKE '%Memopt%';
-- Without children again, the lookup serves the table.
DROP TABLE inh_child;
SELECT memopt.get('inh_parent', 1);
DROP TABLE inh_parent;
