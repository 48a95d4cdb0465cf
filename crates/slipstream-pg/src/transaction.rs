//! Transactions and savepoints.

use std::ops::{Deref, DerefMut};

use crate::{Client, Error};

/// The isolation level of a transaction.
///
/// ```no_run
/// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
/// use slipstream_pg::IsolationLevel;
/// let mut tx = client.build_transaction().isolation_level(IsolationLevel::RepeatableRead).start().await?;
/// let level: String = tx.query_one("SHOW transaction_isolation", &[]).await?.get(0)?;
/// assert_eq!(level, "repeatable read");
/// tx.commit().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IsolationLevel {
    /// READ COMMITTED (PostgreSQL's default).
    ReadCommitted,
    /// REPEATABLE READ.
    RepeatableRead,
    /// SERIALIZABLE.
    Serializable,
}

/// Options for [`Client::build_transaction`].
///
/// ```no_run
/// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
/// use slipstream_pg::IsolationLevel;
/// let tx = client.build_transaction().isolation_level(IsolationLevel::Serializable).read_only(true).start().await?;
/// tx.commit().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct TransactionBuilder<'a> {
    client: &'a mut Client,
    isolation: Option<IsolationLevel>,
    read_only: Option<bool>,
    deferrable: Option<bool>,
}

impl<'a> TransactionBuilder<'a> {
    /// Sets the isolation level.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// use slipstream_pg::{IsolationLevel, SqlState};
    /// let mut tx = client.build_transaction().isolation_level(IsolationLevel::Serializable).start().await?;
    /// match tx.execute("UPDATE accounts SET balance = balance - 10 WHERE id = 1", &[]).await {
    ///     Err(e) if e.code() == Some(SqlState::T_R_SERIALIZATION_FAILURE) => { /* retry the whole transaction */ }
    ///     other => { other?; }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn isolation_level(mut self, level: IsolationLevel) -> Self {
        self.isolation = Some(level);
        self
    }
    /// READ ONLY or READ WRITE.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// use slipstream_pg::SqlState;
    /// let mut tx = client.build_transaction().read_only(true).start().await?;
    /// let e = tx.batch_execute("CREATE TABLE t (x int)").await.unwrap_err();
    /// assert_eq!(e.code(), Some(SqlState::READ_ONLY_SQL_TRANSACTION));
    /// # Ok(()) }
    /// ```
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = Some(read_only);
        self
    }
    /// DEFERRABLE (only meaningful for serializable read-only transactions).
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// use slipstream_pg::IsolationLevel;
    /// // A long report that waits for a safe snapshot instead of risking a serialization failure.
    /// let mut tx = client
    ///     .build_transaction()
    ///     .isolation_level(IsolationLevel::Serializable)
    ///     .read_only(true)
    ///     .deferrable(true)
    ///     .start()
    ///     .await?;
    /// let on: String = tx.query_one("SHOW transaction_deferrable", &[]).await?.get(0)?;
    /// assert_eq!(on, "on");
    /// # Ok(()) }
    /// ```
    pub fn deferrable(mut self, deferrable: bool) -> Self {
        self.deferrable = Some(deferrable);
        self
    }
    /// Sends `BEGIN` with the options.
    ///
    /// Refused with [`ErrorKind::Usage`](crate::ErrorKind::Usage) inside a transaction (one
    /// reached through a [`Transaction`]'s `Deref`, or a `BEGIN` sent as SQL): use
    /// [`Transaction::transaction`] or [`Transaction::savepoint`] for a nested one.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// use slipstream_pg::ErrorKind;
    /// let mut tx = client.build_transaction().read_only(true).start().await?;
    /// // A second BEGIN through the first transaction is refused:
    /// assert_eq!(tx.build_transaction().start().await.unwrap_err().kind(), ErrorKind::Usage);
    /// let nested = tx.transaction().await?; // a savepoint instead
    /// nested.commit().await?;
    /// tx.commit().await?;
    /// # Ok(()) }
    /// ```
    pub async fn start(self) -> Result<Transaction<'a>, Error> {
        // The server only warns about a second BEGIN, and this guard's COMMIT or ROLLBACK
        // (a dropped guard's too) would end the outer transaction, whose later statements
        // would then commit one by one. The status is the server's only once what dropped
        // calls owe and dropped guards deferred is read; a settled connection costs nothing.
        if !self.client.conn.is_settled() || !self.client.conn.deferred.is_empty() {
            self.client.settle().await?;
        }
        if self.client.conn.tx_status == crate::TransactionStatus::Failed {
            let why = match &self.client.conn.deferred_failure {
                Some(failure) => failure.to_string(),
                None => "a statement in it failed".to_string(),
            };
            return Err(Error::usage(format!(
                "a failed transaction is open on this connection ({why}, and every statement \
                 fails until it ends): roll it back first (ROLLBACK, or the rollback of the \
                 Transaction or pipeline that began it), then begin again"
            )));
        }
        if self.client.conn.tx_status != crate::TransactionStatus::Idle {
            return Err(Error::usage(
                "a transaction is already open on this connection: use Transaction::transaction() \
                 or Transaction::savepoint() for a nested one (a second BEGIN would be ignored, \
                 and its COMMIT or ROLLBACK would end the outer transaction)",
            ));
        }
        let mut sql = String::from("BEGIN");
        if let Some(level) = self.isolation {
            sql.push_str(match level {
                IsolationLevel::ReadCommitted => " ISOLATION LEVEL READ COMMITTED",
                IsolationLevel::RepeatableRead => " ISOLATION LEVEL REPEATABLE READ",
                IsolationLevel::Serializable => " ISOLATION LEVEL SERIALIZABLE",
            });
        }
        if let Some(ro) = self.read_only {
            sql.push_str(if ro { " READ ONLY" } else { " READ WRITE" });
        }
        if let Some(d) = self.deferrable {
            sql.push_str(if d { " DEFERRABLE" } else { " NOT DEFERRABLE" });
        }
        // The ROLLBACK is owed before BEGIN is sent: if this future is dropped at any point
        // from here (a timeout, a `select!`), `tx`'s Drop defers it, and the next request
        // settles the connection and sends it if the BEGIN ran. A pool therefore never lends
        // the connection inside this transaction.
        let mut tx = Transaction {
            client: self.client,
            savepoint: None,
            depth: 0,
            done: false,
            ends: 0,
        };
        // A future leaked (`mem::forget`) from here on never drops `tx`: the next request
        // defers the ROLLBACK instead (see `Connection::begin_unguarded`), which `tx` now
        // owns until it is handed out or dropped.
        let queued = match tx.client.conn.start_request().await {
            Ok(()) => tx.client.queue_simple(&sql),
            Err(e) => Err(e),
        };
        if let Err(e) = queued {
            // Nothing of the BEGIN was sent: no ROLLBACK is owed either.
            tx.done = true;
            return Err(e);
        }
        tx.client.conn.begin_unguarded = true;
        let begun = tx.client.read_simple(None).await;
        tx.client.conn.begin_unguarded = false;
        if let Err(e) = begun {
            // BEGIN failed: no transaction was opened.
            tx.done = true;
            return Err(e);
        }
        tx.ends = tx.client.conn.transaction_ends;
        Ok(tx)
    }
}

