//! A custom workload in Rust: two transaction types with per-user state, run by slipstream's
//! runner for 5 seconds at 4 users, then printed as the report table.
//!
//! ```sh
//! cargo run --release -p slipstream-bench --example custom_transaction -- postgres://postgres@127.0.0.1/postgres
//! ```

use std::time::Duration;

use rand::Rng;
use slipstream_bench::report::{self, Labeled};
use slipstream_bench::{self as bench, RunConfig, Session, Transaction, TxError, Workload};

/// Reads one account. `init` runs once per user: a place to look things up or warm a cache.
#[derive(Default)]
struct ReadAccount {
    accounts: i64,
}

impl Transaction for ReadAccount {
    async fn init(&mut self, s: &mut Session) -> Result<(), TxError> {
        self.accounts = s
            .client()?
            .query_one("SELECT count(*) FROM demo_accounts", &[])
            .await?
            .get(0)?;
        Ok(())
    }

    async fn execute(&mut self, s: &mut Session) -> Result<(), TxError> {
        let id = s.rng().random_range(1..=self.accounts);
        s.client()?
            .query_opt("SELECT balance FROM demo_accounts WHERE id = $1", &[&id])
            .await?;
        s.count().selects += 1;
        Ok(())
    }
}

/// Moves money between two accounts in one transaction; a user "thinks" between the steps.
#[derive(Default)]
struct Transfer {
    accounts: i64,
}

impl Transaction for Transfer {
    async fn init(&mut self, s: &mut Session) -> Result<(), TxError> {
        self.accounts = s
            .client()?
            .query_one("SELECT count(*) FROM demo_accounts", &[])
            .await?
            .get(0)?;
        Ok(())
    }

    async fn execute(&mut self, s: &mut Session) -> Result<(), TxError> {
        let (from, to) = (
            s.rng().random_range(1..=self.accounts),
            s.rng().random_range(1..=self.accounts),
        );
        let client = s.client()?;
        let mut tx = client.transaction().await?;
        tx.execute(
            "UPDATE demo_accounts SET balance = balance - 1 WHERE id = $1",
            &[&from],
        )
        .await?;
        tx.execute(
            "UPDATE demo_accounts SET balance = balance + 1 WHERE id = $1",
            &[&to],
        )
        .await?;
        tx.commit().await?;
        let c = s.count();
        c.updates += 2;
        c.commits += 1;
        Ok(())
    }
}

fn main() -> anyhow::Result<()> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1/postgres".into());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let mut c = slipstream_pg::connect(&url).await?;
        c.batch_execute(
            "CREATE TABLE IF NOT EXISTS demo_accounts (id bigint PRIMARY KEY, balance bigint NOT NULL);
             INSERT INTO demo_accounts SELECT g, 1000 FROM generate_series(1, 10000) g ON CONFLICT DO NOTHING;",
        )
        .await?;
        anyhow::Ok(())
    })?;

    let workload = Workload::new("accounts")
        .transaction("read-account", 80, ReadAccount::default)
        .transaction("transfer", 20, Transfer::default);
    let mut config = RunConfig::new(Some(url));
    config.users = 4;
    config.duration = Duration::from_secs(5);
    config.warmup = Duration::from_secs(1);
    let run = rt.block_on(bench::run(&workload, &config, tokio::signal::ctrl_c()))?;
    for line in report::describe(&run) {
        println!("{line}");
    }
    let runs = [Labeled {
        label: "accounts".into(),
        run,
    }];
    println!("{}", report::table(&runs).render());
    runs[0].run.write_json("accounts.json".as_ref())?;
    Ok(())
}