/// An open transaction (or savepoint). Use it like the [`Client`] it borrows.
///
/// It ends with [`Transaction::commit`] or [`Transaction::rollback`]; dropped without either, it
/// is rolled back with the connection's next request.
///
/// ```no_run
/// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
/// let mut tx = client.transaction().await?;
/// tx.execute("INSERT INTO log VALUES ('a')", &[]).await?;
/// {
///     let mut sp = tx.savepoint("maybe").await?;
///     sp.execute("INSERT INTO log VALUES ('b')", &[]).await?;
///     sp.rollback().await?; // undoes 'b' only
/// }
/// tx.commit().await?; // keeps 'a'
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Transaction<'a> {
    client: &'a mut Client,
    savepoint: Option<String>,
    depth: u32,
    done: bool,
    /// The connection's `transaction_ends` once this block (or savepoint) was open: if it
    /// moves, SQL the guard did not send ended the transaction (see `check_still_open`).
    ends: u64,
}

impl Client {
    /// Starts a transaction with `BEGIN`.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// let mut tx = client.transaction().await?;
    /// tx.execute("UPDATE accounts SET balance = balance - 10 WHERE id = 1", &[]).await?;
    /// tx.execute("UPDATE accounts SET balance = balance + 10 WHERE id = 2", &[]).await?;
    /// tx.commit().await?; // both or neither; dropping `tx` instead rolls back
    /// # Ok(()) }
    /// ```
    pub async fn transaction(&mut self) -> Result<Transaction<'_>, Error> {
        self.build_transaction().start().await
    }

    /// Starts building a transaction with an isolation level or access mode.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// use slipstream_pg::IsolationLevel;
    /// let tx = client
    ///     .build_transaction()
    ///     .isolation_level(IsolationLevel::RepeatableRead)
    ///     .read_only(true)
    ///     .start()
    ///     .await?;
    /// tx.commit().await?;
    /// # Ok(()) }
    /// ```
    pub fn build_transaction(&mut self) -> TransactionBuilder<'_> {
        TransactionBuilder {
            client: self,
            isolation: None,
            read_only: None,
            deferrable: None,
        }
    }
}

impl<'a> Transaction<'a> {
    /// Commits (or releases the savepoint).
    ///
    /// If a statement in the transaction failed, PostgreSQL turns `COMMIT` into a rollback; this
    /// returns an error then instead of pretending the work was saved. A savepoint in which a
    /// statement failed is rolled back the same way (PostgreSQL would refuse its `RELEASE` and
    /// leave the enclosing transaction failed), with an
    /// [`ErrorKind::Aborted`](crate::ErrorKind::Aborted) error naming it; the enclosing
    /// transaction goes on.
    ///
    /// A transaction already ended through SQL the guard did not send (a `COMMIT`, `ROLLBACK`
    /// or `PREPARE TRANSACTION` sent as a statement or in a pipeline) is an
    /// [`ErrorKind::Usage`](crate::ErrorKind::Usage) error: that statement decided the outcome.
    /// So is one ended by a `COMMIT` after which SQL began another (`COMMIT AND CHAIN`,
    /// `COMMIT; BEGIN`); that other transaction is rolled back (a `ROLLBACK AND CHAIN` is not
    /// noticed: its tag is also `ROLLBACK TO SAVEPOINT`'s).
    /// The same for a savepoint whose transaction such SQL ended. A savepoint ended through SQL
    /// (`RELEASE SAVEPOINT`, `ROLLBACK TO` an earlier one) is the server's 3B001 error, saying
    /// that the failure aborted the enclosing transaction.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// let mut tx = client.transaction().await?;
    /// tx.execute("INSERT INTO log VALUES ('kept')", &[]).await?;
    /// tx.commit().await?;
    /// # Ok(()) }
    /// ```
    pub async fn commit(mut self) -> Result<(), Error> {
        self.settle_then_end().await?;
        self.check_still_open("committed").await?;
        // Taken now: the COMMIT's own ReadyForQuery (idle) forgets it.
        let dropped_failed = self.client.conn.deferred_failure.take();
        match &self.savepoint {
            Some(name) if self.client.conn.tx_status == crate::TransactionStatus::Failed => {
                // PostgreSQL refuses RELEASE in a failed transaction (25P02) and, unlike
                // COMMIT, does not turn it into a rollback: the guard would be spent and the
                // enclosing transaction left failed, which is what a savepoint exists to
                // prevent. A savepoint cannot be opened in a failed transaction, so the
                // failure came after this one: undo it, as COMMIT undoes a failed transaction.
                let sql = self.rollback_sql();
                let done = self.client.batch_execute(&sql).await;
                self.check_savepoint_exists(done, "rolled back")?;
                let what = match &dropped_failed {
                    Some(failure) => failure.to_string(),
                    None => "a statement after it had failed".to_string(),
                };
                Err(Error::rolled_back(format!(
                    "savepoint {} was rolled back, not released, because {what}: nothing done \
                     since it was opened was kept, and the enclosing transaction goes on",
                    quote_ident(name)
                )))
            }
            Some(name) => {
                let sql = format!("RELEASE SAVEPOINT {}", quote_ident(name));
                let done = self.client.batch_execute(&sql).await;
                self.check_savepoint_exists(done, "released")
            }
            None => {
                let tag = self.client.run_simple("COMMIT", None).await?;
                if tag == "ROLLBACK" {
                    if let Some(failure) = &dropped_failed {
                        return Err(Error::rolled_back(format!(
                            "COMMIT rolled the transaction back because {failure}; nothing was \
                             saved"
                        )));
                    }
                    return Err(Error::rolled_back(
                        "COMMIT rolled the transaction back because a statement in it had failed; nothing was saved",
                    ));
                }
                Ok(())
            }
        }
    }

    /// Rolls back (to the savepoint, for a savepoint). Like [`Transaction::commit`], an error
    /// if the transaction was already ended through SQL (a `COMMIT` sent as a statement may
    /// have saved what this would undo).
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// let mut tx = client.transaction().await?;
    /// tx.execute("DELETE FROM log", &[]).await?;
    /// tx.rollback().await?; // nothing was deleted
    /// # Ok(()) }
    /// ```
    pub async fn rollback(mut self) -> Result<(), Error> {
        self.settle_then_end().await?;
        self.check_still_open("rolled back").await?;
        let sql = self.rollback_sql();
        let done = self.client.batch_execute(&sql).await;
        self.check_savepoint_exists(done, "rolled back")
    }

    /// Opens a named savepoint inside this transaction.
    ///
    /// A future dropped before it returns leaves no savepoint behind: one whose `SAVEPOINT`
    /// was already sent is released with the connection's next request, as a dropped guard's
    /// is rolled back.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// let mut tx = client.transaction().await?;
    /// tx.execute("INSERT INTO log VALUES ('kept')", &[]).await?;
    /// {
    ///     let mut sp = tx.savepoint("try_it").await?;
    ///     sp.execute("INSERT INTO log VALUES ('undone')", &[]).await?;
    ///     sp.rollback().await?; // ROLLBACK TO SAVEPOINT try_it
    /// }
    /// tx.commit().await?; // 'kept' only
    /// # Ok(()) }
    /// ```
    pub async fn savepoint(&mut self, name: &str) -> Result<Transaction<'_>, Error> {
        let name_sql = quote_ident(name);
        self.client.conn.start_request().await?;
        self.client.queue_simple(&format!("SAVEPOINT {name_sql}"))?;
        // From here the SAVEPOINT goes to the server whatever happens to this future. Dropped
        // before its reply is read (a timeout, a `select!`), it would leave the savepoint open
        // with no guard, and an enclosing savepoint of the same name (a recursive helper's)
        // would be shadowed: PostgreSQL's ROLLBACK TO takes the newest, so that guard's
        // rollback would stop here and report as undone work its transaction then commits.
        // So the drop defers a RELEASE, run with the next request: nothing ran inside the
        // savepoint yet, and what runs after the drop belongs to the enclosing one, as without
        // it. (An empty name never makes a savepoint: the server refuses it.) In a failed
        // transaction both are refused, and that refusal is not a failure of the deferred
        // work (see `Connection::discard`). `deferred` is empty once the request has started,
        // and nothing else adds to it before this call returns.
        let armed = !name.is_empty();
        if armed {
            let release = format!("RELEASE SAVEPOINT {name_sql}");
            self.client.conn.deferred.push(release);
        }
        let done = self.client.read_simple(None).await;
        if armed {
            self.client.conn.deferred.pop();
        }
        done?;
        let ends = self.client.conn.transaction_ends;
        Ok(Transaction {
            client: self.client,
            savepoint: Some(name.to_string()),
            depth: self.depth + 1,
            done: false,
            ends,
        })
    }

    /// Opens a savepoint with a generated name: a nested transaction.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// let mut tx = client.transaction().await?;
    /// let mut nested = tx.transaction().await?; // SAVEPOINT sp_1
    /// nested.execute("INSERT INTO log VALUES ('maybe')", &[]).await?;
    /// nested.rollback().await?;                  // ROLLBACK TO SAVEPOINT sp_1
    /// tx.commit().await?;
    /// # Ok(()) }
    /// ```
    pub async fn transaction(&mut self) -> Result<Transaction<'_>, Error> {
        let name = format!("sp_{}", self.depth + 1);
        self.savepoint(&name).await
    }

    /// Settles the connection, then marks the transaction ended. Once settled, the caller's
    /// next request is queued without an await, so a future dropped at any point either has
    /// its COMMIT/ROLLBACK queued or (dropped while settling) leaves `done` unset and the
    /// rollback to `Drop`: never neither.
    async fn settle_then_end(&mut self) -> Result<(), Error> {
        // This future owns the guard: leaked while it settles, it drops nothing, so the
        // connection holds the rollback the guard's Drop would have deferred.
        let rollback = self.rollback_sql();
        self.client.conn.settle_to_end(self.depth, rollback).await?;
        self.done = true;
        Ok(())
    }

    /// Refuses to end a transaction that SQL the guard did not send has ended already. The
    /// server would only warn ("there is no transaction in progress") and report `COMMIT` or
    /// `ROLLBACK` as done, and the caller would read the opposite of what happened: the work
    /// rolled back by a pipeline's `rollback()` "committed", or a `DELETE` committed by a
    /// `COMMIT` statement "rolled back". Settled, the status is the server's; BEGIN succeeded,
    /// so `Idle` means the block was ended. A block ended by a `COMMIT` and begun again (`COMMIT
    /// AND CHAIN`, `COMMIT; BEGIN`) is in a transaction again: the `COMMIT`'s tag tells (see
    /// `Connection::transaction_ends`), and that new block, which this guard did not begin,
    /// is rolled back rather than ended as if it were the guard's. (A `ROLLBACK AND CHAIN`
    /// cannot be told from a `ROLLBACK TO SAVEPOINT`: both answer `ROLLBACK`.) A savepoint's
    /// `RELEASE` or `ROLLBACK TO` would fail by itself there, but with 25P01 "can only be used
    /// in transaction blocks", or 3B001 in the new block, which does not say that the work
    /// meant to be undone may have been committed.
    async fn check_still_open(&mut self, verb: &str) -> Result<(), Error> {
        let idle = self.client.conn.tx_status == crate::TransactionStatus::Idle;
        if !idle && self.client.conn.transaction_ends == self.ends {
            return Ok(());
        }
        let what = match &self.savepoint {
            Some(name) => format!(
                "the transaction of savepoint {} had already ended",
                quote_ident(name)
            ),
            None => "this transaction had already ended".to_string(),
        };
        let after = if idle {
            "statements after it ran in autocommit"
        } else if self.savepoint.is_none() {
            // Dropped while this runs, the guard's Drop defers the ROLLBACK instead.
            self.done = false;
            self.client.batch_execute("ROLLBACK").await?;
            self.done = true;
            "the transaction begun after it (COMMIT AND CHAIN, or a BEGIN) was rolled back now"
        } else {
            "statements after it ran in the transaction begun after it (COMMIT AND CHAIN, or a \
             BEGIN), which the enclosing transaction's commit or rollback refuses in turn and \
             rolls back"
        };
        Err(Error::usage(format!(
            "{what} through SQL it did not send (a COMMIT, ROLLBACK or PREPARE TRANSACTION \
             sent as a statement or in a pipeline), so nothing was {verb} now: its work is as \
             that statement left it, and {after}"
        )))
    }

    /// Explains a savepoint's `RELEASE` or `ROLLBACK TO` that failed because SQL the guard did
    /// not send ended the savepoint (a `RELEASE SAVEPOINT`, or a `ROLLBACK TO` an earlier one).
    /// Inside a block that failure aborts the enclosing transaction: the server's bare
    /// "savepoint does not exist" reads as if nothing else happened, and a caller going on
    /// would lose the rest of its work at `COMMIT`. (Outside a block, after the transaction
    /// was ended through SQL, the server's own error says so.)
    fn check_savepoint_exists(&self, done: Result<(), Error>, verb: &str) -> Result<(), Error> {
        let Err(e) = done else { return Ok(()) };
        match &self.savepoint {
            Some(name)
                if e.code() == Some(crate::SqlState::S_E_INVALID_SPECIFICATION)
                    && self.client.conn.tx_status == crate::TransactionStatus::Failed =>
            {
                Err(e.context(format!(
                    "savepoint {} no longer exists (a RELEASE SAVEPOINT, or a ROLLBACK TO an \
                     earlier savepoint, sent as SQL ended it), so nothing was {verb} now; the \
                     failed statement aborted the enclosing transaction: roll it back (an \
                     enclosing savepoint's commit or rollback rolls back to that savepoint)",
                    quote_ident(name)
                )))
            }
            _ => Err(e),
        }
    }

    fn rollback_sql(&self) -> String {
        match &self.savepoint {
            Some(name) => {
                let name = quote_ident(name);
                format!("ROLLBACK TO SAVEPOINT {name}; RELEASE SAVEPOINT {name}")
            }
            None => "ROLLBACK".to_string(),
        }
    }
}

impl Deref for Transaction<'_> {
    type Target = Client;
    fn deref(&self) -> &Client {
        self.client
    }
}

impl DerefMut for Transaction<'_> {
    fn deref_mut(&mut self) -> &mut Client {
        self.client
    }
}

impl Drop for Transaction<'_> {
    fn drop(&mut self) {
        // This guard's own ROLLBACK, below, ends what its BEGIN opened.
        self.client.conn.begin_unguarded = false;
        // Left by this guard's own `commit()` or `rollback()` dropped while settling (the
        // rollback below is the same), or by a deeper guard's leaked there, which ends first.
        if let Some((depth, rollback)) = self.client.conn.guard_ending.take()
            && depth != self.depth
        {
            self.client.conn.defer_rollback(rollback);
        }
        if !self.done {
            let sql = self.rollback_sql();
            self.client.conn.defer_rollback(sql);
        }
    }
}

fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}
